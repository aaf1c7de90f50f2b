"""Kernels, ops, graphs and models pickle with the standard pickle module and run in a fresh
process (docs/dask.md, "Pickling"): what ``__main__`` defined travels by value with its source,
a package op with its package's files, a raw OpenCL op with its source and hooks."""
import linecache
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dsl
import ops
from dsl import In, Out, f32

ROOT = Path(__file__).resolve().parents[2]

# Defines everything in __main__, runs it, and pickles objects with the expected results.
MAKE = '''
import pickle, sys
import numpy as np
import dsl, ops
from dsl import In, Out, f32
from dsl.runtime.raw_opencl import RawOpenCL

BACKEND, PACKAGE, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
GAIN = 2.0

@dsl.func
def shifted(v):
    return v + OFFSET

OFFSET = 0.5

@dsl.kernel
def scale_shift(x: In[f32], y: Out[f32], alpha: f32 = 1.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = shifted(x.flat[i]) * GAIN * alpha

def make_offset_kernel(bias):          # a closure: the kernel reads `bias` from its cell
    @dsl.kernel(threads=2)
    def add_bias(x: In[f32], y: Out[f32]):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = x.flat[i] + bias
    return add_bias

add_bias = make_offset_kernel(0.25)
wide = scale_shift.variant(defines={"GAIN": 4.0})

@dsl.op("ScaleShift", domain="test.pickle")
class ScaleShift(dsl.Op):
    alpha: float = 1.0
    def infer(self, x):
        return x.spec
    def verify(self, x):
        if x.dtype != dsl.f32:
            raise dsl.VerifyError(f"x must be f32, got {x.dtype}")
    kernels = {"default": scale_shift}

NEG = """
__kernel void neg(__global const float *x, __global float *y) { size_t i = get_global_id(0); y[i] = -x[i]; }
"""
neg = RawOpenCL("neg", NEG, inputs=["x"], outputs=["y"], select=lambda dtypes, params: ("neg", ""),
                enqueue=lambda ins, outs, params: ((ins[0].size,), None),
                shape=lambda ins, params: [(ins[0].shape, ins[0].dtype)])

@dsl.op("Neg", domain="test.pickle")
class Neg(dsl.Op):
    def infer(self, x):
        return x.spec
    kernels = {"default": neg}

g = dsl.Graph("g")
x = g.input("x", ("batch", 8), dsl.f32)
h = ops.Relu(ScaleShift(alpha=3.0)(x))
if BACKEND == "opencl":
    h = Neg()(h)
g.output(h, "y")
model = g.compile(backend=BACKEND)

sys.path.insert(0, PACKAGE + "/..")
import importlib.util
spec = importlib.util.spec_from_file_location("build_model", PACKAGE + "/build_model.py")
build_model = importlib.util.module_from_spec(spec); spec.loader.exec_module(build_model)
package_model = dsl.load_onnx(build_model.build(), packages=[PACKAGE], backend=BACKEND)

xv = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
xq = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)

def launch(k):
    y = np.empty_like(xv)
    k(xv, y, backend=BACKEND)
    return y

expected = {"model": model.run({"x": xv})["y"], "package": package_model.run({"x": xq})["y"],
            "kernel": launch(scale_shift), "wide": launch(wide), "closure": launch(add_bias),
            "op": ScaleShift(alpha=2.0)(xv, backend=BACKEND)}
np.testing.assert_allclose(expected["wide"], 2 * expected["kernel"], rtol=1e-6)
with open(OUT, "wb") as f:
    pickle.dump({"model": model, "package": package_model, "kernel": scale_shift, "wide": wide,
                 "closure": add_bias, "op": ScaleShift(alpha=2.0), "graph": g, "xv": xv, "xq": xq,
                 "expected": expected}, f)
'''

# A fresh process without the package folder: unpickle, run, compare.
LOAD = '''
import pickle, sys
import numpy as np
BACKEND, PATH = sys.argv[1], sys.argv[2]
d = pickle.load(open(PATH, "rb"))
want, xv = d["expected"], d["xv"]

def launch(k):
    y = np.empty_like(xv)
    k(xv, y, backend=BACKEND)
    return y

np.testing.assert_allclose(d["model"].run({"x": xv})["y"], want["model"], rtol=1e-6)
np.testing.assert_allclose(d["graph"].compile(backend=BACKEND).run({"x": xv})["y"], want["model"], rtol=1e-6)
np.testing.assert_allclose(d["package"].run({"x": d["xq"]})["y"], want["package"], rtol=1e-6)
for name in ("kernel", "wide", "closure"):
    np.testing.assert_allclose(launch(d[name]), want[name], rtol=1e-6, err_msg=name)
np.testing.assert_allclose(d["op"](xv, backend=BACKEND), want["op"], rtol=1e-6)
assert d["op"].alpha == 2.0 and type(d["op"]).op_type == "ScaleShift"
print("unpickled and ran", sorted(d))
'''


def _python(script: Path, *args, cwd: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script), *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def test_main_kernels_ops_models_and_packages_run_in_a_fresh_process(backend, tmp_path):
    package = tmp_path / "qaic_package"
    shutil.copytree(ROOT / "examples" / "qaic_package", package)
    (tmp_path / "make.py").write_text(MAKE)
    (tmp_path / "load.py").write_text(LOAD)
    out = tmp_path / "objects.pkl"
    _python(tmp_path / "make.py", backend, package, out, cwd=tmp_path)
    shutil.rmtree(package)  # the receiving process has no copy of the package: the pickle carries it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert "unpickled and ran" in _python(tmp_path / "load.py", backend, out, cwd=elsewhere)


# ---------------------------------------------------------------- in this process

def test_importable_kernels_ops_and_variants_pickle_by_reference():
    from ops.elementwise import binary_kernel
    assert pickle.loads(pickle.dumps(binary_kernel)) is binary_kernel
    small = pickle.dumps(binary_kernel)
    assert b"binary_kernel" in small and len(small) < 200  # a name, not a source
    variant = binary_kernel.variant(defines={})
    back = pickle.loads(pickle.dumps(variant))
    assert back.base is binary_kernel and back.defines == variant.defines
    relu = ops.LeakyRelu(alpha=0.3)
    assert pickle.loads(pickle.dumps(relu)) == relu


def test_autotuned_kernel_pickles_with_its_configs(backend):
    @dsl.autotune(configs=[{"STEP": 1}, {"STEP": 2}])
    @dsl.kernel
    def strided_copy(x: In[f32], y: Out[f32], STEP: dsl.const[dsl.i32] = 1):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = x.flat[i] * 3.0
    back = pickle.loads(pickle.dumps(strided_copy))
    assert back.configs == [{"STEP": 1}, {"STEP": 2}] and back is not strided_copy
    x = np.arange(10, dtype=np.float32)
    y = np.empty_like(x)
    back(x, y, backend=backend)
    np.testing.assert_array_equal(y, 3 * x)


def test_graph_pickles_flat_so_deep_graphs_do_not_recurse():
    g = dsl.Graph("deep")
    t = g.input("x", ("n",), dsl.f32)
    for _ in range(600):  # linked nodes pickled as objects would nest ~6 pickle frames per node
        t = ops.Relu(t)
    g.output(t, "y")
    back = pickle.loads(pickle.dumps(g))
    assert str(back) == str(g)
    assert back.nodes[-1].inputs[0] is back.nodes[-2].outputs[0]
    assert back.tensors["x"] is back.inputs[0] and back.outputs[0].producer is back.nodes[-1]


def test_model_round_trip_recompiles_and_keeps_constants_read_only(backend):
    g = dsl.Graph("affine")
    x = g.input("x", ("batch", 3), dsl.f32)
    w = g.constant("w", np.array([1.0, -2.0, 0.5], np.float32))
    g.output(ops.Add(ops.Mul(x, w), w), "y")
    model = g.compile(backend=backend)
    back = pickle.loads(pickle.dumps(model))
    assert back.backend == backend and back is not model
    assert pickle.loads(pickle.dumps(model)) is back  # arriving again (each Dask compute): the same model
    assert not back.graph.constants["w"].flags.writeable
    xv = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    for _ in range(2):  # a second run reuses the plan and must not have written the constant
        np.testing.assert_allclose(back.run({"x": xv})["y"], model.run({"x": xv})["y"], rtol=1e-6)


def test_model_options_survive_pickling():
    """A model compiled without rewrites keeps its copying Concat plan and its tiling choice."""
    g = dsl.Graph("cat")
    x = g.input("x", (2, 3), dsl.f32)
    g.output(ops.Concat(ops.Relu(x), ops.Neg(x), axis=0), "y")
    model = g.compile(backend="interpreter", fuse=False, tiling=False)
    back = pickle.loads(pickle.dumps(model))
    assert (back.concat_inplace, back.tiling) == (model.concat_inplace, model.tiling) == (False, 0)
    xv = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    np.testing.assert_array_equal(back.run({"x": xv})["y"], np.concatenate([np.maximum(xv, 0), -xv]))


def test_a_kernel_without_source_is_a_clear_error():
    code = textwrap.dedent('''
        @dsl.kernel
        def ghost(x: In[f32], y: Out[f32]):
            lo, hi = dsl.split(x.size)
            for i in range(lo, hi):
                y.flat[i] = x.flat[i]
    ''')
    name = "<generated ghost>"
    lines = code.splitlines(keepends=True)
    linecache.cache[name] = (len(code), None, lines, name)  # exec'd code registered, as IPython does
    scope = {"dsl": dsl, "In": In, "Out": Out, "f32": f32}
    exec(compile(code, name, "exec"), scope)
    del linecache.cache[name]  # ... and later forgotten: the source is gone
    with pytest.raises(pickle.PicklingError, match=r"cannot pickle kernel 'ghost' \(defined at <generated ghost>"
                       r":2\): its source code is not available.*importable module"):
        pickle.dumps(scope["ghost"])


def test_a_func_made_by_exec_without_source_is_a_clear_error():
    scope = {}
    exec("def helper(v):\n    return v + 1.0\n", scope)
    f = dsl.func(scope["helper"])
    with pytest.raises(pickle.PicklingError, match=r"cannot pickle @dsl.func 'helper'.*source code is not available"):
        pickle.dumps(f)


def test_a_local_op_class_travels_by_value_with_super_closures_and_kernels(backend):
    table = np.array([1.0, 2.0, 3.0], np.float32)  # a closure the method reads

    @dsl.kernel
    def triple(x: In[f32], y: Out[f32]):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = x.flat[i] * 3.0

    class Base(dsl.Op):
        def infer(self, x):
            return x.spec

    class Triple(Base):
        factor: float = 2.0

        def infer(self, x):
            return super().infer(x)  # the __class__ cell must point at the rebuilt class

        def weight(self):
            return self.factor * float(table.sum())
        kernels = {"default": triple}

    op = Triple(factor=3.0)
    back = pickle.loads(pickle.dumps(op))
    assert type(back) is not Triple and type(back).__name__ == "Triple" and back == type(back)(factor=3.0)
    assert type(pickle.loads(pickle.dumps(op))) is type(back)  # one rebuilt class per original class
    assert back.weight() == 18.0
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(back(x, backend=backend), 3 * x)


# ---------------------------------------------------------------- a worker without the user's module

USER_MODULE = '''
from __future__ import annotations  # annotations as text: the rebuilt kernel still finds In, Out, f32
import numpy as np
import dsl
from dsl import In, Out, f32

OFFSET = 0.5

@dsl.func
def shifted(v):
    return v + OFFSET

@dsl.kernel
def scale_shift(x: In[f32], y: Out[f32], alpha: f32 = 1.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = shifted(x.flat[i] * alpha)

@dsl.autotune(configs=[{"STEP": 1}, {"STEP": 2}])
@dsl.kernel
def tripled(x: In[f32], y: Out[f32], STEP: dsl.const[dsl.i32] = 1):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 3.0

@dsl.op("UserScale", domain="test.user_module")
class UserScale(dsl.Op):
    alpha: float = 1.0
    def infer(self, x):
        return x.spec
    kernels = {"default": scale_shift}
'''

MAKE_WITH_MODULE = '''
import pickle, sys
sys.path.insert(0, sys.argv[1])
import user_kernels_for_pickle as U
objects = {"kernel": U.scale_shift, "tuned": U.tripled, "op": U.UserScale(alpha=2.0)}
for name, obj in objects.items():  # where the module exists, it is still the same object
    back = pickle.loads(pickle.dumps(obj))
    assert back is obj or back == obj, name
with open(sys.argv[2], "wb") as f:
    pickle.dump(objects, f)
'''

LOAD_WITHOUT_MODULE = '''
import pickle, sys
import numpy as np
BACKEND = sys.argv[2]
try:
    import user_kernels_for_pickle
    raise SystemExit("the module is importable here: this test proves nothing")
except ModuleNotFoundError:
    pass
d = pickle.load(open(sys.argv[1], "rb"))
x = np.linspace(-2, 2, 16).astype(np.float32)
y = np.empty_like(x)
d["kernel"](x, y, alpha=2.0, backend=BACKEND)
np.testing.assert_allclose(y, x * 2.0 + 0.5, rtol=1e-6)
d["tuned"](x, y, backend=BACKEND)
np.testing.assert_allclose(y, 3 * x, rtol=1e-6)
np.testing.assert_allclose(d["op"](x, backend=BACKEND), x * 2.0 + 0.5, rtol=1e-6)
assert "user_kernels_for_pickle" not in sys.modules
print("rebuilt from the carried source")
'''


def test_objects_of_a_module_the_worker_lacks_are_rebuilt_from_carried_source(backend, tmp_path):
    here, elsewhere = tmp_path / "client", tmp_path / "worker"
    here.mkdir()
    elsewhere.mkdir()
    (here / "user_kernels_for_pickle.py").write_text(USER_MODULE)
    for name, text in (("make.py", MAKE_WITH_MODULE), ("load.py", LOAD_WITHOUT_MODULE)):
        (tmp_path / name).write_text(text)
    out = tmp_path / "objects.pkl"
    _python(tmp_path / "make.py", here, out, cwd=tmp_path)
    assert "rebuilt from the carried source" in _python(tmp_path / "load.py", out, backend, cwd=elsewhere)
