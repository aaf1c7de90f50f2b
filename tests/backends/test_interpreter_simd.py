"""Interpreter-only behaviour of SIMD values and dsl.local arrays (docs/language.md, "SIMD
values and local arrays"): lane-wise results against numpy and the scalar runtime, the
element types the checker gives, bounds checks, f16 lanes, and value (not view) semantics.

The cross-backend comparison lives in tests/dsl/test_simd.py."""
import sys

import ml_dtypes
import numpy as np
import pytest

import dsl
from backends import interpreter
from dsl import In, InOut, Out, f16, f32, f64, i8, i32, u8
from dsl.lang import builtins as B
from dsl.lang import types as T


def run(kernel, *args):
    kernel(*args, backend="interpreter")


def checked_and_run(kernel, *args):
    """Run a one-thread ``kernel`` in the interpreter and return ({local: value at return},
    {local: type the checker gave it}), to compare what the interpreter computes with the types."""
    values, _ = kernel.bind(args, {})
    types = dict(kernel.specialize(values).locals)
    seen = {}

    def profile(frame, event, arg):
        if event == "return" and frame.f_code is kernel.fn.__code__:
            seen.update(frame.f_locals)

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        run(kernel, *args)
    finally:
        sys.setprofile(old)
    return seen, types


def assert_typed(value, t):
    """``value`` is what the interpreter holds for a local the checker typed ``t``."""
    if isinstance(t, T.SimdType):
        assert isinstance(value, B.Lanes), (value, t)
        assert value.shape == (t.lanes,) and value.dtype == t.elem.np, (value.dtype, value.shape, t)
    else:
        assert isinstance(value, np.generic) and value.dtype == t.np, (type(value), t)


# ---------------------------------------------------------------- the spec's examples

@dsl.kernel(threads=1)
def saxpy16(x: In[f32], y: In[f32], out: Out[f32], a: f32):
    for i in range(0, x.size, 16):
        out.vstore(i, dsl.fma(x.vload(i, 16), a, y.vload(i, 16)))


@dsl.kernel(threads=1)
def col_sums(x: In[f32, 2], out: Out[f32]):
    acc = dsl.local((2,), dsl.simd(f32, 16))
    for r in range(x.shape[0]):
        for j in dsl.static_range(2):
            acc[j] += x.vload(r * 32 + j * 16, 16)
    for j in dsl.static_range(2):
        out.vstore(j * 16, acc[j])


def test_spec_examples():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    run(saxpy16, x, y, out, np.float32(1.5))
    ref = (x.astype(np.float64) * np.float32(1.5) + y).astype(np.float32)  # rounded once
    np.testing.assert_array_equal(out, ref)

    m = rng.standard_normal((5, 32)).astype(np.float32)
    sums = np.zeros(32, np.float32)
    run(col_sums, m, sums)
    ref = np.zeros(32, np.float32)
    for row in m:
        ref += row
    np.testing.assert_array_equal(sums, ref)


# ---------------------------------------------------------------- element types

@dsl.kernel(threads=1)
def lane_types(x: In[f32], n: In[i32], b: In[i8], c: In[u8], out: Out[f32]):
    v = x.vload(0, 4)
    w = x.vload(4, 4)
    k = n.vload(0, 4)
    times_weak = v * 2.0
    times_f64 = v * f64(2)
    zeros_f64 = dsl.splat(0.0, 4)
    zeros_f32 = dsl.splat(0.0, 4, f32)
    ints = dsl.splat(1, 4)
    int_plus = k + 1
    int_float = k * 2.5
    int_div = k / 2
    small = b.vload(0, 4) + c.vload(0, 4)
    mask = v < w
    nmask = ~mask
    both = mask & (w > 0.0)
    either = mask | nmask
    lo = min(v, 1.0)
    hi = max(v, w, 0.5)
    mag = abs(v)
    clamped = dsl.clamp(v, -1.0, 1.0)
    picked = dsl.where(mask, v, 0.0)
    picked_scalars = dsl.where(mask, 1.0, 2.0)
    picked_ints = dsl.where(mask, k, 0)
    fused = dsl.fma(v, 2.0, w)
    fused_int = dsl.fma(k, k, 1)
    e = dsl.exp(v)
    e_int = dsl.exp(b.vload(0, 4))
    lg = dsl.log(mag)
    sq = dsl.sqrt(mag)
    rs = dsl.rsqrt(mag)
    th = dsl.tanh(v)
    ef = dsl.erf(v)
    sn = dsl.sin(v)
    cs = dsl.cos(v)
    fl = dsl.floor(v)
    cl = dsl.ceil(k)
    total = dsl.reduce_add(v)
    top = dsl.reduce_max(k)
    bottom = dsl.reduce_min(b.vload(0, 4))
    lane = v[2]
    last = k[-1]
    as_i32 = dsl.i32(w)
    as_int = int(v)
    as_float = float(k)
    as_bool = bool(k)
    out.vstore(0, times_weak + times_f64 + zeros_f64 + zeros_f32 + ints + lane + last + total + top + bottom)
    out.vstore(4, picked + picked_scalars + picked_ints + fused + fused_int + e + e_int + lg + sq + rs + th + ef)
    out.vstore(8, lo + hi + clamped + sn + cs + fl + cl + as_i32 + as_int + as_float + int_plus + int_float)
    out.vstore(12, int_div + small + dsl.where(both, 1.0, 0.0) + dsl.where(either, 1.0, 0.0) + dsl.i32(as_bool))


def test_element_types_are_the_checkers():
    x = np.array([0.5, -2.0, 3.25, 0.0, 1.0, -1.0, 2.0, 7.5], np.float32)
    n = np.array([3, -4, 5, 120], np.int32)
    b = np.array([100, -100, 7, 1], np.int8)
    c = np.array([200, 3, 255, 0], np.uint8)
    seen, types = checked_and_run(lane_types, x, n, b, c, np.zeros(16, np.float32))
    locals_ = [name for name in lane_types.fn.__code__.co_varnames if name in types]
    assert len(locals_) > 40
    for name in locals_:
        assert_typed(seen[name], types[name])
    # spot checks of the spec's sentences
    assert types["times_weak"] == T.SimdType(T.f32, 4) and types["times_f64"] == T.SimdType(T.f64, 4)
    assert types["zeros_f64"].elem == T.f64 and types["zeros_f32"].elem == T.f32
    assert types["small"].elem == T.i16 and types["e_int"].elem == T.f64 and types["lane"] == T.f32
    np.testing.assert_array_equal(seen["small"], b.astype(np.int16) + c)
    np.testing.assert_array_equal(seen["int_div"], n / 2)
    np.testing.assert_array_equal(seen["picked_ints"], np.where(x[:4] < x[4:], n, 0))
    assert seen["lane"] == x[2] and seen["last"] == n[3]
    assert seen["top"] == 120 and seen["bottom"] == -100
    np.testing.assert_array_equal(seen["as_bool"], n != 0)


@dsl.kernel(threads=1)
def reductions(b: In[i8], x: In[f32], out: Out[i8], fout: Out[f32]):
    v = b.vload(0, 8)
    out[0] = dsl.reduce_add(v)
    out[1] = dsl.reduce_max(v)
    out[2] = dsl.reduce_min(v)
    fout[0] = dsl.reduce_add(x.vload(0, 16))


def test_reductions_keep_the_element_type():
    b = np.array([100, 100, 100, -3, 4, 5, 6, 7], np.int8)
    x = np.arange(16, dtype=np.float32) / 3
    out, fout = np.zeros(3, np.int8), np.zeros(1, np.float32)
    run(reductions, b, x, out, fout)
    assert out.tolist() == [np.int8(b.astype(np.int64).sum().astype(np.int8)), 100, -3]
    assert fout[0] == pytest.approx(x.astype(np.float64).sum(), rel=1e-6)


# ---------------------------------------------------------------- lane-wise = scalar semantics

SPECIAL = np.array([np.nan, 1.0, -0.0, 0.0, np.inf, -np.inf, 2.5, np.nan,
                    -7.25, 1e30, -1e-30, 0.5, 3.0, np.nan, -1.0, 100.0], np.float32)
OTHER = np.array([1.0, np.nan, 0.0, -0.0, 2.0, np.nan, -np.inf, np.nan,
                  -7.0, -1e30, 0.0, 0.5, np.inf, 2.0, -2.0, 50.0], np.float32)


@dsl.kernel(threads=1)
def lane_math(x: In[f32], y: In[f32], out: Out[f32, 2]):
    v = x.vload(0, 16)
    w = y.vload(0, 16)
    out.vstore(0 * 16, min(v, w))
    out.vstore(1 * 16, max(v, w))
    out.vstore(2 * 16, min(v, w, 0.75))
    out.vstore(3 * 16, dsl.clamp(v, w, 2.0))
    out.vstore(4 * 16, abs(v))
    out.vstore(5 * 16, dsl.exp(v))
    out.vstore(6 * 16, dsl.log(v))
    out.vstore(7 * 16, dsl.sqrt(v))
    out.vstore(8 * 16, dsl.rsqrt(v))
    out.vstore(9 * 16, dsl.tanh(v))
    out.vstore(10 * 16, dsl.erf(v))
    out.vstore(11 * 16, dsl.sin(v))
    out.vstore(12 * 16, dsl.cos(v))
    out.vstore(13 * 16, dsl.floor(v))
    out.vstore(14 * 16, dsl.ceil(v))
    out.vstore(15 * 16, dsl.fma(v, w, 1.0))
    out.vstore(16 * 16, dsl.where(v < w, v, w))


def scalar_reference(x, y):
    """The same rows computed one lane at a time by the scalar runtime builtins."""
    rows = [
        lambda a, b: B.min_(a, b), lambda a, b: B.max_(a, b), lambda a, b: B.min_(a, b, 0.75),
        lambda a, b: B.clamp(a, b, 2.0), lambda a, b: B.abs_(a), lambda a, b: B.exp(a), lambda a, b: B.log_(a),
        lambda a, b: B.sqrt(a), lambda a, b: B.rsqrt(a), lambda a, b: B.tanh(a), lambda a, b: B.erf(a),
        lambda a, b: B.sin(a), lambda a, b: B.cos(a), lambda a, b: B.floor(a), lambda a, b: B.ceil(a),
        lambda a, b: B.fma(a, b, 1.0), lambda a, b: B.where(a < b, a, b),
    ]
    out = np.zeros((len(rows), 16), np.float32)
    with np.errstate(all="ignore"):
        for r, fn in enumerate(rows):
            for k in range(16):
                value = fn(x[k], y[k])
                assert type(value) is np.float32, (r, type(value))
                out[r, k] = value
    return out


def test_lane_builtins_match_the_scalar_runtime_bit_for_bit():
    out = np.zeros((17, 16), np.float32)
    run(lane_math, SPECIAL, OTHER, out)
    ref = scalar_reference(SPECIAL, OTHER)
    np.testing.assert_array_equal(out.view(np.int32), ref.view(np.int32))  # NaN and -0.0 included


def test_min_max_nan_follow_python():
    """min(a, b) keeps a unless b < a: a NaN first argument wins, a NaN second argument loses."""
    out = np.zeros((17, 16), np.float32)
    run(lane_math, SPECIAL, OTHER, out)
    assert np.isnan(out[0, 0]) and out[0, 1] == 1.0 and np.isnan(out[1, 0]) and out[1, 1] == 1.0


@np.errstate(divide="ignore")
def test_float_builtins_on_int_lanes_are_f64():
    for v in (np.arange(4, dtype=np.int8).view(B.Lanes), np.arange(4, dtype=np.int64).view(B.Lanes)):
        for fn in (B.exp, B.log_, B.sqrt, B.rsqrt, B.tanh, B.erf, B.sin, B.cos, B.floor, B.ceil):
            r = fn(v)
            assert isinstance(r, B.Lanes) and r.dtype == np.float64, (fn, r.dtype)
    assert B.exp(np.int8(1)).dtype == np.float64  # the scalar face agrees (numpy alone gives f16)
    assert B.floor(np.float32(np.inf)) == np.inf and np.isnan(B.ceil(np.nan))  # math.floor would raise
    assert type(B.floor(2.5)) is float and type(B.ceil(np.int32(2))) is np.float64


def test_int_lanes_saturate():
    v = np.array([np.nan, 1e30, -1e30, -2.7, 2.7, np.inf, -np.inf, 0.0], np.float32).view(B.Lanes)
    expect = [0, 2**63 - 1, -2**63, -2, 2, 2**63 - 1, -2**63, 0]
    assert B.int_(v).tolist() == expect
    assert B.saturated_lanes(v, T.i8).tolist() == [0, 127, -128, -2, 2, 127, -128, 0]
    assert B.saturated_lanes(v, T.u32).tolist() == [0, 2**32 - 1, 0, 0, 2, 2**32 - 1, 0, 0]
    assert B.saturated_lanes(v, T.u64).tolist() == [0, 2**64 - 1, 0, 0, 2, 2**64 - 1, 0, 0]


@dsl.kernel(threads=1)
def store_float_lanes(x: In[f32], out: Out[i32]):
    out.vstore(0, x.vload(0, 8))


def test_float_lanes_stored_to_int_tensor_saturate():
    x = np.array([np.nan, 1e30, -1e30, -2.7, 2.7, np.inf, -np.inf, 5.0], np.float32)
    out = np.full(8, 9, np.int32)
    run(store_float_lanes, x, out)
    assert out.tolist() == [0, 2**31 - 1, -2**31, -2, 2, 2**31 - 1, -2**31, 5]


# ---------------------------------------------------------------- values, not views

@dsl.kernel(threads=1)
def values_not_views(x: InOut[f32], out: Out[f32]):
    v = x.vload(0, 4)
    x.vstore(0, v + 10.0)         # a later store does not reach the loaded value
    w = v
    w += 1.0                      # nor does an update of another local holding it
    acc = dsl.local((2,), dsl.simd(f32, 4))
    acc[0] = v
    u = acc[0]
    acc[0] += 100.0               # nor an update of the array it was read from
    n = dsl.splat(0, 4)
    n += v                        # i64 lanes joined with f32 lanes: the local is f64 lanes
    out.vstore(0, v)
    out.vstore(4, w)
    out.vstore(8, u)
    out.vstore(12, acc[0])
    out.vstore(16, n)


def test_simd_values_are_values():
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(20, np.float32)
    seen, types = checked_and_run(values_not_views, x.copy(), out)
    np.testing.assert_array_equal(out.reshape(5, 4), [x, x + 1, x, x + 100, x])
    assert types["n"] == T.SimdType(T.f64, 4)
    assert_typed(seen["n"], types["n"])


# ---------------------------------------------------------------- f16 / bf16 lanes

@dsl.kernel(threads=1)
def half_lanes(x: In[f16], y: Out[f16], z: Out[dsl.bf16], wide: Out[f32]):
    v = x.vload(0, 8)
    wide.vstore(0, v)
    y.vstore(0, v * 3.0)
    z.vstore(0, v / 3.0)


def test_f16_bf16_lanes_load_as_f32_and_store_rounded():
    x = np.array([1.0, 0.1, 65504.0, -3.3, 1e-5, 2.0, 1 / 3, 7.0], np.float16)
    y, wide = np.zeros(8, np.float16), np.zeros(8, np.float32)
    z = np.zeros(8, ml_dtypes.bfloat16)
    seen, types = checked_and_run(half_lanes, x, y, z, wide)
    assert types["v"] == T.SimdType(T.f32, 8)
    assert_typed(seen["v"], types["v"])
    np.testing.assert_array_equal(wide, x.astype(np.float32))
    with np.errstate(over="ignore"):  # 65504 * 3 rounds to inf
        np.testing.assert_array_equal(y, (x.astype(np.float32) * np.float32(3)).astype(np.float16))
    np.testing.assert_array_equal(z, (x.astype(np.float32) / np.float32(3)).astype(ml_dtypes.bfloat16))


# ---------------------------------------------------------------- bounds checks

@dsl.kernel(threads=2)
def lanes_at(x: In[f32], out: Out[f32], at: i32, store_at: i32):
    if dsl.thread_id() == 1:
        out.vstore(store_at, x.vload(at, 4))


def test_vload_and_vstore_are_bounds_checked():
    x, out = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
    run(lanes_at, x, out, 6, 0)
    np.testing.assert_array_equal(out[:4], x[6:])
    with pytest.raises(dsl.LaunchError, match=r"(?s)thread 1 at .*test_interpreter_simd.py:\d+\n.*x\.vload.*\n"
                                              r"IndexError: x\.vload\(7, 4\): elements 7\.\.10 out of bounds for "
                                              r"tensor 'x' of shape \(10,\) \(10 elements\); accepted: 0 <= i <= 6"):
        run(lanes_at, x, out, 7, 0)
    with pytest.raises(dsl.LaunchError, match=r"x\.vload\(-1, 4\): elements -1\.\.2 out of bounds"):
        run(lanes_at, x, out, -1, 0)
    with pytest.raises(dsl.LaunchError, match=r"out\.vstore\(8, 4\): elements 8\.\.11 out of bounds for tensor "
                                              r"'out'"):
        run(lanes_at, x, out, 0, 8)


def test_vstore_refuses_in_tensors():
    t = interpreter.Tensor(np.zeros(8, np.float32), "x", "in", T.f32)
    with pytest.raises(ValueError, match=r"tensor 'x' is In\[f32\]: read-only"):
        t.vstore(0, B.splat(1.0, 4, f32))
    np.testing.assert_array_equal(t.vload(4, 4), np.zeros(4, np.float32))
    with pytest.raises(IndexError, match=r"x\.vload\(6, 4\): .*accepted: 0 <= i <= 4"):
        t.vload(6, 4)
    with pytest.raises(IndexError, match=r"x\.vload\(9223372036854775807, 4\): elements 9223372036854775807\.\."):
        t.vload(np.int64(2**63 - 1), 4)  # i + lanes would wrap in i64
    short = interpreter.Tensor(np.zeros(2, np.float32), "s", "out", T.f32)
    with pytest.raises(IndexError, match=r"accepted: none: it has fewer than 4 elements"):
        short.vstore(0, B.splat(1.0, 4, f32))


@dsl.kernel(threads=1)
def scratch_lanes(x: In[f32], out: Out[f32]):
    buf = dsl.scratch((8,), f32)
    buf.vstore(0, x.vload(0, 8) * 2.0)
    out.vstore(0, buf.vload(0, 8))
    out.vstore(4, buf.vload(5, 4))


def test_scratch_vload_vstore():
    x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with pytest.raises(dsl.LaunchError, match=r"buf\.vload\(5, 4\): elements 5\.\.8 out of bounds for tensor "
                                              r"'buf' of shape \(8,\)"):
        run(scratch_lanes, x, out)
    np.testing.assert_array_equal(out, x * 2)  # the first stores happened


# ---------------------------------------------------------------- dsl.local arrays

@dsl.kernel(threads=1)
def reverse_rows(x: In[f32, 2], out: Out[f32, 2], bad: i32):
    buf = dsl.local((4,), f32)
    for r in range(x.shape[0]):
        for j in range(4):
            buf[3 - j] = x[r, j]
        for j in range(4):
            out[r, j] = buf[j + bad]


def test_local_array_indexed_at_run_time():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros_like(x)
    run(reverse_rows, x, out, 0)
    np.testing.assert_array_equal(out, x[:, ::-1])
    with pytest.raises(dsl.LaunchError, match=r"(?s)buf\[j \+ bad\].*IndexError: index 4 out of bounds for "
                                              r"dsl.local array 'buf' of shape \(4,\)"):
        run(reverse_rows, x, out, 1)


@dsl.kernel(threads=1)
def zeroed_each_time(x: In[f32, 2], out: Out[f32]):
    for r in range(x.shape[0]):
        acc = dsl.local((2, 3), f64)
        for j in range(x.shape[1]):
            acc[j % 2, j % 3] += x[r, j]
        out[r] = acc[1, 2] + acc[0, 0]


def test_local_array_starts_at_zero_each_time_the_statement_runs():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = np.zeros(2, np.float32)
    run(zeroed_each_time, x, out)
    np.testing.assert_array_equal(out, [x[0, 5] + x[0, 0], x[1, 5] + x[1, 0]])


@dsl.kernel(threads=4)
def per_thread(out: Out[f32]):
    mine = dsl.local((1,), f32)
    mine[0] = f32(dsl.thread_id())
    dsl.sync()
    out[dsl.thread_id()] = mine[0]


def test_local_arrays_belong_to_one_thread():
    out = np.zeros(4, np.float32)
    run(per_thread, out)
    np.testing.assert_array_equal(out, [0, 1, 2, 3])


Tv = dsl.TypeVar("Tv")


@dsl.kernel(threads=1)
def local_kinds(x: In[Tv], half: Out[f32], ints: Out[i32], same: Out[Tv]):
    h = dsl.local((2,), f16)                 # held as f32, not rounded to f16
    h[0] = f32(1.0) / f32(3.0)
    half[0] = h[0]
    n = dsl.local((3,), i32)
    n[0] = 2.75                               # stores convert: truncated
    n[1] = -1e20                              # saturated
    n[2] = n[0] + i32(2147483647)             # wraps
    for k in range(3):
        ints[k] = n[k]
    t = dsl.local((2,), Tv)                   # a TypeVar: the checker's binding
    t[1] = x[0]
    same[0] = t[1] + t[0]


def test_local_array_element_types():
    half, ints = np.zeros(1, np.float32), np.zeros(3, np.int32)
    x = np.array([5], np.int8)
    same = np.zeros(1, np.int8)
    run(local_kinds, x, half, ints, same)
    assert half[0] == np.float32(1) / np.float32(3)
    assert ints.tolist() == [2, -2**31, -2**31 + 1]
    assert same[0] == 5


@dsl.kernel(threads=1)
def simd_grid(x: In[f32], out: Out[f32]):
    acc = dsl.local((2, 2), dsl.simd(f32, 4))
    for i in dsl.static_range(2):
        for j in dsl.static_range(2):
            acc[i, j] = x.vload(4 * (2 * i + j), 4)
    acc[1, 0] += 0.5
    acc[0, 1] = 7.0                           # a scalar broadcasts to every lane
    for k in dsl.static_range(4):
        out.vstore(4 * k, acc.flat[k])


def test_array_of_simd_values():
    x = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    seen, types = checked_and_run(simd_grid, x, out)
    ref = x.copy()
    ref[8:12] += 0.5
    ref[4:8] = 7.0
    np.testing.assert_array_equal(out, ref)
    acc = seen["acc"]
    assert acc.shape == (2, 2) and acc.array.shape == (2, 2, 4) and acc.array.dtype == np.float32
    with pytest.raises(IndexError, match=r"index \(2, 0\) out of bounds for dsl.local array 'acc' of shape "
                                         r"\(2, 2\) \(axis 0: 2 not in 0..1\)"):
        acc[2, 0]
    with pytest.raises(IndexError, match=r"index 4 out of bounds for acc.flat: dsl.local array 'acc' has shape "
                                         r"\(2, 2\) \(4 elements\)"):
        acc.flat[4]
