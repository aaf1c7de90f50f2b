"""GridSample on every backend against onnx's reference evaluator (every mode, padding and
align_corners, 2-D and 3-D), plus errors."""
import itertools

import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(12)


def reference(x, grid, **attrs):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    tp = onnx.TensorProto.FLOAT
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", tp, None),
                                       helper.make_tensor_value_info("grid", tp, None)],
                          [helper.make_tensor_value_info("y", tp, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    return ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})[0]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_2d_every_padding_and_alignment(backend, mode):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    grid = RNG.uniform(-1.4, 1.4, (2, 3, 6, 2)).astype(np.float32)   # some points outside
    for pad, align in itertools.product(["zeros", "border", "reflection"], [0, 1]):
        y = ops.GridSample(x, grid, mode=mode, padding_mode=pad, align_corners=align, backend=backend)
        want = reference(x, grid, mode=mode, padding_mode=pad, align_corners=align)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5, err_msg=f"{mode} {pad} align={align}")


def test_3d_linear(backend):
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = RNG.uniform(-1.2, 1.2, (1, 2, 3, 4, 3)).astype(np.float32)
    y = ops.GridSample(x, grid, padding_mode="border", backend=backend)
    np.testing.assert_allclose(y, reference(x, grid, padding_mode="border"), rtol=1e-4, atol=1e-5)


def test_errors():
    x = np.zeros((1, 1, 3, 3), np.float32)
    with pytest.raises(VerifyError, match="mode 'bilinear' is not one of nearest, linear, cubic"):
        ops.GridSample(x, np.zeros((1, 2, 2, 2), np.float32), mode="bilinear", backend="interpreter")
    with pytest.raises(VerifyError, match=r"grid must be \(N, H_out, W_out, 2\)"):
        ops.GridSample(x, np.zeros((1, 2, 2, 3), np.float32), backend="interpreter")


def reference_affine(theta, size, align):
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("theta", onnx.TensorProto.FLOAT, None),
                                       helper.make_tensor_value_info("size", onnx.TensorProto.INT64, None)],
                          [helper.make_tensor_value_info("grid", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    return ReferenceEvaluator(model).run(None, {"theta": theta, "size": size})[0]


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_2d_3d_and_into_grid_sample(backend, align):
    theta2 = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    size2 = np.array([2, 3, 4, 5], np.int64)
    grid = ops.AffineGrid(theta2, size2, align_corners=align, backend=backend)
    np.testing.assert_allclose(grid, reference_affine(theta2, size2, align), rtol=1e-5, atol=1e-6)
    theta3 = RNG.standard_normal((1, 3, 4)).astype(np.float32)
    size3 = np.array([1, 1, 2, 3, 4], np.int64)
    np.testing.assert_allclose(ops.AffineGrid(theta3, size3, align_corners=align, backend=backend),
                               reference_affine(theta3, size3, align), rtol=1e-5, atol=1e-6)
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = ops.GridSample(x, grid, align_corners=align, backend=backend)
    np.testing.assert_allclose(y, reference(x, grid, align_corners=align), rtol=1e-4, atol=1e-5)
