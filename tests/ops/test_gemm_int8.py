"""The packed int8 GEMM (ops/gemm_int8.py) on every backend against numpy, and the ops that run
on it (MatMulInteger, QLinearMatMul, DynamicQuantizeLinear -> MatMulInteger) against numpy and
onnxruntime: zero-point corners, i8/u8 operands either way round, per-column scales and zero
points, the u8·i8 saturation corner, M/K/N tails, the fused bias and clamp."""
import numpy as np
import pytest

import ops
from ops.gemm_int8 import Int8Tile, qgemm_int8
from ops.quant_matmul import requant_multiplier

RNG = np.random.default_rng(29)
SMALL = Int8Tile(V=4, MR=2)  # small tiles: every tail of a tiny product is reached


def data(dtype, shape, corner=None):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, shape).astype(dtype)
    if corner is not None:
        x.reshape(-1)[: x.size // 3] = corner
    return x


def exact(a, b, za, zb):
    """Σ (a - za)(b - zb) in i64; za per row (M) or scalar, zb per column (N) or scalar."""
    za = np.asarray(za, np.int64).reshape(-1, 1) if np.size(za) > 1 else np.int64(np.asarray(za).reshape(-1)[0])
    zb = np.asarray(zb, np.int64).reshape(1, -1) if np.size(zb) > 1 else np.int64(np.asarray(zb).reshape(-1)[0])
    return np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)


def requantized(acc, mult, bias, y_zp, dtype, lo=None, hi=None):
    """onnxruntime's (MLAS's) requantization: f32(acc + bias) · mult, rounded half to even, + zp, clamped."""
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    f = (acc + (0 if bias is None else bias)).astype(np.float32) * np.asarray(mult, np.float32)
    return np.clip(np.rint(f) + np.float32(y_zp), lo, hi).astype(dtype)


def zero_point(dtype, z, length):
    """A zero point as the GEMMs take it: one value, or ("per-row", "per-column") ``length`` of them."""
    return data(dtype, (length,)) if isinstance(z, str) else np.array([z], dtype)


def check_exact(gemm, case, m, k, n, **options):
    """``gemm(a, b, y, za, zb, **options)``'s i32 sums of one ``CASES``-style case against numpy
    (shared with test_gemm_int8_amx.py)."""
    adt, bdt, za, zb, ca, cb = case
    a, b = data(adt, (1, m, k), ca), data(bdt, (1, k, n), cb)
    zav, zbv = zero_point(adt, za, m), zero_point(bdt, zb, n)
    y = np.zeros((1, m, n), np.int32)
    gemm(a, b, y, zav, zbv, **options)
    np.testing.assert_array_equal(y[0], exact(a[0], b[0], zav, zbv))


def check_requantized(gemm, m, k, n, **options):
    """``gemm``'s u8 output against numpy: a batch of 2 against one B (i8 -128 corner), per-channel
    multipliers, a bias and a fused Relu + cap (shared with test_gemm_int8_amx.py)."""
    a, b = data(np.uint8, (2, m, k)), data(np.int8, (1, k, n), -128)
    za, zb = np.array([3], np.uint8), np.array([0], np.int8)
    mult = RNG.uniform(1e-4, 3e-3, n).astype(np.float32)
    bias = RNG.integers(-5000, 5000, n).astype(np.int32)
    y = np.zeros((2, m, n), np.uint8)
    gemm(a, b, y, za, zb, mult=mult, bias=bias, y_zp=100, q_lo=100, q_hi=250, **options)
    for t in range(2):
        np.testing.assert_array_equal(y[t], requantized(exact(a[t], b[0], za, zb), mult, bias, 100, np.uint8, 100, 250))


CASES = [  # (A dtype, B dtype, a zero point, b zero point, A corner, B corner)
    (np.uint8, np.int8, 255, 0, 255, -128),      # every pair 255·-128: vpmaddubsw would saturate
    (np.uint8, np.int8, 128, "per-column", None, 127),
    (np.int8, np.uint8, -128, 255, 127, 0),       # both operands shifted to u8·i8 while packing
    (np.uint8, np.uint8, 0, 128, None, None),
]


# numba compiles each specialization of the packed kernels in 20-60 s: the default run keeps one
# numba case per kernel family, and -m slow runs numba on every case.
NUMBA_SLOW = [pytest.param("numba", marks=pytest.mark.slow), "opencl"]


@pytest.mark.parametrize("backend, adt, bdt, za, zb, ca, cb", [
    pytest.param(b, *case, marks=[pytest.mark.slow] if b == "numba" and i else [])
    for i, case in enumerate(CASES) for b in ("interpreter", "numba", "opencl")], indirect=["backend"])
def test_packed_int8_gemm_exact_on_every_backend(backend, adt, bdt, za, zb, ca, cb):
    # K % 4 != 0, N not a multiple of the panel, M of the row tile
    check_exact(qgemm_int8, (adt, bdt, za, zb, ca, cb), 5, 9, 11, backend=backend, tile=SMALL)


@pytest.mark.parametrize("backend", ["interpreter"] + NUMBA_SLOW, indirect=True)
def test_packed_int8_gemm_requantizes_per_channel_with_bias_and_clamp(backend):
    check_requantized(qgemm_int8, 6, 17, 10, backend=backend, tile=SMALL)


@pytest.mark.parametrize("backend", ["interpreter"] + NUMBA_SLOW, indirect=True)
def test_packed_int8_gemm_saturating_pairs_path_is_exact_on_seven_bit_weights(backend):
    """dsl.dot4_sat (vpmaddubsw's i16 pairs) on B of 7-bit weights, per-column zero points and
    255-valued A: every pair reaches 255·(-64 - 64) = -32640, inside i16."""
    m, k, n = 5, 9, 11
    a = data(np.uint8, (1, m, k), 255)
    b = RNG.integers(-64, 64, (1, k, n)).astype(np.int8)
    b.reshape(-1)[: b.size // 2] = -64
    zb = RNG.integers(-3, 4, n).astype(np.int8)
    y = np.zeros((1, m, n), np.int32)
    qgemm_int8(a, b, y, np.array([0], np.uint8), zb, backend=backend, tile=SMALL if backend == "interpreter" else None,
               saturating=True)
    np.testing.assert_array_equal(y[0], exact(a[0], b[0], 0, zb))


def test_packed_int8_gemm_chooses_saturating_pairs_where_exact_and_faster():
    """The compile-time SAT the GEMM launches with (recorded, not run): 1 on numba for 7-bit B where
    the target pays for it, 0 for a B with one pair beyond i16, on OpenCL, and on a packed image."""
    from ops.gemm_int8 import saturating_pairs_pay

    def sat(b, backend):
        calls = []
        qgemm_int8(data(np.uint8, (1, 3, 8)), b, np.zeros((1, 3, b.shape[2]), np.int32), backend=backend,
                   kernel=lambda *args, **kwargs: calls.append(kwargs["SAT"]))
        return calls[0]
    seven = RNG.integers(-64, 64, (1, 8, 6)).astype(np.int8)
    assert sat(seven, "numba") == int(saturating_pairs_pay("numba"))
    beyond = seven.copy()
    beyond[0, 0:2, 0] = (-100, -29)  # k = 0, 1 of one column: one pair's negative bytes sum to -129
    assert sat(beyond, "numba") == 0
    assert sat(seven, "opencl") == 0


# --------------------------------------------------------------------------- the ops (numba, opencl)

M, K, N = 19, 67, 37  # big enough for the packed path, every tail ragged


@pytest.mark.parametrize("compiled_backend", NUMBA_SLOW, indirect=True)
def test_matmul_integer_takes_the_packed_gemm(compiled_backend):
    op = ops.MatMulInteger()
    a, b = data(np.uint8, (M, K), 255), data(np.int8, (K, N), -128)
    za, zb = np.array(128, np.uint8), data(np.int8, (N,))
    from dsl.opgraph.spec import TensorSpec
    specs = [TensorSpec.of(x) for x in (a, b, za, zb)]
    assert op.select(*specs, backend=compiled_backend) == "packed"
    y = op(a, b, za, zb, backend=compiled_backend)
    np.testing.assert_array_equal(y, exact(a, b, 128, zb))


@pytest.mark.slow  # its own compiles (~20 s); i8 activations are covered by the exact GEMM cases
def test_matmul_integer_batched_i8_activations(compiled_backend):
    a, b = data(np.int8, (3, M, K), -128), data(np.int8, (K, N), 127)
    za, zb = np.array(-3, np.int8), np.array(5, np.int8)
    y = ops.MatMulInteger()(a, b, za, zb, backend=compiled_backend)
    for t in range(3):
        np.testing.assert_array_equal(y[t], exact(a[t], b, -3, 5))


@pytest.mark.parametrize("ydt", [np.uint8, pytest.param(np.int8, marks=pytest.mark.slow)])  # ~20 s of compiles each
@pytest.mark.parametrize("compiled_backend", NUMBA_SLOW, indirect=True)
def test_qlinear_matmul_per_channel_matches_numpy(compiled_backend, ydt):
    a, b = data(np.uint8, (M, K)), data(np.int8, (K, N))
    sa, za = np.array(0.02, np.float32), np.array(131, np.uint8)
    sb, zb = RNG.uniform(0.001, 0.01, N).astype(np.float32), np.zeros(N, np.int8)
    sy, zy = np.array(0.05, np.float32), np.array(3 if ydt == np.int8 else 120, ydt)
    y = ops.QLinearMatMul()(a, sa, za, b, sb, zb, sy, zy, backend=compiled_backend)
    want = requantized(exact(a, b, 131, 0), requant_multiplier(sa, sb, sy), None, zy, ydt)
    np.testing.assert_array_equal(y, want)


def _model(nodes, inputs, outputs, inits):
    from onnx import helper, numpy_helper
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs,
                                               [numpy_helper.from_array(v, k) for k, v in inits.items()]),
                             opset_imports=[helper.make_opsetid("", 13)])


def test_qlinear_matmul_model_matches_onnxruntime():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    a = data(np.uint8, (M, K))
    inits = {"sa": np.array(0.02, np.float32), "za": np.array(128, np.uint8),
             "b": RNG.integers(-64, 64, (K, N)).astype(np.int8),  # 7-bit weights: onnxruntime's AVX2 path is exact
             "sb": RNG.uniform(0.001, 0.01, N).astype(np.float32), "zb": np.zeros(N, np.int8),
             "sy": np.array(0.03, np.float32), "zy": np.array(128, np.uint8)}
    assert_qlinear_matmul_matches_onnxruntime(inits, (a, data(np.uint8, (M, K))))


def assert_qlinear_matmul_matches_onnxruntime(inits, inputs):
    """One QLinearMatMul node (``inits``: sa, za, b, sb, zb, sy, zy) on numba: planned (only the
    constant B is packed), and for each (M, K) u8 input of ``inputs`` equal to onnxruntime's."""
    import dsl
    import onnxruntime as ort
    from onnx import TensorProto, helper
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    m, k = inputs[0].shape
    model = _model([node], [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, inits["b"].shape[1]])], inits)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = dsl.load_onnx(model, backend="numba")
    assert "1 of 1 nodes planned" in str(compiled)
    for a in inputs:
        np.testing.assert_array_equal(compiled.run({"a": a})["y"], session.run(None, {"a": a})[0])


def dynamic_matmul_model(inits, m, k, n):
    """onnxruntime's quantize_dynamic pattern for an (m, k) · (k, n) MatMul: DynamicQuantizeLinear
    -> MatMulInteger -> Cast -> Mul by the product of the scales; ``inits`` holds w, wz and ws."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)


def test_dynamic_quantize_matmul_integer_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import dsl
    x = RNG.standard_normal((M, K)).astype(np.float32)
    inits = {"w": RNG.integers(-64, 64, (K, N)).astype(np.int8), "wz": np.array(0, np.int8),
             "ws": np.array(0.01, np.float32)}
    model = dynamic_matmul_model(inits, M, K, N)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = dsl.load_onnx(model, backend="numba").run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- convolutions (ops/conv_int8.py)

def conv_exact(x, w, xz, wz, strides, pads, dil):
    """Σ (x - xz)(w - wz[m]) over each window, in i64, padding contributing nothing."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64) - int(xz), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    wv = w.astype(np.int64) - np.asarray(wz, np.int64).reshape(-1, 1, 1, 1)
    y = np.zeros((n, m, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dil[0]: i * dil[0] + strides[0] * oh: strides[0],
                     j * dil[1]: j * dil[1] + strides[1] * ow: strides[1]]
            y += np.einsum("nchw,mc->nmhw", win, wv[:, :, i, j])
    return y


@pytest.mark.parametrize("compiled_backend", NUMBA_SLOW, indirect=True)
def test_conv_integer_runs_as_the_packed_gemm(compiled_backend):
    from dsl.opgraph.spec import TensorSpec
    x, w = data(np.uint8, (2, 5, 9, 8), 255), data(np.int8, (6, 5, 3, 3), -128)
    xz, wz = np.array(7, np.uint8), data(np.int8, (6,))
    op = ops.ConvInteger(pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2])
    assert op.select(*[TensorSpec.of(a) for a in (x, w, xz, wz)], backend=compiled_backend) == "packed"
    y = op(x, w, xz, wz, backend=compiled_backend)
    np.testing.assert_array_equal(y, conv_exact(x, w, 7, wz, (2, 1), (1, 0, 2, 1), (1, 2)))


@pytest.mark.slow  # its own compiles (~20 s); per-channel requantization is covered by the GEMM test above
def test_qlinear_conv_per_channel_matches_numpy(compiled_backend):
    x, w = data(np.uint8, (1, 6, 7, 7)), data(np.int8, (5, 6, 3, 3))
    sx, zx = np.array(0.02, np.float32), np.array(128, np.uint8)
    sw, zw = RNG.uniform(0.001, 0.01, 5).astype(np.float32), np.zeros(5, np.int8)
    sy, zy = np.array(0.1, np.float32), np.array(3, np.int8)
    bias = RNG.integers(-3000, 3000, 5).astype(np.int32)
    y = ops.QLinearConv(pads=[1, 1, 1, 1])(x, sx, zx, w, sw, zw, sy, zy, bias, backend=compiled_backend)
    acc = conv_exact(x, w, 128, 0, (1, 1), (1, 1, 1, 1), (1, 1)) + bias.reshape(1, -1, 1, 1)
    mult = (sx * sw / sy).astype(np.float32).reshape(1, -1, 1, 1)
    want = np.clip(np.rint(acc.astype(np.float32) * mult) + np.float32(3), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(y, want)


def test_qlinear_conv_model_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import dsl
    from onnx import TensorProto, helper
    x = data(np.uint8, (1, 8, 10, 10))
    inits = {"sx": np.array(0.02, np.float32), "zx": np.array(120, np.uint8),
             "w": RNG.integers(-64, 64, (16, 8, 3, 3)).astype(np.int8),  # 7 bits: onnxruntime's AVX2 path is exact
             "sw": RNG.uniform(0.001, 0.01, 16).astype(np.float32), "zw": np.zeros(16, np.int8),
             "sy": np.array(0.2, np.float32), "zy": np.array(128, np.uint8),
             "b": RNG.integers(-2000, 2000, 16).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"],
                            pads=[1, 1, 1, 1])
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 10, 10])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 16, 10, 10])], inits)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = dsl.load_onnx(model, backend="numba")
    assert "1 of 1 nodes planned" in str(compiled)  # the packing and the conv as declared launches
    for x in (x, data(np.uint8, (1, 8, 10, 10))):
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], session.run(None, {"x": x})[0])


def test_conv_int8_packing_on_every_backend(backend):
    """ops/conv_int8.py launched directly, exact i32 with per-channel weight zero points: a
    padded stride-1 2x2 on a 37-pixel-wide image now goes to the direct kernel
    (ops/conv_int8_direct.py).  2x2 with a weight zero point and i32 output is the numba
    specialization onnx's ConvInteger conformance cases compile (a ~60 s cold compile shared
    through the disk cache); 3x3 windows run in test_quant_conv_plans.py and the QLinearConv
    model test.  The im2col packing is run by test_quant_conv_plans.py's stride-2 cases on every
    backend."""
    from ops.conv_int8 import conv_int8
    x, w = data(np.uint8, (1, 2, 5, 37), 0), data(np.int8, (3, 2, 2, 2), 127)  # panel 48..63: vectors
    wz = data(np.int8, (3,))
    y = np.zeros((1, 3, 6, 38), np.int32)
    conv_int8(x, w, y, np.array(200, np.uint8), wz, [2, 2, 1, 1, 1, 1, 1, 1, 6, 38], backend=backend)
    np.testing.assert_array_equal(y, conv_exact(x, w, 200, wz, (1, 1), (1, 1, 1, 1), (1, 1)))
