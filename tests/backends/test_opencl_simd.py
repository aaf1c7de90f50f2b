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


# ---------------------------------------------------------------- storage types, casts, integer lanes

@dsl.kernel(threads=1)
def storage_lanes(h: In[f16], b: In[bf16], k: In[i32], d: In[f64], ho: Out[f16], bo: Out[bf16], ko: Out[i32],
                  sat: Out[i32, 2], small: Out[u8], fl: Out[f32, 2], dd: Out[f64], ir: Out[i64, 2]):
    n = h.size
    for i in range(0, n, 4):
        hv = h.vload(i, 4)                       # f16 and bf16 lanes load as f32
        bv = b.vload(i, 4)
        kv = k.vload(i, 4)
        ho.vstore(i, hv * 3.0)                   # rounded to f16 / bf16 on the way out
        bo.vstore(i, bv * 3.0 + 0.1)
        ko.vstore(i, kv * 3 - dsl.fma(kv, kv, kv) + (kv & 255 | 7 ^ kv) + ~kv)   # wraps at 32 bits
        sat.vstore(0 * n + i, dsl.i32(hv * 1e6))  # truncate, saturate, NaN -> 0
        sat.vstore(1 * n + i, dsl.i32(dsl.f64(bv) * -1e8))
        small.vstore(i, dsl.u8(kv))               # int -> narrower int wraps
        fl.vstore(0 * n + i, dsl.f32(kv) + dsl.f32(hv > 0.0) + dsl.f32(kv < 0))
        fl.vstore(1 * n + i, dsl.f32(dsl.where(dsl.f64(kv) > d.vload(i, 4), kv, -kv)))
        dv = d.vload(i, 4)
        dd.vstore(i, dsl.max(dv, 0.5) * dsl.min(dv, dsl.f64(2)) + dsl.sqrt(dsl.abs(dv)) + dsl.fma(dv, dv, 1.0))
        r = i // 4
        ir[0, r] = dsl.reduce_add(kv)
        ir[1, r] = dsl.reduce_max(dsl.abs(kv) - dsl.max(kv, 3))
        ir[2, r] = dsl.reduce_min(dsl.clamp(kv, -100, 100))
        ir[3, r] = dsl.fma(kv[0], kv[1], kv[2])  # scalar integer fma wraps like numpy
        ir[4, r] = dsl.i64(dsl.reduce_add(dsl.u8(kv)))  # u8 lanes sum modulo 256


def test_storage_casts_and_integer_lanes():
    import ml_dtypes
    rng = np.random.default_rng(1)
    n = 16
    h = (rng.standard_normal(n) * 100).astype(np.float16)
    h[[1, 2, 3, 5]] = [np.nan, np.inf, -np.inf, 60000]
    b = (rng.standard_normal(n) * 100).astype(ml_dtypes.bfloat16)
    b[[0, 6]] = [1e30, -1e30]
    k = rng.integers(-2**31, 2**31, n).astype(np.int32)
    k[:4] = [5, -7, 300, -2**31]
    d = rng.standard_normal(n)
    ho, bo, ko, small, dd = (np.zeros(n, np.float16), np.zeros(n, ml_dtypes.bfloat16), np.zeros(n, np.int32),
                             np.zeros(n, np.uint8), np.zeros(n, np.float64))
    sat, fl, ir = np.zeros((2, n), np.int32), np.zeros((2, n), np.float32), np.zeros((5, n // 4), np.int64)
    storage_lanes(h, b, k, d, ho, bo, ko, sat, small, fl, dd, ir, backend="opencl")

    hf, bf = h.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ho, (hf * np.float32(3)).astype(np.float16))
        np.testing.assert_array_equal(bo.view(np.uint16),
                                      (bf * np.float32(3) + np.float32(0.1)).astype(ml_dtypes.bfloat16).view(np.uint16))
        k64 = k.astype(np.int64)
        ref_ko = k64 * 3 - (k64 * k64 + k64) + ((k64 & 255) | (7 ^ k64)) + ~k64
        np.testing.assert_array_equal(ko, ref_ko.astype(np.int32))  # wraps

        def to_i32(f):  # the scalar int() rule
            f = np.asarray(f, np.float64)
            return np.where(np.isnan(f), 0, np.clip(np.trunc(np.nan_to_num(f)), -2**31, 2**31 - 1)).astype(np.int32)
        np.testing.assert_array_equal(sat[0], to_i32(hf * np.float32(1e6)))
        np.testing.assert_array_equal(sat[1], to_i32(bf.astype(np.float64) * -1e8))
        assert list(sat[0, 1:4]) == [0, 2**31 - 1, -2**31]
        np.testing.assert_array_equal(small, k.astype(np.uint8))
        np.testing.assert_array_equal(fl[0], k.astype(np.float32) + (hf > 0) + (k < 0))
        np.testing.assert_array_equal(fl[1], np.where(k > d, k, -k).astype(np.float32))  # -INT_MIN wraps
        ref_dd = py_max(d, 0.5) * py_min(d, 2.0) + np.sqrt(np.abs(d)) + (d * d + 1.0)
        np.testing.assert_allclose(dd, ref_dd, rtol=1e-15)
        kb = k.reshape(-1, 4)
        np.testing.assert_array_equal(ir[0], kb.sum(axis=1, dtype=np.int32))
        np.testing.assert_array_equal(ir[1], (np.abs(kb) - np.maximum(kb, 3)).max(axis=1))
        np.testing.assert_array_equal(ir[2], np.clip(kb, -100, 100).min(axis=1))
        np.testing.assert_array_equal(ir[3], (kb[:, 0] * kb[:, 1] + kb[:, 2]).astype(np.int32))
        np.testing.assert_array_equal(ir[4], kb.astype(np.uint8).sum(axis=1, dtype=np.uint8))


# ---------------------------------------------------------------- dsl.local arrays and scratch

@dsl.kernel(threads=4)
def locals_and_scratch(x: In[f32, 2], out: Out[f32], hist: Out[i32, 2], last: Out[f32, 2], back: Out[f32],
                       half: Out[f32]):
    t = dsl.thread_id()
    acc = dsl.local((2,), dsl.simd(f32, 8))          # indexed at compile time: two float8 locals
    cnt = dsl.local((4,), i32)                       # indexed at run time: a private array
    grid = dsl.local((2, 3), f32)
    for r in range(t, x.shape[0], dsl.num_threads()):
        for j in dsl.static_range(2):
            acc[j] += x.vload(r * 16 + j * 8, 8)
        row = dsl.local((3,), f32)                   # zeroed again for every row
        for c in range(16):
            b = dsl.i32(dsl.clamp(x[r, c] * 2.0 + 2.0, 0.0, 3.0))
            cnt[b] += 1
            row[c % 3] += x[r, c]
            grid[c % 2, b % 3] = x[r, c]
        for k in range(3):
            last[t, k] = row[k]
    for b in range(4):
        hist[t, b] = cnt[b]
    for k in range(6):
        last[t, 3 + k] = grid[k // 3, k % 3]
    s = dsl.scratch((64,), f32)
    h = dsl.scratch((64,), f16)
    for j in dsl.static_range(2):
        out.vstore(t * 16 + j * 8, acc[j])
        s.vstore(t * 16 + j * 8, acc[j])
        h.vstore(t * 16 + j * 8, acc[j] / 3.0)
    dsl.sync()
    other = (t + 1) % dsl.num_threads()
    for j in dsl.static_range(4):
        back.vstore(t * 16 + j * 4, s.vload(other * 16 + j * 4, 4))
        half.vstore(t * 16 + j * 4, h.vload(other * 16 + j * 4, 4))


def test_local_arrays_and_scratch():
    rng = np.random.default_rng(2)
    rows = 11
    x = rng.standard_normal((rows, 16)).astype(np.float32)
    out, back, half = np.zeros(64, np.float32), np.zeros(64, np.float32), np.zeros(64, np.float32)
    hist, last = np.zeros((4, 4), np.int32), np.zeros((4, 9), np.float32)
    locals_and_scratch(x, out, hist, last, back, half, backend="opencl")
    acc = np.zeros((4, 16), np.float32)
    ref_hist = np.zeros((4, 4), np.int32)
    ref_last = np.zeros((4, 9), np.float32)
    for t in range(4):
        grid = np.zeros((2, 3), np.float32)
        for r in range(t, rows, 4):
            acc[t] += x[r]
            row = np.zeros(3, np.float32)
            for c in range(16):
                b = int(np.clip(x[r, c] * np.float32(2) + np.float32(2), 0, 3))
                ref_hist[t, b] += 1
                row[c % 3] += x[r, c]
                grid[c % 2, b % 3] = x[r, c]
            ref_last[t, :3] = row
        ref_last[t, 3:] = grid.ravel()
    np.testing.assert_allclose(out, acc.ravel(), rtol=1e-6)
    np.testing.assert_array_equal(hist, ref_hist)
    np.testing.assert_allclose(last, ref_last, rtol=1e-6)
    np.testing.assert_array_equal(back, np.roll(out.reshape(4, 16), -1, axis=0).ravel())
    ref_half = (np.roll(out.reshape(4, 16), -1, axis=0).ravel() / np.float32(3)).astype(np.float16)
    np.testing.assert_array_equal(half, ref_half.astype(np.float32))


# ---------------------------------------------------------------- bool lanes in memory, debug mode

@dsl.kernel(threads=1, debug=True)
def shifted(x: In[f32], keep: In[dsl.bool_], y: Out[f32], pos: Out[dsl.bool_], s: i64, t: i64):
    v = x.vload(s, 4)
    y.vstore(t, dsl.where(keep.vload(s, 4), v * 2.0, -1.0))
    pos.vstore(t, (v > 0.0) ^ keep.vload(s, 4))
    y[0] = dsl.f32(dsl.reduce_add(dsl.i32(keep.vload(s, 4)))) + dsl.f32(keep.vload(s, 4)[1])


def test_bool_lanes_and_debug_bounds():
    from dsl.lang.errors import LaunchError
    x = np.array([1, -2, 3, -4, 5, -6, 7, -8], np.float32)
    keep = np.array([1, 1, 0, 1, 0, 0, 1, 1], bool)

    def run(s, t):
        y, pos = np.full(8, 9, np.float32), np.zeros(8, bool)
        shifted(x, keep, y, pos, s, t, backend="opencl")
        return y, pos

    y, pos = run(0, 3)
    ref = np.full(8, 9, np.float32)
    ref[3:7] = np.where(keep[:4], x[:4] * 2, -1)
    ref[0] = keep[:4].sum() + keep[1]
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(pos.view(np.uint8)[3:7], (x[:4] > 0) ^ keep[:4])  # stored as 0/1 bytes
    assert not pos[:3].any() and not pos[7:].any()

    for s, t, tensor, index, kind in [(6, 0, "x", 8, "load"), (-1, 0, "x", -1, "load"), (9, 0, "x", 9, "load"),
                                      (0, 5, "y", 8, "store"), (0, -2, "y", -2, "store")]:
        y = np.full(8, 9, np.float32)
        with pytest.raises(IndexError) as info:
            shifted(x, keep, y, np.zeros(8, bool), s, t, backend="opencl")
        err = info.value
        assert isinstance(err, LaunchError)
        assert (err.tensor, err.index) == (tensor, (index,)), str(err)
        assert f"index {index} out of bounds for {tensor}.flat" in str(err) and kind in str(err)
        if kind == "store":
            assert (y[1:] == 9).all()  # the failed vstore wrote nothing


# ---------------------------------------------------------------- 512- and 1024-bit vectors

@dsl.kernel(threads=1)
def wide(x: In[f32], h: In[f16], b: In[bf16], k: In[i64], o32: Out[f32, 2], oh: Out[f16], ob: Out[bf16],
         oi: Out[i32, 2], ol: Out[i64, 2], o64: Out[f64, 2], mask: Out[dsl.bool_], red: Out[f64]):
    v = x.vload(0, 16)                                   # float16
    hv = h.vload(0, 16)
    bv = b.vload(0, 16)
    kv = k.vload(0, 8)                                   # long8
    m = v > hv
    o32.vstore(0, dsl.where(m, dsl.exp(v * 0.5), dsl.max(v, bv, -1.0)))
    o32.vstore(16, dsl.f32(dsl.f64(v) * 2.0) + dsl.f32(m) + dsl.fma(v, hv, bv))
    o32.vstore(32, dsl.f32(k.vload(8, 8) * kv) * 0.5)   # i64 -> f32 of 8 lanes
    o32.vstore(40, dsl.f32(dsl.splat(1.5, 8) * dsl.f64(kv)))
    oh.vstore(0, v + hv)
    ob.vstore(0, v - bv)
    oi.vstore(0, dsl.i32(v * 1e9))
    oi.vstore(16, dsl.i32(dsl.min(kv, 5)) + dsl.abs(dsl.i32(kv)))
    ol.vstore(0, dsl.i64(v * 1e12))                       # float16 -> long16 (1024 bits)
    ol.vstore(16, kv * 3 + dsl.i64(dsl.f64(kv) > 0.0))
    d = dsl.f64(v)                                       # double16
    o64.vstore(0, dsl.sqrt(dsl.abs(d)) + dsl.where(d < 0.0, -d, d * 2.0) + dsl.min(d, 0.25))
    mask.vstore(0, (v > 0.0) ^ m)
    red[0] = dsl.reduce_add(d) + dsl.f64(dsl.reduce_max(v)) + dsl.f64(dsl.reduce_min(kv))
    red[1] = dsl.reduce_max(d)


def test_wide_vectors():
    import ml_dtypes
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(16) * 4).astype(np.float32)
    x[5] = np.nan
    h = (rng.standard_normal(16) * 4).astype(np.float16)
    b = (rng.standard_normal(16) * 4).astype(ml_dtypes.bfloat16)
    k = rng.integers(-1000, 1000, 16).astype(np.int64)
    k[0] = 2**40 + 3
    o32, oh, ob = np.zeros((1, 48), np.float32), np.zeros(16, np.float16), np.zeros(16, ml_dtypes.bfloat16)
    oi, ol, o64 = np.zeros((1, 32), np.int32), np.zeros((1, 24), np.int64), np.zeros((1, 16), np.float64)
    mask, red = np.zeros(16, bool), np.zeros(2, np.float64)
    wide(x, h, b, k, o32, oh, ob, oi, ol, o64, mask, red, backend="opencl")

    hf, bf, kk = h.astype(np.float32), b.astype(np.float32), k[:8]
    with np.errstate(all="ignore"):
        m = x > hf
        ref = np.where(m, np.exp(x * np.float32(0.5)), py_max(py_max(x, bf), np.float32(-1)))
        np.testing.assert_allclose(o32[0, :16], ref, rtol=2e-6)
        fma = (x.astype(np.float64) * hf + bf).astype(np.float32)
        np.testing.assert_array_equal(o32[0, 16:32], (x.astype(np.float64) * 2).astype(np.float32) + m + fma)
        np.testing.assert_array_equal(o32[0, 32:40], (k[8:] * kk).astype(np.float32) * np.float32(0.5))
        np.testing.assert_array_equal(o32[0, 40:48], (1.5 * kk.astype(np.float64)).astype(np.float32))
        np.testing.assert_array_equal(oh, (x + hf).astype(np.float16))
        np.testing.assert_array_equal(ob.view(np.uint16), (x - bf).astype(ml_dtypes.bfloat16).view(np.uint16))
        big = (x * np.float32(1e9)).astype(np.float64)
        ref_i = np.where(np.isnan(big), 0, np.clip(np.trunc(np.nan_to_num(big)), -2**31, 2**31 - 1))
        np.testing.assert_array_equal(oi[0, :16], ref_i)
        ki = kk.astype(np.int32)
        np.testing.assert_array_equal(oi[0, 16:24], np.minimum(kk, 5).astype(np.int32) + np.abs(ki))
        huge = (x * np.float32(1e12)).astype(np.float64)
        np.testing.assert_array_equal(ol[0, :16], np.where(np.isnan(huge), 0, np.trunc(np.nan_to_num(huge))))
        np.testing.assert_array_equal(ol[0, 16:24], kk * 3 + (kk > 0))
        d = x.astype(np.float64)
        np.testing.assert_array_equal(o64[0], np.sqrt(np.abs(d)) + np.where(d < 0, -d, d * 2) + py_min(d, 0.25))
        np.testing.assert_array_equal(mask, (x > 0) ^ m)
    assert np.isnan(red[0])               # a NaN lane in a sum
    assert red[1] == np.nanmax(d)         # lane 0 is a number: later NaN lanes are skipped, like max()
