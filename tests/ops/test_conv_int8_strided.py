"""Strided int8 convolutions on the direct kernel through space-to-depth or window taps as channels
(ops/conv_int8_strided.py) on every backend against numpy's exact sums: 3×3/2 padded, a 7×7/2 stem on 3 channels, 5×5/3
with odd sizes, u8 weights around 0 (window sums) and per-channel zero points, and QLinearConv
with strides 2 taking that path (no im2col matrix) with its requantization equal to numpy's."""
import numpy as np
import pytest

import ops
from ops.conv_int8_strided import conv_int8_strided, strided_geometry_ok
from test_conv_int8_direct import geometry, tile_for  # noqa: F401  (tile_for: the interpreter's small tiles)
from test_gemm_int8 import NUMBA_SLOW, conv_exact, data, requantized

RNG = np.random.default_rng(292)

# (x dtype, w dtype, x zero point, w zero point(s), C, M, H, W, k, stride, pad)
CASES = [
    (np.uint8, np.int8, 128, [0], 5, 3, 9, 8, 3, 2, 1),         # ResNet's 3x3/2
    (np.uint8, np.int8, 7, [0], 3, 4, 13, 11, 7, 2, 3),         # the 7x7/2 stem, C = 3
    (np.int8, np.uint8, -3, [0], 4, 3, 10, 12, 3, 2, 0),         # u8 weights around 0, i8 activations
    (np.uint8, np.int8, 255, [1, -4, 9], 6, 3, 11, 10, 5, 3, 2),  # stride 3, per-channel zero points
]


@pytest.mark.parametrize("backend", ["interpreter", "opencl", pytest.param("numba", marks=pytest.mark.slow)],
                         indirect=True)
@pytest.mark.parametrize("layout", ["depth", "taps"])
@pytest.mark.parametrize("xdt, wdt, xz, wz, c, m, h, wd, k, stride, pad", CASES)
def test_strided_conv_is_exact(backend, xdt, wdt, xz, wz, c, m, h, wd, k, stride, pad, layout):
    """Both rearrangements: space-to-depth and every window tap a channel (``layout``)."""
    x, w = data(xdt, (2, c, h, wd)), data(wdt, (m, c, k, k))
    wz = np.array(wz, wdt)
    oh, ow, geom = geometry(h, wd, k, stride, pad)
    assert strided_geometry_ok(geom)
    y = np.zeros((2, m, oh, ow), np.int32)
    conv_int8_strided(x, w, y, np.array([xz], xdt), wz, geom, backend=backend, layout=layout)
    np.testing.assert_array_equal(y, conv_exact(x, w, xz, wz, (stride, stride), (pad,) * 4, (1, 1)))


def test_layout_is_the_one_with_fewer_products():
    from ops.conv_int8_strided import choose_layout
    assert choose_layout(3, 3, 3, 2) == "taps"    # squeezenet's stem: 28 products an output against 48
    assert choose_layout(3, 7, 7, 2) == "depth"   # ResNet's 7x7/2 stem: 148 against 192, not worth 12x the image
    assert choose_layout(6, 5, 5, 3) == "depth"


def test_strided_conv_names_the_geometry_it_does_not_take():
    x, w = data(np.uint8, (1, 4, 9, 9)), data(np.int8, (2, 4, 3, 3))
    y = np.zeros((1, 2, 9, 9), np.int32)
    assert not strided_geometry_ok([1, 1, 2, 2, 0, 0, 1, 1, 5, 5])  # 1x1: the direct kernel subsamples
    assert not strided_geometry_ok([3, 3, 2, 1, 0, 0, 1, 1, 4, 7])  # unequal strides
    with pytest.raises(ValueError, match=r"equal strides 2 to 4.*\[3, 3, 1, 1, 1, 1, 1, 1\].*conv_int8"):
        conv_int8_strided(x, w, y, np.array([0], np.uint8), None, [3, 3, 1, 1, 1, 1, 1, 1, 9, 9],
                          backend="interpreter")
    assert not strided_geometry_ok([9, 9, 2, 2, 4, 4, 1, 1, 5, 5])  # 25 taps after space-to-depth
    with pytest.raises(ValueError, match=r"layout='im2col' is not one of depth, taps"):
        conv_int8_strided(x, w, np.zeros((1, 2, 4, 4), np.int32), np.array([0], np.uint8), None,
                          [3, 3, 2, 2, 0, 0, 1, 1, 4, 4], backend="interpreter", layout="im2col")


@pytest.mark.parametrize("compiled_backend", NUMBA_SLOW, indirect=True)
def test_strided_qlinear_conv_takes_the_direct_kernel(compiled_backend, monkeypatch):
    """A 3x3/2 QLinearConv with per-channel scales and a bias: no im2col packing (the spy would
    fail), results equal to numpy's requantization in f32."""
    import ops.conv_int8 as conv_int8

    def no_im2col(*args, **kwargs):
        raise AssertionError("a strided convolution built an im2col matrix")
    monkeypatch.setattr(conv_int8, "pack_im2col_int8", no_im2col)
    x, w = data(np.uint8, (1, 8, 9, 10)), data(np.int8, (5, 8, 3, 3), -128)
    sx, zx = np.array(0.03, np.float32), np.array(60, np.uint8)
    sw, zw = RNG.uniform(0.001, 0.01, 5).astype(np.float32), np.zeros(5, np.int8)
    sy, zy = np.array(0.05, np.float32), np.array(100, np.uint8)
    bias = RNG.integers(-500, 500, 5).astype(np.int32)
    y = ops.QLinearConv(strides=[2, 2], pads=[1, 1, 1, 1])(x, sx, zx, w, sw, zw, sy, zy, bias,
                                                            backend=compiled_backend)
    acc = conv_exact(x, w, 60, zw, (2, 2), (1, 1, 1, 1), (1, 1))
    mult = (sx * sw / sy).astype(np.float32)
    want = np.stack([requantized(acc[0, i], mult[i], bias[i], 100, np.uint8) for i in range(5)])
    np.testing.assert_array_equal(y[0], want)
