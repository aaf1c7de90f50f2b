"""ConvInteger and QLinearConv on every backend against numpy (the float Conv reference of
test_nn applied to the shifted integers), with groups, padding, per-channel weights."""
import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError
from test_nn import conv_ref  # the float Conv reference

RNG = np.random.default_rng(19)


def q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def test_conv_integer_with_groups_and_pads(backend):
    x, w = q((2, 4, 6, 5), np.uint8), q((6, 2, 3, 3), np.int8)
    xzp, wzp = np.array(100, np.uint8), np.array(-3, np.int8)
    y = ops.ConvInteger(x, w, xzp, wzp, group=2, pads=[1, 0, 1, 2], strides=[2, 1], backend=backend)
    want = conv_ref(x.astype(np.float64) - 100, w.astype(np.float64) + 3, pads=(1, 0, 1, 2), strides=(2, 1),
                    group=2)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want.astype(np.int64))


def test_qlinear_conv_per_channel_requantization(backend):
    # a 3x3 kernel: on numba the same direct-int8 specialization (KH = KW = 3) as
    # test_gemm_int8's QLinearConv model, so the suite compiles it once (~30 s cold)
    x, w = q((1, 3, 5, 5), np.uint8), q((4, 3, 3, 3), np.int8)
    x_scale, y_scale = np.array(0.02, np.float32), np.array(0.5, np.float32)
    w_scale = RNG.uniform(0.01, 0.05, 4).astype(np.float32)
    xzp, wzp, yzp = np.array(128, np.uint8), np.zeros(4, np.int8), np.array(10, np.uint8)
    bias = RNG.integers(-500, 500, 4).astype(np.int32)
    y = ops.QLinearConv(x, x_scale, xzp, w, w_scale, wzp, y_scale, yzp, bias, backend=backend)
    acc = conv_ref(x.astype(np.float64) - 128, w.astype(np.float64)) + bias[None, :, None, None]
    scale = (x_scale * w_scale / y_scale).astype(np.float32)[None, :, None, None]
    want = np.rint(np.clip(acc * scale + 10, 0, 255)).astype(np.uint8)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, want)


def test_errors():
    x, w = q((1, 4, 5, 5), np.uint8), q((6, 2, 3, 3), np.int8)
    with pytest.raises(VerifyError, match="input has 4 channels but weights .* group=1 expect 2"):
        ops.ConvInteger(x, w, backend="interpreter")
    with pytest.raises(VerifyError, match="ConvInteger x must be int8 or uint8"):
        ops.ConvInteger(x.astype(np.int32), w, group=2, backend="interpreter")
