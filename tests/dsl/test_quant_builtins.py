"""dsl.dequant / dsl.quant: f32 on every backend, against numpy (ties to even, saturation,
negative zero points, i8/u8/i16), and their compile errors."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f16, f32, i8, i16, i32, u8

Q = dsl.TypeVar("Q")


@dsl.kernel
def quant_i8(x: In[f32], scale: f32, zp: i8, q: Out[i8], back: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = dsl.quant(x.flat[i], scale, zp, i8)
        q.flat[i] = v
        back.flat[i] = dsl.dequant(v, scale, zp)


@dsl.kernel
def quant_u8(x: In[f16], scale: f32, zp: i32, q: Out[u8], back: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = dsl.quant(x.flat[i], scale, zp, u8)
        q.flat[i] = v
        back.flat[i] = dsl.dequant(v, scale, zp)


@dsl.kernel
def quant_i16(x: In[f32], scale: f32, zp: i16, q: Out[i16]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        q.flat[i] = dsl.quant(x.flat[i], scale, zp, i16)


@dsl.kernel
def dequant_only(q: In[Q], scale: f32, zp: Q, y: Out[f32]):
    lo, hi = dsl.split(q.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.dequant(q.flat[i], scale, zp)


def quant_ref(x, scale, zp, dtype):
    info = np.iinfo(dtype)
    r = np.rint(x.astype(np.float32) / np.float32(scale)) + np.float32(zp)
    return np.clip(r, np.float32(info.min), np.float32(info.max)).astype(dtype)


def dequant_ref(q, scale, zp):
    return (q.astype(np.float32) - np.float32(zp)) * np.float32(scale)


# ties (x / scale = k + 0.5 both ways), saturation both ways, and ordinary values
TIES = np.array([0.25, 0.75, 1.25, -0.25, -0.75, -1.25, 0.0, -0.0], np.float32)


def _data(rng):
    return np.concatenate([TIES, np.array([1e6, -1e6, 63.7, -64.2], np.float32),
                           rng.uniform(-80, 80, 40).astype(np.float32)])


def test_quant_dequant_i8_negative_zero_point(backend):
    x = _data(np.random.default_rng(1))
    q, back = np.zeros(x.shape, np.int8), np.zeros(x.shape, np.float32)
    quant_i8(x, np.float32(0.5), np.int8(-3), q, back, backend=backend)
    np.testing.assert_array_equal(q, quant_ref(x, 0.5, -3, np.int8))
    assert q[TIES.size] == 127 and q[TIES.size + 1] == -128  # saturated
    np.testing.assert_array_equal(q[:6], [-3, -1, -1, -3, -5, -5])  # 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, ...
    np.testing.assert_array_equal(back, dequant_ref(q, 0.5, -3))
    assert back.dtype == np.float32


def test_quant_dequant_u8_from_f16(backend):
    x = np.clip(_data(np.random.default_rng(2)), -6e4, 6e4).astype(np.float16)
    q, back = np.zeros(x.shape, np.uint8), np.zeros(x.shape, np.float32)
    quant_u8(x, np.float32(0.4), np.int32(128), q, back, backend=backend)
    np.testing.assert_array_equal(q, quant_ref(x, 0.4, 128, np.uint8))
    assert q[TIES.size] == 255 and q[TIES.size + 1] == 0
    np.testing.assert_array_equal(back, dequant_ref(q, 0.4, 128))


def test_quant_i16(backend):
    x = _data(np.random.default_rng(3)) * np.float32(100)
    q = np.zeros(x.shape, np.int16)
    quant_i16(x, np.float32(0.25), np.int16(-100), q, backend=backend)
    np.testing.assert_array_equal(q, quant_ref(x, 0.25, -100, np.int16))


def test_quant_divides_in_f32_not_f64(backend):
    """x / scale rounded to f32 lands on a tie for these x (-63.35 / 0.1f...), where the f64
    quotient would not: the result follows the f32 one (what ONNX's f32 reference computes)."""
    x = (np.arange(-1270, 1271) / 20).astype(np.float32)
    scale = np.float32(0.1)
    wide = np.clip(np.rint(x.astype(np.float64) / np.float64(scale)), -128, 127).astype(np.int8)
    assert (wide != quant_ref(x, scale, 0, np.int8)).sum() > 50  # the two really differ here
    q, back = np.zeros(x.shape, np.int8), np.zeros(x.shape, np.float32)
    quant_i8(x, scale, np.int8(0), q, back, backend=backend)
    np.testing.assert_array_equal(q, quant_ref(x, scale, 0, np.int8))
    y = np.zeros(q.shape, np.float32)
    dequant_only(q, scale, np.int8(5), y, backend=backend)
    np.testing.assert_array_equal(y, dequant_ref(q, scale, 5))


def test_quant_in_an_op_kernel_via_dsl_func(backend):
    """The builtins also work inside a @dsl.func."""
    @dsl.func
    def requant(v, s_in, z_in, s_out, z_out):
        return dsl.quant(dsl.dequant(v, s_in, z_in), s_out, z_out, u8)

    @dsl.kernel
    def k(x: In[u8], y: Out[u8]):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = requant(x.flat[i], f32(0.02), 10, f32(0.05), 0)

    x = np.arange(256, dtype=np.uint8)
    y = np.zeros_like(x)
    k(x, y, backend=backend)
    np.testing.assert_array_equal(y, quant_ref(dequant_ref(x, np.float32(0.02), 10), np.float32(0.05), 0, np.uint8))


def test_quant_with_a_bad_dtype_is_a_compile_error():
    @dsl.kernel
    def bad(x: In[f32], y: Out[i32]):
        for i in range(x.size):
            y.flat[i] = dsl.quant(x.flat[i], 0.5, 0, i32)

    with pytest.raises(dsl.CompileError, match=r"dsl.quant\(v, scale, zero_point, dtype\): dtype must be one "
                                               r"of i8, u8, i16, u16 named in the code, got 'i32'"):
        bad(np.zeros(2, np.float32), np.zeros(2, np.int32), backend="numba")

    @dsl.kernel
    def missing(x: In[f32], y: Out[i8]):
        for i in range(x.size):
            y.flat[i] = dsl.quant(x.flat[i], 0.5, 0)

    with pytest.raises(dsl.CompileError, match=r"missing argument\(s\): dtype"):
        missing(np.zeros(2, np.float32), np.zeros(2, np.int8), backend="numba")


def test_interpreter_face_rejects_a_bad_dtype():
    with pytest.raises(TypeError, match="dtype must be one of i8, u8, i16, u16, got dsl.f32"):
        dsl.quant(np.float32(1), 0.5, 0, f32)
    assert dsl.quant(np.float32(1.25), 0.5, 0, i8) == np.int8(2)
    assert dsl.dequant(np.int8(3), 0.5, -1).dtype == np.float32
