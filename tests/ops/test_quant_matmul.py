"""MatMulInteger, QLinearMatMul and DynamicQuantizeLinear on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(11)


def q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def ref_matmul_integer(a, b, azp, bzp):
    a32 = a.astype(np.int32) - (azp.astype(np.int32).reshape(-1, 1) if azp.ndim == 1 else azp.astype(np.int32))
    b32 = b.astype(np.int32) - bzp.astype(np.int32)
    return a32 @ b32


@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 11)), ((2, 3, 5, 9), (9, 4)), ((9,), (2, 9, 3)),
                                   ((3, 4, 6), (6,))], ids=str)
def test_matmul_integer_shapes(backend, sa, sb):
    a, b = q(sa, np.uint8), q(sb, np.int8)
    azp, bzp = np.array(131, np.uint8), np.array(-3, np.int8)
    y = ops.MatMulInteger(a, b, azp, bzp, backend=backend)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, ref_matmul_integer(a, b, azp, bzp))


def test_matmul_integer_per_row_and_column_zero_points(backend):
    a, b = q((6, 10), np.uint8), q((10, 9), np.int8)
    azp, bzp = q((6,), np.uint8), q((9,), np.int8)
    y = ops.MatMulInteger(a, b, azp, bzp, backend=backend)
    np.testing.assert_array_equal(y, ref_matmul_integer(a, b, azp, bzp))
    np.testing.assert_array_equal(ops.MatMulInteger(a, b, backend=backend),
                                  a.astype(np.int32) @ b.astype(np.int32))


def test_qlinear_matmul_requantizes_like_onnx(backend):
    a, b = q((2, 4, 13), np.uint8), q((2, 13, 10), np.int8)
    a_scale, b_scale = np.float32(0.012), RNG.uniform(0.01, 0.05, 10).astype(np.float32)
    azp, bzp = np.uint8(128), np.zeros(10, np.int8)
    y_scale, y_zp = np.float32(0.35), np.int8(-5)
    y = ops.QLinearMatMul(a, np.array(a_scale), np.array(azp), b, b_scale, bzp, np.array(y_scale),
                          np.array(y_zp), backend=backend)
    acc = (a.astype(np.int32) - 128) @ b.astype(np.int32)
    want = np.clip(np.rint(acc * (a_scale * b_scale / y_scale) + y_zp), -128, 127).astype(np.int8)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, want)


def test_dynamic_quantize_linear(backend):
    x = np.concatenate([RNG.standard_normal(500) * 3, [7.5, -2.25]]).astype(np.float32).reshape(2, 251)
    y, scale, zp = ops.DynamicQuantizeLinear(x, backend=backend)
    lo, hi = min(0.0, x.min()), max(0.0, x.max())
    want_scale = np.float32(hi - lo) / np.float32(255)
    want_zp = np.rint(np.clip(np.float32(0) - np.float32(lo) / want_scale, 0, 255))
    assert scale.shape == () and zp.shape == () and zp.dtype == np.uint8
    np.testing.assert_allclose(scale, want_scale, rtol=1e-6)
    assert zp == want_zp
    np.testing.assert_array_equal(y, np.clip(np.rint(x / want_scale) + want_zp, 0, 255).astype(np.uint8))
    y0, s0, z0 = ops.DynamicQuantizeLinear(np.zeros((4,), np.float32), backend=backend)  # no range: scale 1/255
    assert z0 == 0 and not y0.any() and np.isclose(s0, 1 / 255)


def test_quantized_matmul_in_a_graph():
    g = dsl.Graph("qmm")
    x = g.input("x", (None, 8), dsl.f32)
    yq, scale, zp = ops.DynamicQuantizeLinear(x)
    w = q((8, 5), np.int8)
    g.output(ops.MatMulInteger(yq, g.constant("w", w), zp), "acc")
    g.output(scale, "scale")
    xv = RNG.standard_normal((3, 8)).astype(np.float32)
    out = g.compile(backend="numba").run({"x": xv})
    xq, s, z = ops.DynamicQuantizeLinear(xv, backend="interpreter")
    np.testing.assert_array_equal(out["acc"], (xq.astype(np.int32) - z) @ w.astype(np.int32))
    # dequantized, the product approximates the float one
    np.testing.assert_allclose(out["acc"] * out["scale"], xv @ w.astype(np.float32), atol=8 * s * 8 * 127)


def test_errors_name_the_input():
    a, b = q((3, 4), np.uint8), q((5, 2), np.int8)
    with pytest.raises(VerifyError, match=r"inner dimensions differ.*K=4.*K=5"):
        ops.MatMulInteger(a, b, backend="interpreter")
    with pytest.raises(VerifyError, match="MatMulInteger A must be int8 or uint8"):
        ops.MatMulInteger(a.astype(np.int16), q((4, 2), np.int8), backend="interpreter")
    with pytest.raises(VerifyError, match="a_zero_point .* per row"):
        ops.MatMulInteger(a, q((4, 2), np.int8), q((7,), np.uint8), backend="interpreter")
    with pytest.raises(VerifyError, match="DynamicQuantizeLinear input must be f32"):
        ops.DynamicQuantizeLinear(np.zeros(3, np.float64), backend="interpreter")
