"""Every kernel-language feature, on every backend, against a numpy reference.

Kernels are module-level so each compiles once per backend for the whole run.
"""
import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f32, f64, i8, i32, i64, u8

T = dsl.TypeVar("T")


# ---------------------------------------------------------------- arithmetic and promotion

@dsl.kernel
def int_ops(a: In[i32], b: In[i32], out: Out[i32, 2]):
    lo, hi = dsl.split(a.size)
    for i in range(lo, hi):
        x = a.flat[i]
        y = b.flat[i]
        out[0, i] = x // y
        out[1, i] = x % y
        out[2, i] = x * 3 - y
        out[3, i] = (x << 2) ^ (y & 7) | 1
        out[4, i] = x >> 1
        out[5, i] = -x if x < y else ~y
        out[6, i] = int(x / y)  # true division then truncation toward zero
        out[7, i] = abs(x) + min(x, y, 3) - max(x, y)


def test_integer_semantics_are_pythons(backend):
    rng = np.random.default_rng(0)
    a = rng.integers(-50, 50, 64).astype(np.int32)
    b = rng.integers(1, 9, 64).astype(np.int32) * rng.choice([-1, 1], 64).astype(np.int32)
    out = np.zeros((8, 64), np.int32)
    int_ops(a, b, out, backend=backend)
    ref = [a // b, a % b, a * 3 - b, (a << 2) ^ (b & 7) | 1, a >> 1, np.where(a < b, -a, ~b),
           np.trunc(a / b).astype(np.int32), np.abs(a) + np.minimum(np.minimum(a, b), 3) - np.maximum(a, b)]
    for k, r in enumerate(ref):
        np.testing.assert_array_equal(out[k], r, err_msg=f"row {k}")


@dsl.kernel
def float_ops(a: In[f32], b: In[f32], out: Out[f32, 2]):
    lo, hi = dsl.split(a.size)
    for i in range(lo, hi):
        x = a.flat[i]
        y = b.flat[i]
        out[0, i] = x // y
        out[1, i] = x % y
        out[2, i] = x ** 2 + y * 0.5
        out[3, i] = dsl.exp(x) + dsl.log(dsl.abs(y)) + dsl.sqrt(dsl.abs(x))
        out[4, i] = dsl.tanh(x) + dsl.sin(y) * dsl.cos(x) + dsl.erf(y)
        out[5, i] = dsl.floor(x) + dsl.ceil(y) + dsl.rsqrt(dsl.abs(y) + 1.0)
        out[6, i] = dsl.clamp(x, -0.5, 0.5) + dsl.where(x > y, x, y)
        out[7, i] = float(int(x * 10.0))  # truncation of negative values toward zero


def test_float_semantics_and_math(backend):
    from math import erf
    rng = np.random.default_rng(1)
    a = rng.standard_normal(48).astype(np.float32) * 3
    b = rng.standard_normal(48).astype(np.float32) + 0.1
    b[np.abs(b) < 0.05] = 0.3
    out = np.zeros((8, 48), np.float32)
    float_ops(a, b, out, backend=backend)
    verf = np.vectorize(erf)
    ref = [np.floor_divide(a, b), np.mod(a, b), a ** 2 + b * 0.5,
           np.exp(a) + np.log(np.abs(b)) + np.sqrt(np.abs(a)),
           np.tanh(a) + np.sin(b) * np.cos(a) + verf(b).astype(np.float32),
           np.floor(a) + np.ceil(b) + 1 / np.sqrt(np.abs(b) + 1),
           np.clip(a, -0.5, 0.5) + np.where(a > b, a, b), np.trunc(a * np.float32(10))]
    for k, r in enumerate(ref):
        np.testing.assert_allclose(out[k], r.astype(np.float32), rtol=2e-5, atol=2e-5, err_msg=f"row {k}")


@dsl.kernel(threads=1)
def promotion(a: In[i8], b: In[u8], c: In[f32], out: Out[f64]):
    x = a[0] + b[0]          # i8 + u8 -> i16 (numpy)
    y = a[0] / 2             # int / literal -> f64
    z = c[0] * 2.5           # f32 * weak float -> f32
    w = 7 // 2 + 1.5         # literal arithmetic stays Python
    out[0] = x
    out[1] = y
    out[2] = z
    out[3] = w
    n = i8(100)
    n += 100                 # i8 stays i8 and wraps, as in numpy
    out[4] = n
    m = b[0] + b[0]          # u8 + u8 wraps
    out[5] = m


def test_promotion_follows_numpy(backend):
    a = np.array([-100], np.int8)
    b = np.array([200], np.uint8)
    c = np.array([1.1], np.float32)
    out = np.zeros(6, np.float64)
    with np.errstate(over="ignore"):
        promotion(a, b, c, out, backend=backend)
    assert out[0] == 100.0
    assert out[1] == -50.0
    assert out[2] == np.float64(np.float32(1.1) * np.float32(2.5))
    assert out[3] == 4.5
    assert out[4] == 100 + 100 - 256
    assert out[5] == (200 + 200) % 256


# ---------------------------------------------------------------- control flow

@dsl.kernel(threads=2)
def control(n: i32, out: Out[i64]):
    if dsl.thread_id() != 0:
        return
    total = 0
    for i in range(n, 0, -2):           # negative step
        if i % 3 == 0:
            continue
        elif i == 7:
            total += 1000
        else:
            total += i
        i = 1000                         # does not change the iteration
    out[0] = total
    k = 0
    while True:
        k += 1
        if k * k > n:
            break
    out[1] = k
    a, b = 1, 2
    a, b = b, a                          # swap through temporaries
    out[2] = a * 10 + b
    c = 5 if n > 3 and n < 100 else 6    # chained logic, ternary
    out[3] = c + (1 if 0 < n <= 20 else 0)


def test_control_flow(backend):
    out = np.zeros(4, np.int64)
    control(20, out, backend=backend)
    total = sum(1000 if i == 7 else i for i in range(20, 0, -2) if i % 3 != 0)
    k = 1
    while k * k <= 20:
        k += 1
    assert list(out) == [total, k, 21, 6]


@dsl.kernel
def guarded(x: In[f32], n: i32, out: Out[f32]):
    lo, hi = dsl.split(out.size)
    for i in range(lo, hi):
        # short-circuit: x.flat[i] is never read when i >= n
        out.flat[i] = 1.0 if i < n and x.flat[i] > 0 else 0.0


def test_short_circuit_guards_loads(backend):
    x = np.array([1, -1, 2], np.float32)
    out = np.full(8, 7, np.float32)
    guarded(x, 3, out, backend=backend)
    np.testing.assert_array_equal(out, [1, 0, 1, 0, 0, 0, 0, 0])


# ---------------------------------------------------------------- tensors, shapes, params

@dsl.kernel
def transpose2d(x: In[T, 2], y: Out[T, 2]):
    rows, cols = x.shape
    lo, hi = dsl.split(rows)
    for i in range(lo, hi):
        for j in range(cols):
            y[j, i] = x[i, j]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_generic_dtype_and_2d_indexing(backend, dtype):
    x = (np.arange(35).reshape(5, 7) % 200).astype(dtype)
    y = np.zeros((7, 5), dtype)
    transpose2d(x, y, backend=backend)
    np.testing.assert_array_equal(y, x.T)


@dsl.kernel(threads=1)
def metadata(x: In[f32], out: Out[i64]):
    out[0] = x.ndim
    out[1] = x.size
    out[2] = x.shape[-1]
    out[3] = len(x)


def test_tensor_metadata(backend):
    out = np.zeros(4, np.int64)
    metadata(np.zeros((2, 3, 4), np.float32), out, backend=backend)
    assert list(out) == [3, 24, 4, 2]


@dsl.kernel(threads=1)
def params(out: Out[f64], v: dsl.Vec[i32, 3], k: dsl.const[i32] = 2, s: f64 = 0.5, flag: dsl.bool_ = True):
    for i in range(3):
        out[i] = v[i] * k + s
    out[3] = 1.0 if flag else -1.0


def test_vec_const_and_default_params(backend):
    out = np.zeros(4)
    params(out, (1, 2, 3), backend=backend)
    np.testing.assert_array_equal(out, [2.5, 4.5, 6.5, 1.0])
    params(out, [4, 5, 6], k=3, s=0.0, flag=False, backend=backend)
    np.testing.assert_array_equal(out, [12, 15, 18, -1])


@dsl.kernel
def inplace_scale(x: InOut[f32], factor: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        x.flat[i] *= factor


def test_inout_in_place(backend):
    x = np.arange(10, dtype=np.float32)
    inplace_scale(x, 2.0, backend=backend)
    np.testing.assert_array_equal(x, np.arange(10) * 2)


# ---------------------------------------------------------------- device functions

@dsl.func
def smoothstep(e0, e1, v):
    t = dsl.clamp((v - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


@dsl.func
def cube(v):
    return v * v * v


@dsl.kernel
def use_funcs(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = smoothstep(-1.0, 1.0, x.flat[i]) + cube(x.flat[i])


def test_device_functions(backend):
    x = np.linspace(-2, 2, 33).astype(np.float32)
    y = np.zeros_like(x)
    use_funcs(x, y, backend=backend)
    t = np.clip((x + 1) / 2, 0, 1)
    np.testing.assert_allclose(y, t * t * (3 - 2 * t) + x ** 3, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- 16-bit storage

@dsl.kernel
def half_axpy(x: In[T], y: InOut[T], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + y.flat[i]  # computed in f32, stored rounded


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_f16_bf16_storage_f32_compute(backend, dtype):
    npdt = getattr(dsl, dtype).np
    x = np.linspace(-3, 3, 40).astype(npdt)
    y = np.linspace(1, 2, 40).astype(npdt)
    ref = (np.float32(0.3) * x.astype(np.float32) + y.astype(np.float32)).astype(npdt)
    half_axpy(x, y, 0.3, backend=backend)
    np.testing.assert_array_equal(y.astype(np.float32), ref.astype(np.float32))


# ---------------------------------------------------------------- logging

@dsl.kernel(threads=2, log_level="info")
def chatty(x: In[f32]):
    if dsl.thread_id() == 1:
        dsl.log.info("value=%d half=%.2f", 42, x[0])
        dsl.log.debug("never compiled in %d", 1)


def test_log_is_filtered_at_compile_time(backend, capfd):
    chatty(np.array([0.5], np.float32), backend=backend)
    out = capfd.readouterr().out
    assert "value=42 half=0.50" in out
    assert "never compiled in" not in out
    body = chatty.source("ir").split("body:")[1]
    assert "log.info" in body and "log.debug" not in body


@dsl.kernel(threads=2)
def printer(x: In[f32], n: i32):
    if dsl.thread_id() == 1:
        print("x0", x[0], "n", n)


def test_print_is_plain_print_on_every_backend(backend, capfd):
    printer(np.array([0.5], np.float32), 7, backend=backend)
    lines = capfd.readouterr().out.splitlines()
    assert "x0 0.5 n 7" in lines
