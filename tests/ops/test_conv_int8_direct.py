"""The int8 convolution that reads the activation in place (ops/conv_int8_direct.py) on every
backend against numpy: 3×3 padded, 1×1 (strided too) and unpadded windows, u8/i8 activations and
i8/u8 (around 128) weights, zero-point corners, the u8·i8 saturation corner, channel counts that
are not a multiple of 4, per-channel requantization with bias and a fused clamp, and the ops
(QLinearConv, ConvInteger) taking it, with 1×1 convolutions never building an im2col matrix."""
import numpy as np
import pytest

import ops
from ops.conv_int8_direct import conv_int8_direct, direct_conv_ok
from ops.gemm_int8 import Int8Tile
from test_gemm_int8 import NUMBA_SLOW, conv_exact, data, requantized

RNG = np.random.default_rng(291)
SMALL = Int8Tile(V=4, MR=2)  # the interpreter's tiles: every panel and row-tile tail is reached

# (x dtype, w dtype, x zero point, C, M, H, W, k, stride, pad, x corner, w corner, w zero point)
CASES = [
    (np.uint8, np.int8, 255, 5, 3, 6, 7, 3, 1, 1, 255, -128, [0]),   # 255·-128 everywhere: no i16 saturation
    (np.int8, np.int8, -128, 8, 5, 5, 9, 1, 1, 0, 127, 127, [0]),    # i8 activations shifted while packed
    (np.uint8, np.uint8, 0, 6, 3, 7, 8, 1, 2, 0, None, 0, [128]),    # 1x1 stride 2; u8 weights around 128
    (np.uint8, np.int8, 128, 3, 2, 6, 6, 3, 1, 0, 0, None, [0]),     # no padding, C < 4
    (np.uint8, np.uint8, 3, 5, 3, 6, 7, 3, 1, 1, 255, 255, [0]),     # u8 weights around 0: window sums
    (np.uint8, np.int8, 100, 6, 4, 5, 5, 1, 1, 0, None, None, [0, 3, -7, 127]),  # per-channel zero points
]


def geometry(h, wd, k, stride, pad):
    oh = (h + 2 * pad - k) // stride + 1
    ow = (wd + 2 * pad - k) // stride + 1
    return oh, ow, [k, k, stride, stride, pad, pad, 1, 1, oh, ow]


def tile_for(backend):
    return SMALL if backend == "interpreter" else None


@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("xdt, wdt, xz, c, m, h, wd, k, stride, pad, cx, cw, wz", CASES)
def test_direct_conv_is_exact(backend, xdt, wdt, xz, c, m, h, wd, k, stride, pad, cx, cw, wz):
    x, w = data(xdt, (2, c, h, wd), cx), data(wdt, (m, c, k, k), cw)
    wz = np.array(wz, wdt)
    oh, ow, geom = geometry(h, wd, k, stride, pad)
    assert direct_conv_ok(w, wz, geom)
    y = np.zeros((2, m, oh, ow), np.int32)
    conv_int8_direct(x, w, y, np.array([xz], xdt), geom, backend=backend, tile=tile_for(backend), w_zp=wz)
    np.testing.assert_array_equal(y, conv_exact(x, w, xz, wz, (stride, stride), (pad,) * 4, (1, 1)))


@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("ydt", [np.uint8, np.int8])
def test_direct_conv_requantizes_per_channel_with_bias_and_clamp(backend, ydt):
    x, w = data(np.uint8, (1, 7, 9, 10)), data(np.int8, (5, 7, 3, 3), -128)
    mult = RNG.uniform(1e-4, 2e-3, 5).astype(np.float32)  # x_scale·w_scale[m]/y_scale
    bias = RNG.integers(-20000, 20000, 5).astype(np.int32)
    lo, hi = (10, 240) if ydt == np.uint8 else (-5, 120)  # a fused Relu (zero point) and Clip cap
    y = np.zeros((1, 5, 9, 10), ydt)
    _, _, geom = geometry(9, 10, 3, 1, 1)
    conv_int8_direct(x, w, y, np.array([17], np.uint8), geom, mult, bias, y_zp=lo, q_lo=lo, q_hi=hi,
                     backend=backend, tile=tile_for(backend))
    acc = conv_exact(x, w, 17, 0, (1, 1), (1, 1, 1, 1), (1, 1))
    want = np.stack([requantized(acc[0, i], mult[i], bias[i], lo, ydt, lo, hi) for i in range(5)])
    np.testing.assert_array_equal(y[0], want)


@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("h, wd, k, pad, ydt", [
    (5, 13, 3, 1, np.uint8),   # OW 13, Wp 15: most vectors cross a row (squeezenet's 13x13 layers)
    (4, 9, 3, 0, np.int32),    # OW 7 < 8 lanes on the compiled backends: lane by lane there
    (3, 17, 2, 0, np.int32),   # one dropped column per row; i32 sums
    (6, 8, 3, 1, np.uint8),    # OW = 8 lanes exactly
    (7, 3, 3, 1, np.uint8),    # OW 3 < 4 lanes of the interpreter's tile: two row breaks in a vector
])
def test_direct_conv_stores_rows_that_cross_a_vector(backend, h, wd, k, pad, ydt):
    """Output rows whose width is not a multiple of the vector: a vector of positions spans the
    end of one row, the dropped columns and the next row (several rows where a row is narrower
    than the vector); its lanes are picked in place, with no lane lost or written twice wrong,
    requantized or as i32."""
    x, w = data(np.uint8, (2, 6, h, wd), 255), data(np.int8, (8, 6, k, k), -128)
    check_two_images(backend, x, w, 9, pad, ydt)


def check_two_images(backend, x, w, x_zp, pad, ydt):
    """conv_int8_direct of two images at stride 1 against the exact sums, as i32 or requantized
    to u8 (zero point 128) with per-channel multipliers."""
    oc, k = w.shape[0], w.shape[2]
    oh, ow, geom = geometry(x.shape[2], x.shape[3], k, 1, pad)
    acc = conv_exact(x, w, x_zp, 0, (1, 1), (pad,) * 4, (1, 1))
    y = np.full((2, oc, oh, ow), 77, ydt)
    if ydt == np.int32:
        conv_int8_direct(x, w, y, np.array([x_zp], np.uint8), geom, backend=backend, tile=tile_for(backend))
        np.testing.assert_array_equal(y, acc)
        return
    mult = RNG.uniform(1e-4, 2e-3, oc).astype(np.float32)
    conv_int8_direct(x, w, y, np.array([x_zp], np.uint8), geom, mult, None, y_zp=128, backend=backend,
                     tile=tile_for(backend))
    want = np.stack([np.stack([requantized(acc[n, i], mult[i], 0, 128, np.uint8) for i in range(oc)])
                     for n in range(2)])
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("ydt", [np.uint8, np.int32])
def test_pointwise_conv_runs_whole_planes_and_a_half_last_panel(backend, ydt):
    """A 1×1 stride-1 convolution packs and stores each channel's H·W pixels as one row
    (``whole_planes``); 5×7 = 35 positions leave a last panel whose second vector holds none (with
    4, 8 or 16 lanes), which runs one vector of products: every position kept, requantized or i32,
    two images, channels not a multiple of 4, a row-tile tail."""
    x, w = data(np.uint8, (2, 9, 5, 7), 255), data(np.int8, (5, 9, 1, 1), -128)
    check_two_images(backend, x, w, 11, 0, ydt)


def test_direct_conv_names_the_geometry_it_does_not_take():
    x, w = data(np.uint8, (1, 4, 9, 9)), data(np.int8, (2, 4, 3, 3))
    y = np.zeros((1, 2, 4, 4), np.int32)
    with pytest.raises(ValueError, match=r"stride-1 convolutions, or 1x1 ones.*\[3, 3, 2, 2, 0, 0, 1, 1\].*conv_int8"):
        conv_int8_direct(x, w, y, np.array([0], np.uint8), [3, 3, 2, 2, 0, 0, 1, 1, 4, 4], backend="interpreter")


def test_direct_conv_takes_any_weight_zero_point_and_its_geometries():
    w8, wu = data(np.int8, (2, 4, 3, 3)), data(np.uint8, (2, 4, 3, 3))
    _, _, geom = geometry(8, 8, 3, 1, 1)
    assert direct_conv_ok(w8, None, geom) and direct_conv_ok(wu, np.array([128], np.uint8), geom)
    assert direct_conv_ok(w8, np.array([0, 3], np.int8), geom)  # per-channel zero points: window sums
    assert direct_conv_ok(wu, None, geom)
    assert not direct_conv_ok(w8, None, geometry(8, 8, 3, 2, 1)[2])  # strided 3x3: im2col path
    assert not direct_conv_ok(w8, None, [3, 3, 1, 1, 2, 2, 2, 2, 8, 8])  # dilated
    assert not direct_conv_ok(w8, None, geometry(8, 8, 5, 1, 2)[2])  # 25 taps: past the unroll budget


@pytest.mark.parametrize("compiled_backend", ["opencl", pytest.param("numba", marks=pytest.mark.slow)], indirect=True)
def test_five_by_five_qlinear_conv_takes_the_im2col_gemm(compiled_backend):
    """A 5×5 stride-1 convolution (more taps than the direct kernel unrolls: it failed to compile
    there) runs exact on the im2col GEMM."""
    import ops.conv_int8 as conv_int8
    x, w = data(np.uint8, (1, 4, 7, 9), 255), data(np.int8, (3, 4, 5, 5), -128)
    oh, ow, geom = geometry(7, 9, 5, 1, 2)
    y = np.zeros((1, 3, oh, ow), np.int32)
    conv_int8.conv_int8(x, w, y, np.array([3], np.uint8), None, geom, backend=compiled_backend)
    np.testing.assert_array_equal(y, conv_exact(x, w, 3, 0, (1, 1), (2,) * 4, (1, 1)))


@pytest.mark.parametrize("compiled_backend", NUMBA_SLOW, indirect=True)
def test_pointwise_qlinear_conv_runs_on_the_activation_without_im2col(compiled_backend, monkeypatch):
    """A strided 1x1 QLinearConv with per-channel scales through the op: the direct kernel, no
    im2col packing (the spy would fail), results equal to numpy's requantization in f32."""
    import ops.conv_int8 as conv_int8

    def no_im2col(*args, **kwargs):
        raise AssertionError("a 1x1 convolution built an im2col matrix")
    monkeypatch.setattr(conv_int8, "pack_im2col_int8", no_im2col)
    x, w = data(np.uint8, (1, 9, 8, 11)), data(np.int8, (6, 9, 1, 1), 127)
    sx, zx = np.array(0.03, np.float32), np.array(200, np.uint8)
    sw, zw = RNG.uniform(0.001, 0.01, 6).astype(np.float32), np.zeros(6, np.int8)
    sy, zy = np.array(0.05, np.float32), np.array(100, np.uint8)
    bias = RNG.integers(-500, 500, 6).astype(np.int32)
    y = ops.QLinearConv(strides=[2, 2])(x, sx, zx, w, sw, zw, sy, zy, bias, backend=compiled_backend)
    acc = conv_exact(x, w, 200, zw, (2, 2), (0, 0, 0, 0), (1, 1))
    mult = (sx * sw / sy).astype(np.float32)
    want = np.stack([requantized(acc[0, i], mult[i], bias[i], 100, np.uint8) for i in range(6)])
    np.testing.assert_array_equal(y[0], want)


# ----------------------------------------------------------------------------- dot4_sat (vpmaddubsw) path

def seven_bit(shape, corner=None):
    """Weights in -64..63, what onnxruntime's reduce_range writes: no pair of bytes can leave i16."""
    w = RNG.integers(-64, 64, shape).astype(np.int8)
    if corner is not None:
        w.reshape(-1)[: w.size // 3] = corner
    return w


@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("xdt, xz, wz, k, pad", [
    (np.uint8, 255, [0], 3, 1),     # 255·-64 pairs at the i16 edge (-32640); the padding is 255
    (np.int8, -128, [5, -3, 0], 1, 0),  # i8 activations shifted to u8; per-channel zero points: window sums
])
def test_saturating_pairs_path_is_exact_on_seven_bit_weights(backend, xdt, xz, wz, k, pad):
    x = data(xdt, (1, 6, 5, 7), 127 if xdt == np.int8 else 255)
    w = seven_bit((3, 6, k, k), -64)
    oh, ow, geom = geometry(5, 7, k, 1, pad)
    wz = np.array(wz, np.int8)
    y = np.zeros((1, 3, oh, ow), np.int32)
    conv_int8_direct(x, w, y, np.array([xz], xdt), geom, backend=backend, tile=tile_for(backend), w_zp=wz,
                     saturating=True)
    np.testing.assert_array_equal(y, conv_exact(x, w, xz, wz, (1, 1), (pad,) * 4, (1, 1)))


def _launch_kwargs(w, backend):
    """The kernels' compile-time arguments conv_int8_direct chooses, recorded, not run."""
    calls = []
    x = data(np.uint8, (1, w.shape[1], 6, 6))
    _, _, geom = geometry(6, 6, 3, 1, 1)
    conv_int8_direct(x, w, np.zeros((1, w.shape[0], 6, 6), np.int32), np.array([0], np.uint8), geom, backend=backend,
                     launch=lambda kernel: lambda *args, **kwargs: calls.append((kernel.__name__, kwargs)))
    return dict(calls)["qconv_direct_int8"]


def test_saturating_pairs_are_chosen_only_where_they_are_exact_and_pay():
    import dsl
    from ops.gemm_int8 import pairs_fit_i16, saturating_pairs_pay
    pays = saturating_pairs_pay("numba")
    feats = dsl.target("numba").features
    assert pays == ("avx2" in feats and "avxvnni" not in feats and "avx512vnni" not in feats)
    assert not saturating_pairs_pay("opencl") and not saturating_pairs_pay("interpreter")
    assert _launch_kwargs(seven_bit((4, 8, 3, 3)), "numba")["SAT"] == int(pays)
    full = seven_bit((4, 8, 3, 3))
    full[1, 2:4, 0, 0] = (127, 2)  # channels 2, 3 of one tap: one pair whose positive bytes sum to 129
    assert not pairs_fit_i16(np.array([127 | 2 << 8], np.int32))
    assert pairs_fit_i16(np.array([127 | 1 << 8 | (-128 & 0xFF) << 16], np.int32))
    assert _launch_kwargs(full, "numba")["SAT"] == (2 if pays else 0)  # exact dot2_i16 on widened weights
    assert _launch_kwargs(seven_bit((4, 8, 3, 3)), "opencl")["SAT"] == 0


# ----------------------------------------------------------------------------- dot2_i16 (vpmaddwd) path

@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("xdt, xz, wz, k, pad, cw", [
    (np.uint8, 255, [0], 3, 1, 127),      # 255·127 pairs: 64770, far past i16; the padding is 255
    (np.uint8, 0, [0], 3, 1, -128),       # 255·-128 pairs: -65280
    (np.int8, -128, [5, -3, 0], 1, 0, -128),  # i8 activations shifted to u8; per-channel zero points
])
def test_widened_pairs_path_is_exact_on_full_range_weights(backend, xdt, xz, wz, k, pad, cw):
    """products="dot2_i16": the image in even/odd planes of i16 pairs against weights widened at
    packing; exact where dot4_sat saturates (all bytes 255 against ±127/-128), with C = 6 (a
    partial group of 4) and zero points that need the window sums."""
    x = data(xdt, (1, 6, 5, 7), 127 if xdt == np.int8 else 255)
    x.reshape(-1)[: x.size // 2] = 127 if xdt == np.int8 else 255
    w = data(np.int8, (3, 6, k, k), cw)
    w.reshape(-1)[: w.size // 2] = cw
    oh, ow, geom = geometry(5, 7, k, 1, pad)
    wz = np.array(wz, np.int8)
    want = conv_exact(x, w, xz, wz, (1, 1), (pad,) * 4, (1, 1))
    y = np.zeros((1, 3, oh, ow), np.int32)
    conv_int8_direct(x, w, y, np.array([xz], xdt), geom, backend=backend, tile=tile_for(backend), w_zp=wz,
                     products="dot2_i16")
    np.testing.assert_array_equal(y, want)
    if backend == "interpreter":  # the saturating product really differs on these weights
        conv_int8_direct(x, w, y, np.array([xz], xdt), geom, backend=backend, tile=tile_for(backend), w_zp=wz,
                         products="dot4_sat")
        assert not np.array_equal(y, want)


def test_products_names_what_it_takes():
    x, w = data(np.uint8, (1, 4, 6, 6)), data(np.int8, (2, 4, 3, 3))
    _, _, geom = geometry(6, 6, 3, 1, 1)
    with pytest.raises(ValueError, match=r"products='vnni' is not one of dot4, dot4_sat, dot2_i16"):
        conv_int8_direct(x, w, np.zeros((1, 2, 6, 6), np.int32), np.array([0], np.uint8), geom,
                         backend="interpreter", products="vnni")


def test_row_blocks_keep_the_weights_in_l1_and_the_threads_even():
    from ops.conv_int8_direct import L1_WEIGHT_BYTES, row_block
    for mtiles, tile_bytes in [(16, 2304), (64, 9216), (16, 256), (64, 4096), (13, 2304), (17, 2304), (5, 10 ** 6)]:
        rb = row_block(mtiles, tile_bytes)
        sizes = [min(rb, mtiles - s) for s in range(0, mtiles, rb)]
        assert rb == 1 or rb * tile_bytes <= L1_WEIGHT_BYTES
        assert max(sizes) - min(sizes) <= len(sizes), (mtiles, tile_bytes, sizes)  # no short last block
    assert row_block(16, 2304) == 4  # 4 blocks of 4, not 7 + 7 + 2
