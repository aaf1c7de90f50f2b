"""Div, Mod, BitShift, Pow and the variadic Max/Min/Sum/Mean on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(11)


def graph_run(op_fn, arrays, backend, **params):
    """The same op call in a compiled graph (every array a graph input)."""
    g = dsl.Graph("t")
    ins = [g.input(f"in{i}", a.shape, dsl.lang.types.from_numpy(a.dtype)) for i, a in enumerate(arrays)]
    g.output(op_fn(*ins, **params), "y")
    return g.compile(backend=backend).run({f"in{i}": a for i, a in enumerate(arrays)})["y"]


def trunc_div(a, b):
    """C integer division (toward zero), 0 for b == 0."""
    q = np.zeros(np.broadcast_shapes(a.shape, b.shape), a.dtype)
    aa, bb = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
    nz = bb != 0
    q[nz] = (np.abs(aa[nz]) // np.abs(bb[nz]) * np.sign(aa[nz]) * np.sign(bb[nz])).astype(a.dtype)
    return q


def test_div_floats_and_truncating_ints(backend):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = (RNG.standard_normal((4,)) + 3).astype(np.float32)
    np.testing.assert_array_equal(ops.Div(a, b, backend=backend), a / b)
    ai = np.array([[-7, 7, -7, 7, 0, 5, -2**31, -2**31]], np.int32)
    bi = np.array([2, -2, -2, 2, 3, 0, -1, 0], np.int32)
    with np.errstate(all="ignore"):
        ref = trunc_div(ai, bi)
        ref[0, 6] = -2**31  # INT_MIN / -1 wraps
    y = ops.Div(ai, bi, backend=backend)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, ref)  # x / 0 is 0, no crash
    f = np.array([1.0, -1.0, 0.0], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ops.Div(f, np.float32(0), backend=backend), f / np.float32(0))


def test_mod_integer_and_float_modes(backend):
    a = np.array([-7, 7, -7, 7, 0, 5, 9], np.int32)
    b = np.array([2, -2, -2, 2, 3, 0, 4], np.int32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ops.Mod(a, b, backend=backend), np.mod(a, b))
        np.testing.assert_array_equal(ops.Mod(a, b, fmod=1, backend=backend), np.fmod(a, b))
    x = np.array([-7.5, 7.5, -7.5, 7.5, 1.0, np.inf, 3.0, 2.5e-8], np.float32)
    y = np.array([2, -2, -2, 2, 0, 2, np.inf, 3.0], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ops.ModV10(x, y, fmod=1, backend=backend), np.fmod(x, y))
        np.testing.assert_array_equal(ops.Mod(x, y, fmod=0, backend=backend), np.mod(x, y))


def test_bitshift_unsigned_and_signed(backend):
    u = np.array([1, 2, 255, 128, 7], np.uint8)
    n = np.array([1, 7, 8, 1, 0], np.uint8)
    left, right = (ops.BitShiftV11(u, n, direction=d, backend=backend) for d in ("LEFT", "RIGHT"))
    np.testing.assert_array_equal(left, np.array([2, 0, 0, 0, 7], np.uint8))
    np.testing.assert_array_equal(right, np.array([0, 0, 0, 64, 7], np.uint8))
    s = np.array([-5, 5, -128, 64, -1], np.int8)
    k = np.array([1, 1, 9, 1, -1], np.int8)  # 9 >= bits and -1 < 0: sign fill / 0
    right, left = (ops.BitShift(s, k, direction=d, backend=backend) for d in ("RIGHT", "LEFT"))
    np.testing.assert_array_equal(right, np.array([-3, 2, -1, 32, -1], np.int8))
    np.testing.assert_array_equal(left, np.array([-10, 10, 0, -128, 0], np.int8))


def test_pow_mixed_dtypes(backend):
    a = np.abs(RNG.standard_normal((3, 4))).astype(np.float32) + 0.5
    b = RNG.standard_normal((4,)).astype(np.float32)
    np.testing.assert_allclose(ops.Pow(a, b, backend=backend), np.power(a, b), rtol=1e-6)
    ai = np.array([2, 3, 4, -2], np.int32)
    y = ops.Pow(ai, np.array([2.0, 0.5, 3.0, 3.0], np.float32), backend=backend)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.array([4, 1, 64, -8], np.int32))
    y = ops.Pow(np.array([2.0, 3.0, 0.5], np.float32), np.array([3, -1, 2], np.int64), backend=backend)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [8.0, 1 / 3, 0.25], rtol=1e-7)


def test_max_min_variadic_broadcast_nan(backend):
    a = RNG.standard_normal((2, 1, 4)).astype(np.float32)
    a[0, 0, 1] = np.nan
    b = RNG.standard_normal((3, 1)).astype(np.float32)
    c = np.float32(0.25)
    np.testing.assert_array_equal(ops.Max(a, b, c, backend=backend), np.maximum(np.maximum(a, b), c))
    np.testing.assert_array_equal(ops.Min(a, b, c, backend=backend), np.minimum(np.minimum(a, b), c))
    np.testing.assert_array_equal(ops.Max(a, backend=backend), a)
    i = RNG.integers(-100, 100, (5,)).astype(np.int32)
    j = RNG.integers(-100, 100, (2, 5)).astype(np.int32)
    np.testing.assert_array_equal(ops.Max(i, j, backend=backend), np.maximum(i, j))


def test_sum_mean(backend):
    xs = [RNG.standard_normal(s).astype(np.float32) for s in ((3, 4), (4,), (1, 4))]
    np.testing.assert_allclose(ops.Sum(*xs, backend=backend), xs[0] + xs[1] + xs[2], rtol=1e-6)
    np.testing.assert_allclose(ops.Mean(*xs, backend=backend), (xs[0] + xs[1] + xs[2]) / 3, rtol=1e-6)
    np.testing.assert_array_equal(ops.Mean(xs[0], backend=backend), xs[0])
    np.testing.assert_array_equal(ops.Sum(xs[0], backend=backend), xs[0])
    h = [x.astype(np.float16) for x in xs[:2]]
    np.testing.assert_array_equal(ops.Mean(*h, backend=backend), (h[0] + h[1]) / np.float16(2))


def test_graph_matches_eager(backend):
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = (RNG.standard_normal((3,)) + 4).astype(np.float32)
    np.testing.assert_array_equal(graph_run(ops.Div, [a, b], backend), a / b)
    np.testing.assert_array_equal(graph_run(ops.Max, [a, b, a], backend), np.maximum(a, b))


@pytest.mark.parametrize("call,message", [
    (lambda: ops.Mod(np.ones(2, np.int32), np.ones(2, np.int32), fmod=2), "fmod is 2; accepted: 0 or 1"),
    (lambda: ops.ModV10(np.ones(2, np.float32), np.ones(2, np.float32)), "needs fmod=1 before opset 28"),
    (lambda: ops.BitShift(np.ones(2, np.uint8), np.ones(2, np.uint8), direction="UP"), "direction is 'UP'"),
    (lambda: ops.BitShiftV11(np.ones(2, np.int32), np.ones(2, np.int32), direction="LEFT"), "input has dtype i32"),
    (lambda: ops.Div(np.ones(2, np.int32), np.ones(2, np.float32)), "need one dtype"),
    (lambda: ops.Sum(np.ones(2, np.int32)), "Sum input has dtype i32"),
    (lambda: ops.Max(np.ones(2, np.float32), np.ones(3, np.float32)), "do not broadcast"),
    (lambda: ops.Pow(np.ones(2, np.float32), np.ones(2, bool)), "exponent has dtype bool"),
])
def test_bad_inputs(call, message):
    with pytest.raises(VerifyError, match=message):
        call()


def test_variadic_needs_an_input():
    with pytest.raises((VerifyError, TypeError), match="at least one input"):
        ops.Min()()


def test_opset6_legacy_broadcast_and_same_shapes(backend):
    """Before opset 7 b broadcasts onto a only with broadcast=1, aligned at axis; Max/Min/
    Sum/Mean before opset 8 take inputs of one shape."""
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((3,)).astype(np.float32)
    np.testing.assert_array_equal(ops.DivV6(a, b, broadcast=1, axis=1, backend=backend), a / b[:, None])
    np.testing.assert_array_equal(ops.DivV6(a, a + 5, backend=backend), a / (a + 5))
    np.testing.assert_allclose(ops.PowV1(np.abs(a), np.float32(2), broadcast=1, backend=backend), a * a, rtol=1e-6)
    np.testing.assert_array_equal(ops.MaxV6(a, -a, backend=backend), np.maximum(a, -a))
    with pytest.raises(VerifyError, match="needs inputs of one shape unless broadcast=1"):
        ops.DivV6(a, b)
    with pytest.raises(VerifyError, match="cannot align b"):
        ops.DivV6(a, b, broadcast=1, axis=3)
    with pytest.raises(VerifyError, match="before opset 8 needs inputs of one shape"):
        ops.SumV6(a, a[0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint32])
def test_bitwise_and_or_xor_not(backend, dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (3, 4), endpoint=True).astype(dtype)
    b = RNG.integers(info.min, info.max, (4,), endpoint=True).astype(dtype)
    np.testing.assert_array_equal(ops.BitwiseAnd(a, b, backend=backend), a & b)
    np.testing.assert_array_equal(ops.BitwiseOr(a, b, backend=backend), a | b)
    np.testing.assert_array_equal(ops.BitwiseXor(a, b, backend=backend), a ^ b)
    np.testing.assert_array_equal(ops.BitwiseNot(a, backend=backend), ~a)
    with pytest.raises(VerifyError, match="accepted"):
        ops.BitwiseAnd(a.astype(np.float32), b.astype(np.float32), backend=backend)
