"""The built-in op library loads per op (dsl/opgraph/registry.py, ops/library_index.py): a lookup
imports only the modules registering that op, a model read back from an ``.opdsl`` file only those
its nodes name, and questions about the whole table (an unknown op, ``all_ops``) the whole library.
The index is generated (``python -m ops.library_index_build``) and checked against a full import."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dsl.opgraph import registry

ROOT = Path(__file__).resolve().parents[2]


def _child(code: str, *argv: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_index_is_up_to_date():
    out = subprocess.run([sys.executable, "-m", "ops.library_index_build", "--check"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr


def test_every_registered_builtin_op_is_in_the_index_with_its_module():
    from ops.library_index import OPS
    registry.load_builtin_library()
    for cls in registry.all_ops():
        if not registry.is_builtin(cls):
            continue
        modules = OPS.get(f"{cls.domain}::{cls.op_type}")
        assert modules, f"{cls.domain}::{cls.op_type} ({cls.__module__}) is not in ops/library_index.py"
        assert all(m.startswith("ops.") for m in modules)


LOOKUP = '''
import json, sys
import dsl
from dsl.opgraph import registry
relu = registry.lookup("", "Relu", 14)
after_one = sorted(m for m in sys.modules if m.startswith("ops."))
class MyGelu(dsl.Op):  # a user op of a built-in type, registered before the library's: it still wins
    def infer(self, x):
        return x.spec
dsl.op("Gelu", since=1)(MyGelu)
gelu = registry.lookup("", "Gelu", 20)
try:
    registry.lookup("", "Reluu", 14)
    unknown = ""
except dsl.UnknownOpError as e:
    unknown = str(e)
print(json.dumps({"relu": relu.__module__ + "." + relu.__name__, "builtin": registry.is_builtin(relu),
                  "after_one": after_one, "gelu_is_user": gelu is MyGelu, "unknown": unknown,
                  "library_after_unknown": "ops.library" in sys.modules}))
'''


def test_a_lookup_imports_only_what_it_names_and_an_unknown_op_the_whole_library():
    r = _child(LOOKUP)
    assert r["relu"] == "ops.elementwise.Relu" and r["builtin"]
    assert "ops.library" not in r["after_one"] and "ops.recurrent" not in r["after_one"], r["after_one"]
    assert len(r["after_one"]) < 10
    assert r["gelu_is_user"]
    assert "closest known ops" in r["unknown"] and "Relu" in r["unknown"]  # the whole table's suggestions
    assert r["library_after_unknown"]


LOAD_MODEL = '''
import json, sys
import numpy as np
import dsl
model = dsl.load_model(sys.argv[1])
mods = sorted(m for m in sys.modules if m.startswith("ops."))
y = model.run({"x": np.load(sys.argv[2])})["y"]
print(json.dumps({"modules": mods, "y": y.tolist()}))
'''


def test_a_saved_model_imports_only_the_op_modules_it_names(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    import dsl
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "lazy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])], [numpy_helper.from_array(w, "w")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    path = tmp_path / "lazy.opdsl"
    dsl.load_onnx(data, backend="interpreter", fuse=False).save(path)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = _child(LOAD_MODEL, str(path), str(tmp_path / "x.npy"))
    np.testing.assert_allclose(np.array(r["y"], np.float32), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    assert "ops.library" not in r["modules"], "loading the model imported the whole op library"
    assert {"ops.matmul", "ops.elementwise"} <= set(r["modules"])
    assert not {"ops.recurrent", "ops.signal", "ops.attention"} & set(r["modules"])
