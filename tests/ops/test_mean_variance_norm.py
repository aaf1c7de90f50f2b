"""MeanVarianceNormalization (composed) on every backend against numpy, and its error; plus the
opset-6 forms of Gemm and BatchNormalization that PyTorch's old exports use."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402

import dsl  # noqa: E402
from dsl.onnx.load import OnnxImportError  # noqa: E402
from ops.mean_variance_norm import mean_variance_normalization as MVN  # noqa: E402


def ref_mvn(x, axes):
    m = x.mean(axis=axes, keepdims=True)
    return (x - m) / (np.sqrt(((x - m) ** 2).mean(axis=axes, keepdims=True)) + 1e-9)


def test_mvn(backend):
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32) * 3 + 100
    np.testing.assert_allclose(MVN(x, backend=backend), ref_mvn(x.astype(np.float64), (0, 2, 3)), atol=2e-4)
    np.testing.assert_allclose(MVN(x, axes=(-1,), backend=backend), ref_mvn(x.astype(np.float64), (3,)), atol=2e-4)


def test_mvn_error():
    with pytest.raises(dsl.VerifyError, match="MeanVarianceNormalization axes entry 2 is out of range for X of rank 2; accepted: -2..1"):
        MVN(np.zeros((2, 2), np.float32))


def opset6(node, inputs, outputs, inits=()):
    g = oh.make_graph([node], "g", inputs, outputs, initializer=list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 6)])


def test_gemm_opset6(backend):
    vi = oh.make_tensor_value_info
    node = oh.make_node("Gemm", ["a", "b", "c"], ["y"], broadcast=1, transB=1, alpha=2.0)
    m = dsl.load_onnx(opset6(node, [vi("a", TP.FLOAT, [2, 3]), vi("b", TP.FLOAT, [4, 3]), vi("c", TP.FLOAT, [4])],
                             [vi("y", TP.FLOAT, [2, 4])]), backend=backend)
    a, b, c = (np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((4, 3), np.float32),
               np.arange(4, dtype=np.float32))
    np.testing.assert_allclose(m.run({"a": a, "b": b, "c": c})["y"], 2 * a @ b.T + c)
    node = oh.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)  # broadcast=0: C must be (M, N)
    with pytest.raises(OnnxImportError, match=r"Gemm \(opset 6\) C f32\[4\] must be \(M, N\) = \(2, 4\) unless broadcast=1"):
        dsl.load_onnx(opset6(node, [vi("a", TP.FLOAT, [2, 3]), vi("b", TP.FLOAT, [4, 3]), vi("c", TP.FLOAT, [4])],
                             [vi("y", TP.FLOAT, [2, 4])]))


def test_batchnorm_opset6_5d(backend):
    vi = oh.make_tensor_value_info
    rng = np.random.default_rng(4)
    p = [rng.random(2).astype(np.float32) + 0.5 for _ in range(4)]
    inits = [oh.make_tensor(n, TP.FLOAT, [2], v) for n, v in zip("sbmv", p)]
    node = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], is_test=1, epsilon=1e-5)
    m = dsl.load_onnx(opset6(node, [vi("x", TP.FLOAT, [1, 2, 3, 2, 2])], [vi("y", TP.FLOAT, [1, 2, 3, 2, 2])], inits),
                      backend=backend)
    x = rng.standard_normal((1, 2, 3, 2, 2)).astype(np.float32)
    s, b, mean, var = (a.reshape(1, 2, 1, 1, 1) for a in p)
    np.testing.assert_allclose(m.run({"x": x})["y"], (x - mean) / np.sqrt(var + 1e-5) * s + b, rtol=1e-5, atol=1e-6)
    node = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    with pytest.raises(OnnxImportError, match="is_test=0 normalizes with the batch's own statistics"):
        dsl.load_onnx(opset6(node, [vi("x", TP.FLOAT, [1, 2, 3, 2, 2])], [vi("y", TP.FLOAT, [1, 2, 3, 2, 2])], inits))
