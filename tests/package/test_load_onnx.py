"""load_onnx(model, packages=[...]): package folders are registered per call."""
import importlib.util
import types

import numpy as np
import onnx
import pytest

import dsl
from dsl.opgraph import registry
from dsl.package import PackageError

from tests.package.helpers import EXAMPLE


def _builder():
    spec = importlib.util.spec_from_file_location("qaic_build_model", EXAMPLE / "build_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_model_runs_with_the_package_folder(backend):
    builder = _builder()
    model = builder.build()
    onnx.checker.check_model(model)
    x = np.random.default_rng(3).standard_normal((4, builder.WIDTH)).astype(np.float32)
    m = dsl.load_onnx(model, packages=[str(EXAMPLE)], backend=backend)
    np.testing.assert_allclose(m.run({"x": x})["y"], builder.reference(model, x), rtol=1e-5, atol=1e-6)


def test_attributes_become_params(tmp_path):
    builder = _builder()
    model = builder.build()
    for a in model.graph.node[0].attribute:
        if a.name == "alpha":
            a.f = 0.25
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    graph = dsl.onnx.to_graph(str(path), packages=EXAMPLE)  # one folder, not in a list, as a Path
    relu = graph.nodes[0].op
    assert relu.op_type == "CustomRelu" and relu.params == {"alpha": 0.25, "beta": pytest.approx(0.2)}


def test_packages_accepts_loaded_packages_and_modules():
    builder = _builder()
    pkg = dsl.register_package(EXAMPLE)
    x = np.ones((1, builder.WIDTH), np.float32)
    y = dsl.load_onnx(builder.build(), packages=[pkg], backend="interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(y, builder.reference(builder.build(), x), rtol=1e-5)
    dsl.load_onnx(builder.build(), packages=[types.ModuleType("already_imported")], backend="interpreter")
    with pytest.raises(TypeError, match=r"packages: expected op package folders, dsl.package.Package objects or "
                                        r"imported modules, got int 3"):
        dsl.load_onnx(builder.build(), packages=[3])


def test_without_the_package_the_ops_are_missing():
    for cls in list(registry.all_ops()):
        if cls.domain == "com.qaic.example":
            registry.unregister(cls)
    with pytest.raises(dsl.OnnxImportError) as e:
        dsl.load_onnx(_builder().build())
    assert "packages=[...]" in str(e.value) and "com.qaic.example::CustomRelu (opset 1): 1 node" in str(e.value)


def test_a_bad_package_folder_is_a_package_error(make_package):
    root = make_package("name: x\nversion: 1\nops: []\n")
    with pytest.raises(PackageError, match=r"opdsl-package.yaml:3: ops: the list is empty"):
        dsl.load_onnx(_builder().build(), packages=[root])


def test_graph_with_package_ops_round_trips_through_onnx():
    pkg = dsl.register_package(EXAMPLE)
    CustomRelu, RMSNorm, Copy = pkg.ops
    g = dsl.Graph("g")
    x = g.input("x", ("batch", 8), dsl.f32)
    w = g.constant("w", np.linspace(1, 2, 8, dtype=np.float32))
    g.output(Copy(RMSNorm(CustomRelu(x, alpha=0.3), w, epsilon=1e-3)), "y")
    proto = g.to_onnx()
    assert [(n.op_type, n.domain) for n in proto.graph.node] == [
        ("CustomRelu", "com.qaic.example"), ("RMSNorm", "com.qaic.example"), ("Copy", "com.qaic.example")]
    model = dsl.load_onnx(proto, packages=[EXAMPLE], backend="numba")
    assert [n.op.params for n in model.graph.nodes][:2] == [{"alpha": pytest.approx(0.3), "beta": pytest.approx(0.2)},
                                                            {"epsilon": pytest.approx(1e-3)}]
    xv = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
    h = np.clip(np.float32(0.3) * xv + np.float32(0.2), 0, 1)
    ref = np.linspace(1, 2, 8, dtype=np.float32) * h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(model.run({"x": xv})["y"], ref, rtol=1e-5, atol=1e-6)


def test_packages_must_be_folders_packages_or_modules():
    with pytest.raises(TypeError, match=r"packages: expected a list of op package folders \(str or Path\), "
                                        r"dsl.package.Package objects or imported modules, or one of them, got int 42"):
        dsl.load_onnx(b"", packages=42)
