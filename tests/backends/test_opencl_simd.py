"""SIMD values and dsl.local arrays on OpenCL (backends/cstyle/simd.py): each construct against a
numpy reference.  Few kernels, each covering many constructs: every OpenCL build costs time."""
import math

import numpy as np
import pytest

import dsl
from dsl import In, Out, bf16, f16, f32, f64, i32, i64, u8

pytestmark = pytest.mark.usefixtures("opencl")


@pytest.fixture(scope="module")
def opencl():
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")


def py_max(a, b):
    """Python's max(a, b) element-wise: b only when b > a (a NaN a is kept, a NaN b skipped)."""
    return np.where(b > a, b, a)


def py_min(a, b):
    return np.where(b < a, b, a)


# ---------------------------------------------------------------- f32 lanes

MATH = ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sin", "cos", "floor", "ceil", "abs")


@dsl.kernel(threads=1)
def f32_lanes(x: In[f32], y: In[f32], arith: Out[f32], mm: Out[f32], wh: Out[f32], fm: Out[f32],
              math: Out[f32, 2], red: Out[f32, 2], lanes: Out[f32, 2], a: f32):
    n = x.size
    for i in range(0, n, 8):
        v = x.vload(i, 8)
        w = y.vload(i, 8)
        arith.vstore(i, v * a + w - 1.5 / w)                     # scalars broadcast
        mm.vstore(i, dsl.clamp(dsl.max(v, w), -1.0, 1.0) + dsl.min(v, w, dsl.splat(a, 8)))
        m = (v > w) | (v < -0.5)
        wh.vstore(i, dsl.where(m & ~(w >= 1.0), v, w) + dsl.f32(m ^ (v == w)))
        fm.vstore(i, dsl.fma(v, w, dsl.splat(a, 8)))
        p = dsl.abs(v) + 0.5
        math.vstore(0 * n + i, dsl.exp(v))
        math.vstore(1 * n + i, dsl.log(p))
        math.vstore(2 * n + i, dsl.sqrt(p))
        math.vstore(3 * n + i, dsl.rsqrt(p))
        math.vstore(4 * n + i, dsl.tanh(v))
        math.vstore(5 * n + i, dsl.erf(v))
        math.vstore(6 * n + i, dsl.sin(v))
        math.vstore(7 * n + i, dsl.cos(v))
        math.vstore(8 * n + i, dsl.floor(v * 3.0))
        math.vstore(9 * n + i, dsl.ceil(v * 3.0))
        math.vstore(10 * n + i, dsl.abs(-v))
        r = i // 8
        red[0, r] = dsl.reduce_add(v)
        red[1, r] = dsl.reduce_max(v)
        red[2, r] = dsl.reduce_min(v)
        red[3, r] = dsl.fma(v[1], a, v[2])                        # scalar fma
        lanes[r, 0] = v[0]
        lanes[r, 1] = v[7] + w[10 - 5]
        lanes[r, 2] = dsl.splat(a, 4)[3]


def test_f32_lanes():
    rng = np.random.default_rng(0)
    n = 32
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    y[3] = x[3]  # an equal pair for ==
    x[8] = np.nan  # block 1: NaN in lane 0 -> reduce_max/min give NaN, like max(v[0], v[1], ...)
    x[19] = np.nan  # block 2: NaN in lane 3 -> skipped by reduce_max/min
    a = np.float32(0.75)
    outs = dict(arith=np.zeros(n, np.float32), mm=np.zeros(n, np.float32), wh=np.zeros(n, np.float32),
                fm=np.zeros(n, np.float32), math=np.zeros((len(MATH), n), np.float32),
                red=np.zeros((4, n // 8), np.float32), lanes=np.zeros((n // 8, 3), np.float32))
    f32_lanes(x, y, **outs, a=a, backend="opencl")

    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(outs["arith"], x * a + y - np.float32(1.5) / y, rtol=1e-6)
        ref_mm = py_min(py_max(py_max(x, y), np.float32(-1)), np.float32(1)) + py_min(py_min(x, y), a)
        np.testing.assert_allclose(outs["mm"], ref_mm, rtol=1e-6)
        m = (x > y) | (x < -0.5)
        ref_wh = np.where(m & ~(y >= 1.0), x, y) + (m ^ (x == y)).astype(np.float32)
        np.testing.assert_array_equal(outs["wh"], ref_wh)
        ref_fm = (x.astype(np.float64) * y + a).astype(np.float32)
        np.testing.assert_array_equal(outs["fm"], ref_fm)
    p = np.abs(x) + np.float32(0.5)
    erf = np.vectorize(math.erf)
    refs = [np.exp(x), np.log(p), np.sqrt(p), 1 / np.sqrt(p), np.tanh(x), erf(x.astype(np.float64)), np.sin(x),
            np.cos(x), np.floor(x * np.float32(3)), np.ceil(x * np.float32(3)), np.abs(x)]
    for name, got, ref in zip(MATH, outs["math"], refs):
        np.testing.assert_allclose(got, np.asarray(ref, np.float32), rtol=2e-6, atol=1e-7, err_msg=name)

    blocks = x.reshape(-1, 8)
    red = outs["red"]
    np.testing.assert_allclose(red[0], blocks.sum(axis=1), rtol=1e-5)
    assert np.isnan(red[1, 1]) and np.isnan(red[2, 1]) and np.isnan(red[0, 1])  # NaN lane 0
    skip = np.where(np.isnan(blocks), -np.inf, blocks).max(axis=1)
    np.testing.assert_array_equal(red[1, [0, 2, 3]], skip[[0, 2, 3]])          # later NaNs skipped
    skip = np.where(np.isnan(blocks), np.inf, blocks).min(axis=1)
    np.testing.assert_array_equal(red[2, [0, 2, 3]], skip[[0, 2, 3]])
    ref_fma = (blocks[:, 1].astype(np.float64) * a + blocks[:, 2]).astype(np.float32)
    np.testing.assert_array_equal(red[3], ref_fma)
    yb = y.reshape(-1, 8)
    np.testing.assert_array_equal(outs["lanes"], np.stack([blocks[:, 0], blocks[:, 7] + yb[:, 5],
                                                           np.full(n // 8, a)], axis=1))
