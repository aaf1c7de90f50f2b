"""MatMulInteger, QLinearMatMul and DynamicQuantizeLinear on every backend against numpy, and
their ``int8_arithmetic`` (exact by default, onnxruntime's saturating pairs on request)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

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


def saturating_matmul(op_type):
    """MatMulInteger or QLinearMatMul 16×64 · 64×32 (enough to pack): B's columns 0-7 at 127 (each
    255·127 pair is 64770, past i16), the rest random; A mostly 255; -> (model, a, exact y)."""
    rng = np.random.default_rng(1630)
    b = rng.integers(-128, 128, (64, 32)).astype(np.int8)
    b[:, :8] = 127
    a = rng.integers(0, 256, (16, 64)).astype(np.uint8)
    a[:, :48] = 255
    acc = (a.astype(np.int64) - 3) @ b.astype(np.int64)
    if op_type == "MatMulInteger":
        inits = {"b": b, "za": np.array(3, np.uint8), "zb": np.array(0, np.int8)}
        node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
        out, want = TensorProto.INT32, acc
    else:
        inits = {"sa": np.array(0.02, np.float32), "za": np.array(3, np.uint8), "b": b,
                 "sb": np.array(0.004, np.float32), "zb": np.array(0, np.int8), "sy": np.array(40.0, np.float32),
                 "zy": np.array(128, np.uint8)}
        node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
        mult = np.float32(0.02) * np.float32(0.004) / np.float32(40.0)
        out, want = TensorProto.UINT8, np.clip(np.rint(acc.astype(np.float32) * mult) + 128, 0, 255).astype(np.uint8)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [16, 64])],
                              [helper.make_tensor_value_info("y", out, [16, 32])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), a, want


@pytest.mark.parametrize("compiled_backend", ["opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("op_type", ["MatMulInteger", "QLinearMatMul"])
def test_int8_gemm_is_exact_by_default_and_saturates_only_on_request(compiled_backend, op_type):
    """``int8_arithmetic="saturating"`` reaches the packed GEMM: on AVX2 without VNNI its products
    then saturate as onnxruntime's do (equal to its outputs), elsewhere they stay exact."""
    from ops.gemm_int8 import saturating_pairs_pay
    proto, a, want = saturating_matmul(op_type)
    exact = dsl.load_onnx(proto, backend=compiled_backend)
    np.testing.assert_array_equal(exact.run({"a": a})["y"], want)
    got = dsl.load_onnx(proto, backend=compiled_backend, int8_arithmetic="saturating").run({"a": a})["y"]
    if not saturating_pairs_pay(compiled_backend):
        np.testing.assert_array_equal(got, want)
        return
    assert (got[:, :8] != want[:, :8]).all()  # the columns at 127 saturate (random ones may too)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, sess.run(None, {"a": a})[0])


def test_int8_gemm_arithmetic_reaches_the_launch_and_names_what_it_accepts():
    """The packed GEMM's compile-time SAT (recorded, not run): 1 for "saturating" where it pays on
    full-range B, 0 when exact; a bad value is a VerifyError naming the accepted ones."""
    from ops.gemm_int8 import saturating_pairs_pay
    from ops.quant_matmul import _run_packed
    b = q((64, 32), np.int8)

    def sat(arithmetic):
        calls = []
        _run_packed(q((16, 64), np.uint8), None, b, None, np.zeros((16, 32), np.int32), None, None, "numba",
                    lambda *args, **kwargs: calls.append(kwargs["SAT"]), arithmetic)
        return calls[0]
    assert sat("saturating") == int(saturating_pairs_pay("numba")) and sat("exact") == 0
    g = dsl.Graph("g")
    x = g.input("a", (16, 64), dsl.u8)
    with pytest.raises(VerifyError, match=r"MatMulInteger int8_arithmetic='fast': accepted 'exact' or 'saturating'"):
        ops.MatMulInteger(int8_arithmetic="fast")(x, g.constant("b", b))
