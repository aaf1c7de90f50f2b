"""dsl.dot4, the int8 dot product, and the small-integer SIMD values int8 kernels use, on every
backend against numpy (docs/language.md, "Integer dot products"): signs, the i16 saturation
corner that vpmaddubsw would hit, i32 wrap-around, every lowering this CPU can run."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, i32, u8
from tests.dsl.kernel_errors import assert_compile_error

RNG = np.random.default_rng(29)


@dsl.kernel(threads=2)
def dot4_lanes(acc: In[i32], a: In[i32], b: In[i32], y4: Out[i32], y8: Out[i32], y16: Out[i32], ys: Out[i32]):
    """dsl.dot4 on 4, 8 and 16 lanes and on scalars, over the same data."""
    lo, hi = dsl.split(acc.size // 16)
    for blk in range(lo, hi):
        i = blk * 16
        y16.vstore(i, dsl.dot4(acc.vload(i, 16), a.vload(i, 16), b.vload(i, 16)))
        for h in dsl.static_range(2):
            j = i + 8 * h
            y8.vstore(j, dsl.dot4(acc.vload(j, 8), a.vload(j, 8), b.vload(j, 8)))
        for q in dsl.static_range(4):
            j = i + 4 * q
            y4.vstore(j, dsl.dot4(acc.vload(j, 4), a.vload(j, 4), b.vload(j, 4)))
        for j in range(i, i + 16):
            ys.flat[j] = dsl.dot4(acc.flat[j], a.flat[j], b.flat[j])


def reference(acc, a_bytes, b_bytes):
    """acc + Σ u8·i8 per group of 4 bytes, wrapped to i32."""
    s = acc.astype(np.int64) + (a_bytes.reshape(-1, 4).astype(np.int64) * b_bytes.reshape(-1, 4)).sum(1)
    return ((s + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def corner_data(n=64):
    acc = RNG.integers(-1000, 1000, n).astype(np.int32)
    a = RNG.integers(0, 256, 4 * n).astype(np.uint8)
    b = RNG.integers(-128, 128, 4 * n).astype(np.int8)
    a[:16], b[:16] = 255, -128     # every pair 255·-128·2 = -65280: saturates in vpmaddubsw's i16
    a[16:32], b[16:32] = 255, 127  # 64770 > 32767, the positive side
    a[32:48:2], b[32:48:2] = 0, -128  # zero bytes next to extremes
    a[48:64], b[48:64] = 255, 127
    acc[12:16] = np.iinfo(np.int32).max  # the i32 sum wraps past INT_MAX ...
    acc[16:20] = np.iinfo(np.int32).min  # ... and stays put at INT_MIN + a positive dot
    acc[0:4] = np.iinfo(np.int32).min    # ... and wraps below INT_MIN
    return acc, a, b


def test_dot4_matches_numpy_with_saturation_and_wrap_corners(backend):
    acc, a, b = corner_data()
    outs = [np.zeros_like(acc) for _ in range(4)]
    dot4_lanes(acc, a.view(np.int32), b.view(np.int32), *outs, backend=backend)
    want = reference(acc, a, b)
    assert want[0] > 0 and want[12] < 0  # the corners really wrap
    for got in outs:
        np.testing.assert_array_equal(got, want)


@dsl.kernel(threads=1)
def dot4_literal_acc(a: In[i32], b: In[i32], y: Out[i32]):
    """A literal accumulator broadcasts; u32 operands are the same bits."""
    for i in range(0, a.size, 8):
        y.vstore(i, dsl.dot4(0, a.vload(i, 8), b.vload(i, 8)))


def test_dot4_literal_accumulator(backend):
    _, a, b = corner_data(16)
    y = np.zeros(16, np.int32)
    dot4_literal_acc(a.view(np.int32), b.view(np.int32), y, backend=backend)
    np.testing.assert_array_equal(y, reference(np.zeros(16, np.int32), a, b))


@dsl.kernel(threads=1)
def requantize_u8(x: In[u8], w: In[i32], y: Out[u8], wide: Out[i32]):
    """u8 lanes load, widen to i32, and narrow back with saturation (clamp, then the cast)."""
    for i in range(0, x.size, 16):
        v = dsl.i32(x.vload(i, 16))
        wide.vstore(i, v)
        s = v * w.vload(i, 16) - 300
        y.vstore(i, dsl.u8(dsl.clamp(s, 0, 255)))


def test_u8_lanes_widen_and_narrow_with_saturation(backend):
    x = RNG.integers(0, 256, 32).astype(np.uint8)
    x[:2] = (0, 255)
    w = RNG.integers(-3, 4, 32).astype(np.int32)
    y, wide = np.zeros(32, np.uint8), np.zeros(32, np.int32)
    requantize_u8(x, w, y, wide, backend=backend)
    np.testing.assert_array_equal(wide, x.astype(np.int32))
    np.testing.assert_array_equal(y, np.clip(x.astype(np.int32) * w - 300, 0, 255).astype(np.uint8))


def test_dot4_lowering_choice():
    from backends.numba.simd_codegen import dot4_lowering
    assert dot4_lowering({"avx2", "avx512vnni", "avx512vl"}, 8) == "vnni"
    assert dot4_lowering({"avx2", "avx512vnni"}, 16) == "vnni"
    assert dot4_lowering({"avx2", "avx512vnni"}, 8) == "avx2"  # no VL: 256-bit vpdpbusd needs it
    assert dot4_lowering({"avx2", "avxvnni"}, 8) == "vnni"
    assert dot4_lowering({"avx2", "avxvnni"}, 16) == "avx2"
    assert dot4_lowering({"avx2", "sse2"}, 4) == "avx2"
    assert dot4_lowering({"sse2"}, 8) == "generic"
    assert dot4_lowering(set(), 2) == "generic"


def numba_lowerings(op: str, lowering, lanes: int, acc, a, b):
    """Each lowering of ``backends.numba.simd.<op>`` this CPU can execute ("generic" and the one
    ``lowering(features, lanes)`` picks), called directly on (acc, a, b) ``lanes`` at a time:
    yields (lowering, output, the compiled function, for its assembly)."""
    numba = pytest.importorskip("numba")
    from backends.numba import simd as sm
    product = getattr(sm, op)
    for how in sorted({"generic", lowering(dsl.target("numba").features, lanes)}):
        @numba.njit
        def run(acc, a, b, out, how=how):
            for i in range(0, acc.size, lanes):
                sm.vstore(out, i, product(sm.vload(acc, i, lanes), sm.vload(a, i, lanes), sm.vload(b, i, lanes), how))
        out = np.zeros_like(acc)
        run(acc, a.view(np.int32), b.view(np.int32), out)
        yield how, out, run


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_every_runnable_numba_lowering_is_exact(lanes):
    """Each lowering this CPU can execute, called directly, on the saturation corners."""
    from backends.numba.simd_codegen import dot4_lowering
    acc, a, b = corner_data(lanes * 4)
    want = reference(acc, a, b)
    for how, out, run in numba_lowerings("dot4", dot4_lowering, lanes, acc, a, b):
        np.testing.assert_array_equal(out, want, err_msg=how)
        if how == "avx2" and lanes == 8:  # the exact pair: vpmaddwd, never the saturating vpmaddubsw
            asm = next(iter(run.inspect_asm().values()))
            assert "vpmaddwd" in asm and "vpmaddubsw" not in asm


def test_opencl_source_uses_the_integer_dot_product_builtin_where_the_device_has_it():
    src = dot4_lanes.source("opencl")
    assert "dot_4x8packed_us_int" in src and "cl_khr_integer_dot_product" in src


@pytest.mark.parametrize("args, words", [
    ("acc.vload(0, 8), x.vload(0, 8), x.vload(0, 8)", ["dot4", "f32"]),
    ("acc.vload(0, 8), w.vload(0, 8), acc.vload(0, 8)", ["dot4", "i64", "packed bytes"]),
    ("acc.vload(0, 8), acc.vload(0, 4), acc.vload(0, 4)", ["4 and 8 lanes"]),
])
def test_dot4_errors_name_the_call_and_what_it_takes(args, words, tmp_path):
    src = f'''
import dsl
from dsl import In, Out, f32, i32, i64
@dsl.kernel(threads=1)
def bad(acc: In[i32], x: In[f32], w: In[i64], y: Out[i32]):
    y.vstore(0, dsl.dot4({args}))
'''
    assert_compile_error(tmp_path, "bad_dot4.py", src, 6, words)


@dsl.kernel(threads=1)
def narrow_floats(x: In[dsl.f32], r: Out[dsl.f32], q8: Out[u8], s8: Out[dsl.i8], q32: Out[i32]):
    """Requantization's steps on f32 lanes: rint (half to even), then int() conversions that
    truncate, saturate and map NaN to 0."""
    for i in range(0, x.size, 8):
        v = x.vload(i, 8)
        r.vstore(i, dsl.rint(v))
        q8.vstore(i, dsl.u8(v))
        s8.vstore(i, dsl.i8(v))
        q32.vstore(i, dsl.i32(v))


def test_float_lanes_round_and_narrow_with_saturation(backend):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 254.7, 255.5, 256.0, -0.9, -1.0, -129.0, 127.9, np.nan, np.inf,
                  -np.inf, 3e9], np.float32)
    r, q8, s8, q32 = np.zeros(16, np.float32), np.zeros(16, np.uint8), np.zeros(16, np.int8), np.zeros(16, np.int32)
    narrow_floats(x, r, q8, s8, q32, backend=backend)
    np.testing.assert_array_equal(r, np.rint(x))

    def sat(v, t):
        info = np.iinfo(t)
        return np.array([0 if np.isnan(e) else min(max(np.trunc(e), info.min), info.max) for e in v]).astype(t)
    np.testing.assert_array_equal(q8, sat(x, np.uint8))
    np.testing.assert_array_equal(s8, sat(x, np.int8))
    np.testing.assert_array_equal(q32, sat(x, np.int32))


# ----------------------------------------------------------------------------- dsl.dot4_sat

@dsl.kernel(threads=1)
def dot4_sat_lanes(acc: In[i32], a: In[i32], b: In[i32], y4: Out[i32], y8: Out[i32], y16: Out[i32], ys: Out[i32]):
    """dsl.dot4_sat on 4, 8 and 16 lanes and on scalars, over the same data."""
    for i in range(0, acc.size, 16):
        y16.vstore(i, dsl.dot4_sat(acc.vload(i, 16), a.vload(i, 16), b.vload(i, 16)))
        for h in dsl.static_range(2):
            y8.vstore(i + 8 * h, dsl.dot4_sat(acc.vload(i + 8 * h, 8), a.vload(i + 8 * h, 8), b.vload(i + 8 * h, 8)))
        for q in dsl.static_range(4):
            y4.vstore(i + 4 * q, dsl.dot4_sat(acc.vload(i + 4 * q, 4), a.vload(i + 4 * q, 4), b.vload(i + 4 * q, 4)))
        for j in range(i, i + 16):
            ys.flat[j] = dsl.dot4_sat(acc.flat[j], a.flat[j], b.flat[j])


def sat_reference(acc, a_bytes, b_bytes):
    """acc + Σ over the two pairs of a lane of clip(u8·i8 + u8·i8, i16), wrapped to i32."""
    prods = (a_bytes.astype(np.int64) * b_bytes).reshape(-1, 2, 2).sum(2)
    s = acc.astype(np.int64) + np.clip(prods, -32768, 32767).sum(1)
    return ((s + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def test_dot4_sat_saturates_each_pair_in_i16_on_every_backend(backend):
    acc, a, b = corner_data()
    outs = [np.zeros_like(acc) for _ in range(4)]
    dot4_sat_lanes(acc, a.view(np.int32), b.view(np.int32), *outs, backend=backend)
    want = sat_reference(acc, a, b)
    assert (want != reference(acc, a, b)).sum() >= 8  # the corners really saturate
    assert want[12] < 0  # and the i32 sum still wraps
    for got in outs:
        np.testing.assert_array_equal(got, want)


def test_dot4_sat_equals_dot4_when_each_pairs_signed_parts_stay_within_128():
    """The bound the int8 kernels check before they use it: |positive| and |negative| parts of a
    pair of b ≤ 128 keep 255·128 = 32640 inside i16, for any u8 a; 129 does not."""
    a = np.full(64, 255, np.uint8)
    acc = np.zeros(16, np.int32)
    for p, q in ((64, 64), (-64, -64), (127, 1), (-128, 0), (100, 28), (-100, -28), (127, -128)):
        b = np.tile(np.array([p, q, q, p], np.int8), 16)  # both orders in each lane
        np.testing.assert_array_equal(dsl.dot4_sat(acc, a.view(np.int32), b.view(np.int32)),
                                      reference(acc, a, b))
    b = np.tile(np.array([127, 2, -128, -1], np.int8), 16)
    assert not np.array_equal(dsl.dot4_sat(acc, a.view(np.int32), b.view(np.int32)), reference(acc, a, b))


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_every_runnable_numba_dot4_sat_lowering_matches(lanes):
    from backends.numba.simd_codegen import dot4_sat_lowering
    acc, a, b = corner_data(lanes * 4)
    want = sat_reference(acc, a, b)
    for how, out, run in numba_lowerings("dot4_sat", dot4_sat_lowering, lanes, acc, a, b):
        np.testing.assert_array_equal(out, want, err_msg=how)
        if how == "maddubs" and lanes == 8:
            asm = next(iter(run.inspect_asm().values()))
            assert "vpmaddubsw" in asm and "vpmaddwd" in asm


def test_dot4_sat_lowering_choice():
    from backends.numba.simd_codegen import dot4_sat_lowering
    assert dot4_sat_lowering({"avx2", "ssse3"}, 8) == "maddubs"
    assert dot4_sat_lowering({"avx2", "ssse3"}, 16) == "maddubs256"
    assert dot4_sat_lowering({"avx512bw", "avx2"}, 16) == "maddubs"
    assert dot4_sat_lowering({"ssse3"}, 4) == "maddubs"
    assert dot4_sat_lowering({"sse2"}, 8) == "generic"


# ----------------------------------------------------------------------------- dsl.dot2_i16

@dsl.kernel(threads=1)
def dot2_i16_lanes(acc: In[i32], a: In[i32], b: In[i32], y8: Out[i32], y16: Out[i32], ys: Out[i32]):
    """dsl.dot2_i16 on 8 and 16 lanes and on scalars, over the same data."""
    for i in range(0, acc.size, 16):
        y16.vstore(i, dsl.dot2_i16(acc.vload(i, 16), a.vload(i, 16), b.vload(i, 16)))
        for h in dsl.static_range(2):
            y8.vstore(i + 8 * h, dsl.dot2_i16(acc.vload(i + 8 * h, 8), a.vload(i + 8 * h, 8), b.vload(i + 8 * h, 8)))
        for j in range(i, i + 16):
            ys.flat[j] = dsl.dot2_i16(acc.flat[j], a.flat[j], b.flat[j])


def i16_reference(acc, a_halves, b_halves):
    """acc + Σ i16·i16 per pair of halves, wrapped to i32."""
    s = acc.astype(np.int64) + (a_halves.astype(np.int64) * b_halves).reshape(-1, 2).sum(1)
    return ((s + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def i16_corner_data(n=32):
    rng = np.random.default_rng(1629)  # its own: the corners below must not depend on test order
    acc = rng.integers(-1000, 1000, n).astype(np.int32)
    a = rng.integers(-32768, 32768, 2 * n).astype(np.int16)
    b = rng.integers(-32768, 32768, 2 * n).astype(np.int16)
    a[:8], b[:8] = -32768, -32768  # each lane's pair sums to 2**31: vpmaddwd's one wrap
    acc[:4] = 5                    # ... which, plus a positive acc, wraps to a negative i32
    a[8:16], b[8:16] = 255, -128   # the int8 kernels' range: u8 activations, i8 weights
    a[16:24], b[16:24] = 32767, -32768
    acc[8:12] = np.iinfo(np.int32).max  # the i32 sum wraps past INT_MAX
    return acc, a, b


def test_dot2_i16_multiplies_signed_halves_and_wraps_on_every_backend(backend):
    acc, a, b = i16_corner_data()
    outs = [np.zeros_like(acc) for _ in range(3)]
    dot2_i16_lanes(acc, a.view(np.int32), b.view(np.int32), *outs, backend=backend)
    want = i16_reference(acc, a, b)
    assert want[0] < 0  # 2**31 + acc wraps
    for got in outs:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_every_runnable_numba_dot2_i16_lowering_matches(lanes):
    from backends.numba.simd_codegen import dot2_i16_lowering
    acc, a, b = i16_corner_data(lanes * 4)
    want = i16_reference(acc, a, b)
    for how, out, _ in numba_lowerings("dot2_i16", dot2_i16_lowering, lanes, acc, a, b):
        np.testing.assert_array_equal(out, want, err_msg=how)


def test_dot2_i16_lowering_choice():
    from backends.numba.simd_codegen import dot2_i16_lowering
    assert dot2_i16_lowering({"avx2"}, 8) == "pmaddwd"
    assert dot2_i16_lowering({"avx2"}, 16) == "pmaddwd256"
    assert dot2_i16_lowering({"avx2", "avx512bw"}, 16) == "pmaddwd"
    assert dot2_i16_lowering({"sse2"}, 4) == "pmaddwd"
    assert dot2_i16_lowering(set(), 8) == "generic"
