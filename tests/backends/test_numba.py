"""numba backend specifics: both launch variants, region splitting at sync(), atomics,
16-bit floats, integer wrap-around, log formatting, concurrent launches, generated source.

Generic kernel-language behaviour is tested on every backend in tests/dsl/.  Here each
team test runs the serial variant (small launches) and the parallel one (prange over
threads or tiles), forced through the ``variant`` fixture.
"""
import threading

import ml_dtypes
import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, bf16, f16, f32, f64, i8, i16, i32, i64, u8, u32

nb = pytest.importorskip("backends.numba.backend")


@pytest.fixture(params=["serial", "parallel"])
def variant(request, monkeypatch):
    """Force every launch in the test onto one variant of the compiled module."""
    if request.param == "parallel":
        monkeypatch.setattr(nb, "SERIAL_MAX_ELEMENTS", 0)
        monkeypatch.setattr(nb, "SERIAL_MAX_THREADS", 0)
    else:
        monkeypatch.setattr(nb, "SERIAL_MAX_ELEMENTS", 1 << 62)
        monkeypatch.setattr(nb, "SERIAL_MAX_THREADS", 1 << 62)
        monkeypatch.setattr(nb.entry_choice, "MIN_SAVING_S", float("inf"))  # no launch weighed heavy enough
    return request.param


# ----------------------------------------------------------------------------- sync semantics

def _neighbour(threads):
    @dsl.kernel(threads=threads)
    def neighbour(out: Out[i64]):
        buf = dsl.scratch((8,), i64)
        t = dsl.thread_id()
        buf[t] = (t + 1) * 100
        dsl.sync()
        out[t] = buf[(t + 1) % dsl.num_threads()]
    return neighbour


NEIGHBOUR = {t: _neighbour(t) for t in (1, 2, 3, 4, 8)}


@pytest.mark.parametrize("threads", [1, 2, 3, 4, 8])
def test_thread_reads_neighbours_write_after_barrier(variant, threads):
    if variant == "parallel" and threads in (2, 4):
        pytest.skip("covered by 1, 3 and 8 (keeps compile time down)")
    out = np.zeros(threads, np.int64)
    NEIGHBOUR[threads](out, backend="numba")
    np.testing.assert_array_equal(out, [((t + 1) % threads + 1) * 100 for t in range(threads)])


def _tree(threads):
    @dsl.kernel(threads=threads)
    def tree(x: In[f64, 2], out: Out[f64]):
        part = dsl.scratch((8,), f64)
        t = dsl.thread_id()
        row = dsl.tile_id()
        acc = f64(0)
        lo, hi = dsl.split(x.shape[1])
        for j in range(lo, hi):
            acc += x[row, j]
        part[t] = acc
        dsl.sync()
        stride = 1
        while stride < dsl.num_threads():   # barrier inside a team-uniform while loop
            if t % (2 * stride) == 0 and t + stride < dsl.num_threads():
                part[t] += part[t + stride]
            dsl.sync()
            stride *= 2
        if t == 0:
            out[row] = part[0]
    return tree


TREE = {t: _tree(t) for t in (1, 3, 4, 8)}


@pytest.mark.parametrize("threads", [1, 3, 4, 8])
@pytest.mark.parametrize("rows", [1, 5])
def test_tree_reduction_in_scratch(variant, threads, rows):
    if variant == "parallel" and threads == 1:
        pytest.skip("one thread: nothing runs in parallel")
    x = np.random.default_rng(threads).standard_normal((rows, 301))
    out = np.zeros(rows)
    TREE[threads](x, out, grid=rows, backend="numba")  # grid > 1: teams in a prange
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-10)


@dsl.kernel(threads=4)
def rounds(out: Out[i64, 2], hist: Out[i64, 2], n: i64, stop_at: i64, gain: i64):
    buf = dsl.scratch((4,), i64)
    t = dsl.thread_id()
    acc = t + 1                  # a per-thread local carried across every barrier
    last = -1
    gain = gain * 2              # an assigned scalar parameter, read in later regions
    for r in range(n):           # team-uniform loop containing barriers
        last = r
        buf[t] = acc
        dsl.sync()
        if r == stop_at:         # uniform break between two barriers
            break
        if r % 2 == 1:           # uniform continue: skips the rest of this round
            continue
        acc = acc + gain * buf[(t + 1) % 4]
        hist[r, t] = acc
        dsl.sync()
    out[t, 0] = acc
    out[t, 1] = last
    if n > 1:                    # uniform if containing a barrier
        buf[t] = acc * 10
        dsl.sync()
        out[t, 2] = buf[(t + 3) % 4]
    else:
        out[t, 2] = -7


def _rounds_reference(n, stop_at, gain):
    gain *= 2
    acc = [t + 1 for t in range(4)]
    last = [-1] * 4
    hist = np.zeros((max(n, 1), 4), np.int64)
    for r in range(n):
        last = [r] * 4
        buf = list(acc)
        if r == stop_at:
            break
        if r % 2 == 1:
            continue
        acc = [acc[t] + gain * buf[(t + 1) % 4] for t in range(4)]
        hist[r] = acc
    out = np.zeros((4, 3), np.int64)
    out[:, 0] = acc
    out[:, 1] = last
    out[:, 2] = [acc[(t + 3) % 4] * 10 for t in range(4)] if n > 1 else -7
    return out, hist


@pytest.mark.parametrize("n,stop_at", [(6, -1), (6, 3), (1, -1), (0, -1)])
def test_break_continue_and_locals_across_barriers(variant, n, stop_at):
    out = np.zeros((4, 3), np.int64)
    hist = np.zeros((max(n, 1), 4), np.int64)
    rounds(out, hist, n, stop_at, 3, backend="numba")
    ref_out, ref_hist = _rounds_reference(n, stop_at, 3)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(hist, ref_hist)


@dsl.kernel(threads=4)
def early(x: In[f32], y: InOut[f32], skip: i64):
    part = dsl.scratch((4,), f32)
    t = dsl.thread_id()
    if skip > 0:                 # uniform: the whole team leaves before any barrier
        return
    part[t] = x[t] * 2
    dsl.sync()
    for k in range(4):
        if k > t:                # a thread leaves from inside a loop, after the last barrier
            return
        y[t] += part[k]
    y[t] = -y[t]


@pytest.mark.parametrize("skip", [0, 1])
def test_return_ends_threads_and_teams(variant, skip):
    x = np.arange(1, 5, dtype=np.float32)
    y = np.ones(4, np.float32)
    early(x, y, skip, backend="numba")
    if skip:
        np.testing.assert_array_equal(y, np.ones(4))
    else:
        part = x * 2
        ref = [1 + part[:t + 1].sum() for t in range(4)]
        ref[3] = -ref[3]  # the only thread that finishes its loop
        np.testing.assert_array_equal(y, ref)


# ----------------------------------------------------------------------------- functions

@dsl.func
def steps(v):
    n = 0
    while v != 1:
        if v % 2 == 0:
            v = v // 2
        else:
            v = 3 * v + 1
        n += 1
        if n > 1000:
            return -1
    return n


@dsl.func
def score(a, b):
    return a * a + steps(b)   # a func calling a func


@dsl.kernel
def use_funcs(x: In[f32], y: Out[f32], z: Out[i64]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = score(x.flat[i], i + 1)
        z.flat[i] = steps(i + 1)


def _collatz(v):
    n = 0
    while v != 1:
        v = v // 2 if v % 2 == 0 else 3 * v + 1
        n += 1
    return n


def test_device_functions_nested_and_early_return(variant):
    x = np.linspace(-2, 2, 50).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros(50, np.int64)
    use_funcs(x, y, z, backend="numba")
    steps_ref = np.array([_collatz(i + 1) for i in range(50)])
    np.testing.assert_array_equal(z, steps_ref)
    np.testing.assert_allclose(y, x * x + steps_ref.astype(np.float32), rtol=1e-6)


# ----------------------------------------------------------------------------- atomics

@dsl.kernel(threads=4, grid=3)
def atomics(x: In[i32], ci: InOut[i32], cl: InOut[i64], cu: InOut[u32], cf: InOut[f32], cd: InOut[f64]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        b = v % 8
        dsl.atomic_add(ci, b, 1)
        dsl.atomic_add(cl, b, i64(v))
        dsl.atomic_add(cu, b, u32(2))
        dsl.atomic_add(cf, b, f32(0.5))
        dsl.atomic_add(cd, b, f64(v) * 0.25)


def test_atomic_add_every_dtype_across_threads_and_tiles(variant):
    x = np.random.default_rng(0).integers(0, 1000, 40000).astype(np.int32)
    bins = x % 8
    outs = [np.zeros(8, dt) for dt in (np.int32, np.int64, np.uint32, np.float32, np.float64)]
    atomics(x, *outs, backend="numba")
    count = np.bincount(bins, minlength=8) * 3   # every tile adds every element
    sums = np.bincount(bins, weights=x, minlength=8) * 3
    np.testing.assert_array_equal(outs[0], count)
    np.testing.assert_array_equal(outs[1], sums.astype(np.int64))
    np.testing.assert_array_equal(outs[2], count * 2)
    np.testing.assert_array_equal(outs[3], count * 0.5)      # exact: multiples of 0.5 below 2**24
    np.testing.assert_array_equal(outs[4], sums * 0.25)


# ----------------------------------------------------------------------------- f16 / bf16

def test_half_conversions_are_exact_for_every_bit_pattern():
    from numba import njit
    from backends.numba import runtime as rt

    @njit
    def roundtrip(bits, values, h_out, b_out, fh, fb):
        for i in range(bits.size):
            fh[i] = rt.f16_to_f32(bits[i])
            fb[i] = rt.bf16_to_f32(bits[i])
        for i in range(values.size):
            h_out[i] = rt.f32_to_f16(values[i])
            b_out[i] = rt.f32_to_bf16(values[i])

    bits = np.arange(1 << 16, dtype=np.uint16)
    rng = np.random.default_rng(1)
    values = np.concatenate([
        rng.integers(0, 1 << 32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        bits.view(np.float16).astype(np.float32),
        np.array([65504, 65519.996, 65520, 1e-8, 2.9802322e-08, 5.9604645e-08, -0.0], np.float32)])
    values = values[~np.isnan(values)]
    h, b = np.empty(values.size, np.uint16), np.empty(values.size, np.uint16)
    fh, fb = np.empty(bits.size, np.float32), np.empty(bits.size, np.float32)
    roundtrip(bits, values, h, b, fh, fb)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(h, values.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(b, values.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(fh, bits.view(np.float16).astype(np.float32))
    np.testing.assert_array_equal(fb, bits.view(ml_dtypes.bfloat16).astype(np.float32))


def test_half_atomic_add_is_a_real_compare_and_swap_loop():
    from numba import njit, prange
    from backends.numba import runtime as rt

    @njit(parallel=True)
    def hammer(h, b, n):
        for k in prange(n):
            rt.atomic_add_f16(h, k % 2, np.float32(1.0))
            rt.atomic_add_bf16(b, k % 2, np.float32(1.0))

    h, b = np.zeros(2, np.float16), np.zeros(2, ml_dtypes.bfloat16)
    hammer(h.view(np.uint16), b.view(np.uint16), 512)
    np.testing.assert_array_equal(h, [256, 256])   # exact in both formats: no lost update
    np.testing.assert_array_equal(b.astype(np.float32), [256, 256])


@dsl.kernel
def halves(a: In[f16], b: InOut[bf16], y: Out[f32], r: Out[f16], s: f16):
    lo, hi = dsl.split(a.size)
    for i in range(lo, hi):
        v = a.flat[i] * s
        y.flat[i] = v
        b.flat[i] = b.flat[i] + v
        r.flat[i] = dsl.sqrt(v)


def test_f16_bf16_tensors_and_scalars(variant):
    a = np.array([0.1, -2.5, 65504, 6e-8, np.inf, -np.inf, np.nan, 3.0] * 3, np.float16)
    b = np.linspace(-4, 4, a.size).astype(ml_dtypes.bfloat16)
    b0 = b.copy()
    y, r = np.zeros(a.size, np.float32), np.zeros(a.size, np.float16)
    s = np.float16(1.5)
    with np.errstate(invalid="ignore", over="ignore"):
        halves(a, b, y, r, s, backend="numba")
        ref = a.astype(np.float32) * np.float32(s)
        np.testing.assert_array_equal(y, ref)
        np.testing.assert_array_equal(b.astype(np.float32),
                                      (b0.astype(np.float32) + ref).astype(ml_dtypes.bfloat16).astype(np.float32))
        np.testing.assert_array_equal(r, np.sqrt(ref).astype(np.float16))


# ----------------------------------------------------------------------------- integer semantics

@dsl.kernel(threads=2)
def ints(a: In[i8], b: In[u8], f: In[f32], o8: Out[i8], ou: Out[u8], o16: Out[i16], oc: Out[i8],
         ofl: Out[i32], ocu: Out[u8]):
    lo, hi = dsl.split(a.size)
    for i in range(lo, hi):
        o8[i] = a[i] * a[i] + 100           # i8 arithmetic wraps like numpy
        ou[i] = b[i] - 200 + (b[i] >> 1)    # u8 wraps
        o16[i] = i16(a[i]) << 9
        oc[i] = i8(f[i])                    # truncate toward zero, saturate at the i8 range
        ocu[i] = u8(i32(f[i]))
        ofl[i] = i32(a[i]) // 3 * 100 + i32(a[i]) % 7 + (-i32(b[i])) // 4


def test_narrow_integers_wrap_like_numpy(variant):
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, 64).astype(np.int8)
    b = rng.integers(0, 256, 64).astype(np.uint8)
    f = (rng.standard_normal(64) * 500).astype(np.float32)
    outs = [np.zeros(64, dt) for dt in (np.int8, np.uint8, np.int16, np.int8, np.int32, np.uint8)]
    ints(a, b, f, *outs, backend="numba")
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(outs[0], a * a + np.int8(100))
        np.testing.assert_array_equal(outs[1], b - np.uint8(200) + (b >> 1))
    np.testing.assert_array_equal(outs[2], a.astype(np.int16) << 9)
    np.testing.assert_array_equal(outs[3], np.clip(np.trunc(f), -128, 127).astype(np.int8))
    a32, b32 = a.astype(np.int32), b.astype(np.int32)
    np.testing.assert_array_equal(outs[4], a32 // 3 * 100 + a32 % 7 + (-b32) // 4)
    np.testing.assert_array_equal(outs[5], np.trunc(f).astype(np.int32).astype(np.uint8))


# ----------------------------------------------------------------------------- logging

@dsl.kernel(threads=2, grid=2, log_level="debug")
def chatty(x: In[f32], n: i64, big: f64):
    t = dsl.thread_id()
    v = x[t]
    dsl.log.info("t=%d v=%f g=%g s=%s h=%x H=%#X o=%o", t, v, v, v, n + t, n, n)
    dsl.log.warn("[%8.3f|%-8.2e|%+g|%05d|%-5d|%5s|%.2s] %%", v, big, big, t - 1, t, t, v)
    dsl.log.debug("f64 %s %s %g %e i8 %s bool %s", big, big * 1e20, big * 1e-7, big, i8(t - 3), v > 0)


@dsl.kernel(threads=1, grid=2)
def printer(x: In[f32], n: i64):
    v = x[dsl.tile_id()]
    print("plain", v, dsl.tile_id(), n > 0, f64(v) / 3)


def test_log_and_print_format_like_python(capfd):
    x = np.array([0.1, -2.75], np.float32)
    for kernel, args in ((chatty, (x, 255, 1234.5678)), (printer, (x, 3))):
        kernel(*args, backend="interpreter")
        expected = sorted(capfd.readouterr().out.splitlines())
        kernel(*args, backend="numba")
        got = sorted(capfd.readouterr().out.splitlines())
        assert got == expected
    assert "plain -2.75 1 True -0.9166666666666666" in got
    chatty(x, 255, 1234.5678, backend="numba")
    lines = capfd.readouterr().out.splitlines()
    assert len(lines) == 12 and "[chatty t=1 tile=1] t=1 v=-2.750000 g=-2.75 s=-2.75 h=100 H=0XFF o=377" in lines


def test_float_str_is_numpys_shortest_repr():
    from numba import njit
    from backends.numba import format as F

    @njit
    def reprs(vals, single, buf, ends):
        p = 0
        for k in range(vals.size):
            p = F.put_repr32(buf, p, vals[k]) if single else F.put_repr64(buf, p, vals[k])
            ends[k] = p
        return p

    def texts(vals, single):
        buf, ends = np.zeros(64 * vals.size, np.uint8), np.zeros(vals.size, np.int64)
        reprs(vals, single, buf, ends)
        starts = np.concatenate([[0], ends[:-1]])
        return [bytes(buf[a:b]).decode() for a, b in zip(starts, ends)]

    rng = np.random.default_rng(4)
    vals = np.concatenate([rng.standard_normal(300) * 10.0 ** rng.integers(-30, 30, 300),
                           [0.0, -0.0, 1e16, 1e15, 0.1, 1e-4, 1e-5, np.inf, -np.inf, np.nan, 5e-324, 1e6, 999999.0]])
    assert texts(vals, False) == [str(np.float64(v)) for v in vals]
    with np.errstate(over="ignore"):
        v32 = vals.astype(np.float32)
    assert texts(v32.astype(np.float64), True) == [str(v) for v in v32]


# ----------------------------------------------------------------------------- concurrency

@dsl.kernel(threads=4)
def scale_sum(x: In[f32], y: Out[f32], total: Out[f64], a: f32):
    part = dsl.scratch((4,), f64)
    t = dsl.thread_id()
    lo, hi = dsl.split(x.size)
    acc = f64(0)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * a
        acc += x.flat[i]
    part[t] = acc
    dsl.sync()
    if t == 0:
        total[0] = part[0] + part[1] + part[2] + part[3]


def test_concurrent_parallel_launches_from_python_threads(variant):
    xs = [np.random.default_rng(k).standard_normal(5000 + k).astype(np.float32) for k in range(4)]
    ys = [np.zeros_like(x) for x in xs]
    totals = [np.zeros(1) for _ in xs]
    scale_sum(xs[0], ys[0], totals[0], 1.0, backend="numba")  # compile once, before the race
    errors = []
    barrier = threading.Barrier(4)

    def work(k):
        try:
            barrier.wait()
            for _ in range(20):
                scale_sum(xs[k], ys[k], totals[k], float(k + 1), backend="numba")
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for k in range(4):
        np.testing.assert_array_equal(ys[k], xs[k] * np.float32(k + 1))
        np.testing.assert_allclose(totals[k][0], xs[k].astype(np.float64).sum(), rtol=1e-10)


# ----------------------------------------------------------------------------- generated source

@dsl.kernel
def leaky_relu(x: In[f32], y: Out[f32], alpha: f32 = 0.01):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = v if v > 0 else alpha * v


def test_generated_source_is_readable_python():
    x = np.zeros(4, np.float32)
    src = leaky_relu.source("numba", x, x)
    compile(src, "<numba source>", "exec")
    assert "def thread(_tid, _tile, _ntiles, x, x_size, y, alpha, _intr, _intr0):" in src  # + Ctrl-C counter
    assert "# py:" in src and "y.flat[i] = v if v > 0 else alpha * v" in src
    assert "prange(" in src and "parallel=True" in src
    team = rounds.source("numba", np.zeros((4, 3), np.int64), np.zeros((1, 4), np.int64), 1, 1, 1)
    assert "def region_0(" in team and "def team_serial(" in team and "def launch_team(" in team
    assert "_st_acc" in team  # the local crossing barriers lives in a per-thread array


def test_both_variants_agree_on_large_inputs():
    x = np.random.default_rng(7).standard_normal((300, 257)).astype(np.float32)
    y = np.zeros_like(x)
    leaky_relu(x, y, alpha=0.2, backend="numba")     # big enough for the parallel entry
    np.testing.assert_array_equal(y, np.where(x > 0, x, np.float32(0.2) * x))
    small = x[:3].copy()
    ys = np.zeros_like(small)
    leaky_relu(small, ys, alpha=0.2, backend="numba")  # the serial entry
    np.testing.assert_array_equal(ys, y[:3])


NARROWED = dsl.TypeVar("NARROWED")


@dsl.kernel(threads=1)
def store_f32_lanes(x: In[f32, 1], out: Out[NARROWED, 1]):
    out.vstore(0, x.vload(0, 8))
    out.vstore(8, x.vload(8, 8))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.uint8, np.int8, np.int16])
def test_float_lanes_narrow_as_the_interpreter_does(dtype):
    """f32 lanes stored to integer tensors (converted through i32 lanes, u32 through i64): truncated,
    saturated at the range, NaN -> 0, at the edges of each type."""
    x = np.array([np.nan, 1e30, -1e30, -2.7, 2.7, np.inf, -np.inf, 5.0, 2.0 ** 31, -2.0 ** 31, 255.9, 256.0,
                  -0.5, -1.0, 127.5, -128.9], np.float32)
    want, got = np.zeros(16, dtype), np.zeros(16, dtype)
    store_f32_lanes(x, want, backend="interpreter")
    store_f32_lanes(x, got, backend="numba")
    np.testing.assert_array_equal(got, want)
