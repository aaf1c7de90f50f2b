"""SIMD values and dsl.local arrays on every backend, against numpy (docs/language.md,
"SIMD values and local arrays"); compile-time errors name the line and what is accepted."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i32

RNG = np.random.default_rng(3)
LANES = 8


@dsl.kernel(threads=2)
def simd_mix(x: In[f32], y: In[f32], out: Out[f32], red: Out[f32], a: f32):
    """fma with a broadcast scalar, compare + where, min/max, math, lane reads and reductions."""
    lo, hi = dsl.split(x.size // LANES)
    for blk in range(lo, hi):
        i = blk * LANES
        v = x.vload(i, LANES)
        w = y.vload(i, LANES)
        z = dsl.fma(v, a, w) - 0.5
        z = dsl.where(z > 0.0, z, z * 0.25) + dsl.exp(min(v, w)) + abs(max(v, w))
        out.vstore(i, z)
        red[blk * 4] = dsl.reduce_add(z)
        red[blk * 4 + 1] = dsl.reduce_max(v)
        red[blk * 4 + 2] = dsl.reduce_min(w)
        red[blk * 4 + 3] = z[0] + z[LANES - 1]


@dsl.kernel(threads=1)
def col_sums(x: In[f32, 2], out: Out[f32], neg: Out[i32]):
    """Two SIMD accumulators in a dsl.local array (registers), and a run-time indexed one."""
    acc = dsl.local((2,), dsl.simd(f32, LANES))
    counts = dsl.local((2 * LANES,), i32)
    for r in range(x.shape[0]):
        for j in dsl.static_range(2):
            v = x.vload(r * 2 * LANES + j * LANES, LANES)
            acc[j] += v
            for k in dsl.static_range(LANES):
                if v[k] < 0:
                    counts[j * LANES + k] += 1
    for j in dsl.static_range(2):
        out.vstore(j * LANES, acc[j])
    for c in range(2 * LANES):
        neg[c] = counts[c]


@dsl.kernel(threads=1)
def half_roundtrip(x: In[dsl.f16], y: Out[dsl.f16], ints: Out[i32]):
    """f16 lanes load as f32 and store rounded; float -> int lanes truncate."""
    for i in range(0, x.size, 4):
        v = x.vload(i, 4) * 2.0
        y.vstore(i, v)
        ints.vstore(i, dsl.i32(v))


def test_simd_arithmetic_matches_numpy(backend):
    n = 4 * LANES
    x, y = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    out, red = np.zeros(n, np.float32), np.zeros(n // LANES * 4, np.float32)
    simd_mix(x, y, out, red, np.float32(1.5), backend=backend)
    z = x * np.float32(1.5) + y - np.float32(0.5)
    z = np.where(z > 0, z, z * np.float32(0.25)) + np.exp(np.minimum(x, y)) + np.abs(np.maximum(x, y))
    np.testing.assert_allclose(out, z, rtol=1e-5, atol=1e-5)
    zb, xb, yb = z.reshape(-1, LANES), x.reshape(-1, LANES), y.reshape(-1, LANES)
    want = np.stack([zb.sum(1), xb.max(1), yb.min(1), zb[:, 0] + zb[:, -1]], 1).ravel()
    np.testing.assert_allclose(red, want, rtol=1e-5, atol=1e-5)


def test_local_arrays_register_and_run_time_indexed(backend):
    x = RNG.standard_normal((5, 2 * LANES)).astype(np.float32)
    out, neg = np.zeros(2 * LANES, np.float32), np.zeros(2 * LANES, np.int32)
    col_sums(x, out, neg, backend=backend)
    np.testing.assert_allclose(out, x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(neg, (x < 0).sum(0))
    ir = col_sums.source("ir", x, out, neg)
    assert "acc__1" in ir and "array counts" in ir  # acc became locals, counts stayed an array


def test_half_lanes_and_float_to_int(backend):
    x = (RNG.standard_normal(8) * 100).astype(np.float16)
    y, ints = np.zeros(8, np.float16), np.zeros(8, np.int32)
    half_roundtrip(x, y, ints, backend=backend)
    wide = x.astype(np.float32) * 2
    np.testing.assert_array_equal(y, wide.astype(np.float16))
    np.testing.assert_array_equal(ints, np.trunc(wide).astype(np.int32))


def _compile_error(src_fn, *args):
    with pytest.raises(dsl.CompileError) as err:
        src_fn.source("ir", *args)
    return str(err.value)


def test_errors_name_the_line_and_what_is_accepted():
    x = np.zeros(16, np.float32)

    @dsl.kernel(threads=1)
    def truth(x: In[f32], y: Out[f32]):
        v = x.vload(0, 4)
        if v > 0.0:
            y[0] = 1.0

    msg = _compile_error(truth, x, x)
    assert "test_simd.py" in msg and "no single truth value" in msg and "dsl.where" in msg

    @dsl.kernel(threads=1)
    def mixed(x: In[f32], y: Out[f32]):
        y.vstore(0, x.vload(0, 4) + x.vload(0, 8))

    assert "4 and 8 lanes do not mix" in _compile_error(mixed, x, x)

    @dsl.kernel(threads=1)
    def bad_lanes(x: In[f32], y: Out[f32], n: i32):
        y.vstore(0, x.vload(0, n))

    assert "known at compile time" in _compile_error(bad_lanes, x, x, np.int32(4))

    @dsl.kernel(threads=1)
    def lane_at_run_time(x: In[f32], y: Out[f32], k: i32):
        y[0] = x.vload(0, 4)[k]

    assert "lane of a SIMD value must be known at compile time" in _compile_error(lane_at_run_time, x, x,
                                                                                    np.int32(1))

    @dsl.kernel(threads=1)
    def simd_array_at_run_time(x: In[f32], y: Out[f32], k: i32):
        acc = dsl.local((2,), dsl.simd(f32, 4))
        y.vstore(0, acc[k])

    assert "array of SIMD values" in _compile_error(simd_array_at_run_time, x, x, np.int32(1))

    @dsl.kernel(threads=1)
    def scalar_store(x: In[f32], y: Out[f32]):
        y[0] = x.vload(0, 4)

    assert "needs a scalar, got a SIMD value" in _compile_error(scalar_store, x, x)


@dsl.func
def activation(v: dsl.simd(f32, LANES), kind: i32, lo: f32, hi: f32):
    """A SIMD epilogue helper: identity, Relu, Clip or a scalar (broadcast) result."""
    if kind == 1:
        return max(v, 0.0)
    if kind == 2:
        return min(max(v, lo), hi)
    if kind == 3:
        return lo
    return v


@dsl.func
def scaled(v, s):
    """Generic parameters: a SIMD argument specializes ``v`` for its lanes."""
    return activation(v * s, 1, 0.0, 0.0) - v


@dsl.kernel(threads=2)
def simd_funcs(x: In[f32], y: Out[f32], z: Out[f32], kind: i32):
    lo, hi = dsl.split(x.size // (2 * LANES))
    for b in range(lo, hi):
        acc = dsl.local((2,), dsl.simd(f32, LANES))
        for j in dsl.static_range(2):
            acc[j] = activation(x.vload((2 * b + j) * LANES, LANES), kind, -0.5, 0.5)
        for j in dsl.static_range(2):
            y.vstore((2 * b + j) * LANES, acc[j])
            z.vstore((2 * b + j) * LANES, scaled(x.vload((2 * b + j) * LANES, LANES), 2.0))


@pytest.mark.parametrize("kind", [0, 1, 2, 3])
def test_funcs_take_and_return_simd_values(backend, kind):
    x = RNG.standard_normal(8 * LANES).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    simd_funcs(x, y, z, kind, backend=backend)
    ref = [x, np.maximum(x, 0), np.clip(x, -0.5, 0.5), np.full_like(x, -0.5)][kind]
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    np.testing.assert_allclose(z, np.maximum(2 * x, 0) - x, rtol=1e-6)


def test_func_simd_errors_name_the_parameter_and_lanes():
    x = np.zeros(16, np.float32)

    @dsl.kernel(threads=1)
    def wrong_lanes(x: In[f32], y: Out[f32]):
        y.vstore(0, activation(x.vload(0, 4), 1, 0.0, 1.0))

    msg = _compile_error(wrong_lanes, x, x)
    assert "activation() parameter 'v' is simd(f32, 8), got a SIMD value (simd(f32, 4))" in msg
    assert "test_simd.py" in msg

    @dsl.func
    def two_widths(s, k: i32):
        if k > 0:
            return dsl.splat(s, 4, f32)
        return dsl.splat(s, 8, f32)

    @dsl.kernel(threads=1)
    def uses_two_widths(x: In[f32], y: Out[f32]):
        y.vstore(0, two_widths(1.0, 1))

    assert "returns SIMD values of 4 and 8 lanes" in _compile_error(uses_two_widths, x, x)

    with pytest.raises(dsl.CompileError, match="SIMD values are passed to @dsl.func helpers"):
        @dsl.kernel(threads=1)
        def simd_kernel_param(x: Out[f32], v: dsl.simd(f32, 4)):
            x[0] = v[0]


@dsl.kernel(threads=1)
def lane_extremes(x: In[f32], out: Out[f32]):
    v = x.vload(0, LANES)
    out[0] = dsl.reduce_max(v)
    out[1] = dsl.reduce_min(v)


@pytest.mark.parametrize("nan_lane", [0, 3, LANES - 1])
def test_reduce_max_min_treat_nan_as_max_and_min_do(backend, nan_lane):
    """max(v[0], v[1], ...): NaN only when lane 0 is NaN, whatever the reduction tree."""
    x = RNG.standard_normal(LANES).astype(np.float32)
    x[nan_lane] = np.nan
    out = np.zeros(2, np.float32)
    lane_extremes(x, out, backend=backend)
    if nan_lane == 0:
        assert np.isnan(out).all()
    else:
        np.testing.assert_array_equal(out, [np.nanmax(x), np.nanmin(x)])


@dsl.kernel(threads=1, debug=True)
def local_out_of_range(x: In[f32], out: Out[f32], k: i32):
    t = dsl.local((4,), f32)
    t[k] = x[0]
    out[0] = t[0]


def test_debug_mode_names_the_local_array_out_of_range(backend):
    with pytest.raises(Exception) as err:
        local_out_of_range(np.ones(2, np.float32), np.zeros(1, np.float32), np.int32(7), backend=backend)
    text = str(err.value)
    assert "7" in text and "'t'" in text and "test_simd.py" in text
