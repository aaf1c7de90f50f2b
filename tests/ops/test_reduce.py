"""Reduce*, ArgMax/ArgMin and CumSum on every backend against numpy: axes patterns, keepdims,
negative axes, dtypes, empty sets, graph use and errors."""
import numpy as np
import pytest

import dsl
import ops
from ops.reduce import ReduceMaxV1, ReduceSumV1, ReduceMeanV1

RNG = np.random.default_rng(3)


def lse(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True)
    r = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return r if keepdims else np.squeeze(r, axis=axis)


REDUCE = [
    (ops.ReduceSum, np.sum),
    (ops.ReduceMean, np.mean),
    (ops.ReduceMax, np.max),
    (ops.ReduceMin, np.min),
    (ops.ReduceProd, np.prod),
    (ops.ReduceL1, lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims)),
    (ops.ReduceL2, lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))),
    (ops.ReduceLogSum, lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims))),
    (ops.ReduceLogSumExp, lse),
    (ops.ReduceSumSquare, lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims)),
]
AXES = [None, (1,), (-1,), (0, 2), (1, 3), (0, 3), (3, 1), (0, 1, 2, 3)]


def axes_input(axes):
    return None if axes is None else np.array(axes, np.int64)


@pytest.mark.parametrize("axes", AXES, ids=str)
def test_reduce_ops_axes_and_keepdims(backend, axes):
    x = RNG.uniform(0.2, 1.5, (2, 3, 4, 5)).astype(np.float32)
    np_axes = None if axes is None else tuple(axes)
    for op, ref in REDUCE:
        for keepdims in (0, 1):
            want = ref(x.astype(np.float64), axis=np_axes, keepdims=bool(keepdims))
            got = op(x, axes_input(axes), keepdims=keepdims, backend=backend)
            assert got.shape == np.shape(want) and got.dtype == np.float32, (op.op_type, keepdims)
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=f"{op.op_type} {axes} {keepdims}")


def test_reduce_attribute_axes_opsets(backend):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(ReduceSumV1(x, axes=(0, -1), backend=backend), x.sum((0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(ReduceMeanV1(x, keepdims=0, backend=backend), x.mean(), rtol=1e-5)
    np.testing.assert_array_equal(ReduceMaxV1(x, axes=(1,), keepdims=0, backend=backend), x.max(1))


def test_reduce_many_separate_runs(backend):
    """Alternating kept/reduced axes: three reduced runs; and five kept runs (a loop in run())."""
    x = RNG.standard_normal((2, 3, 2, 3, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(ops.ReduceSum(x, np.array([1, 3, 5]), backend=backend),
                               x.sum((1, 3, 5), keepdims=True), rtol=1e-5, atol=1e-6)
    x = RNG.standard_normal((2, 2, 3, 2, 3, 2, 3, 2, 2)).astype(np.float32)
    np.testing.assert_array_equal(ops.ReduceMax(x, np.array([1, 3, 5, 7]), keepdims=0, backend=backend),
                                  x.max((1, 3, 5, 7)))


@pytest.mark.parametrize("shape,axes", [((6, 40), None), ((2, 48, 3), (0, 1)), ((3, 2, 16), (0, 2)), ((17,), None)],
                         ids=str)
def test_reduce_split_in_two_launches(backend, monkeypatch, shape, axes):
    """Few outputs over many elements: partial results, then their reduction (forced small here)."""
    import ops.reduce
    monkeypatch.setattr(ops.reduce, "SPLIT_MIN", 16)
    x = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    for op, ref in REDUCE:
        want = ref(x.astype(np.float64), axis=axes, keepdims=True)
        np.testing.assert_allclose(op(x, axes_input(axes), backend=backend), want, rtol=2e-5, err_msg=op.op_type)
    xi = RNG.integers(-9, 9, shape).astype(np.int64)
    for op, ref in ((ops.ReduceSum, np.sum), (ops.ReduceMax, np.max), (ops.ReduceSumSquare, lambda a, axis,
                    keepdims: np.sum(a * a, axis=axis, keepdims=keepdims))):
        np.testing.assert_array_equal(op(xi, axes_input(axes), backend=backend), ref(xi, axis=axes, keepdims=True))
    np.testing.assert_array_equal(ops.ReduceMean(xi, axes_input(axes), backend=backend),
                                  np.mean(xi, axis=axes, keepdims=True, dtype=np.int64))


def test_reduce_integer_and_narrow_dtypes(backend):
    xi = RNG.integers(-50, 50, (3, 4, 5)).astype(np.int64)
    np.testing.assert_array_equal(ops.ReduceSum(xi, np.array([1]), backend=backend), xi.sum(1, keepdims=True))
    np.testing.assert_array_equal(ops.ReduceMax(xi, np.array([0, 2]), backend=backend), xi.max((0, 2), keepdims=True))
    xl = RNG.integers(-3, 4, (4, 6)).astype(np.int64)
    np.testing.assert_array_equal(ops.ReduceProd(xl, np.array([1]), keepdims=0, backend=backend), xl.prod(1))
    # integer mean truncates toward zero, as numpy's mean(dtype=int)
    np.testing.assert_array_equal(ops.ReduceMean(xl, np.array([1]), keepdims=0, backend=backend),
                                  np.mean(xl, axis=1, dtype=np.int64))
    u8 = RNG.integers(0, 255, (4, 7)).astype(np.uint8)
    np.testing.assert_array_equal(ops.ReduceMin(u8, np.array([1]), backend=backend), u8.min(1, keepdims=True))
    b = RNG.random((3, 5)) > 0.5
    np.testing.assert_array_equal(ops.ReduceMax(b, np.array([1]), backend=backend), b.max(1, keepdims=True))
    np.testing.assert_array_equal(ops.ReduceMin(b, np.array([1]), backend=backend), b.min(1, keepdims=True))
    # f16 accumulates in f32: 4096 ones sum exactly (f16 alone would stop at 2048)
    ones = np.ones((2, 4096), np.float16)
    y = ops.ReduceSum(ones, np.array([1]), keepdims=0, backend=backend)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y.astype(np.float32), [4096, 4096])
    xd = RNG.standard_normal((5, 6))
    np.testing.assert_allclose(ops.ReduceL2(xd, np.array([0]), backend=backend),
                               np.sqrt((xd * xd).sum(0, keepdims=True)), rtol=1e-12)


def test_reduce_nan_and_empty_sets(backend):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]], np.float32)
    assert np.isnan(ops.ReduceMax(x, np.array([1]), backend=backend)[0, 0])
    assert np.isnan(ops.ReduceMin(x, np.array([1]), backend=backend)[0, 0])
    assert ops.ReduceMin(x, np.array([1]), backend=backend)[1, 0] == -np.inf
    empty = np.zeros((2, 0, 3), np.float32)
    expect = {ops.ReduceSum: 0, ops.ReduceProd: 1, ops.ReduceMax: -np.inf, ops.ReduceMin: np.inf,
              ops.ReduceL1: 0, ops.ReduceL2: 0, ops.ReduceSumSquare: 0, ops.ReduceLogSum: -np.inf,
              ops.ReduceLogSumExp: -np.inf}
    for op, v in expect.items():
        y = op(empty, np.array([1]), backend=backend)
        assert y.shape == (2, 1, 3)
        np.testing.assert_array_equal(y, np.full((2, 1, 3), v, np.float32), err_msg=op.op_type)
    assert np.isnan(ops.ReduceMean(empty, np.array([1]), backend=backend)).all()  # 0 / 0
    assert ops.ReduceMax(np.zeros((0, 2), np.int64), np.array([0]), backend=backend).tolist() == [[-2**63] * 2]
    nob = np.zeros((0, 2), bool)
    assert ops.ReduceMin(nob, np.array([0]), backend=backend).tolist() == [[True, True]]
    assert ops.ReduceMax(nob, np.array([0]), backend=backend).tolist() == [[False, False]]


def test_reduce_empty_axes(backend):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    none = np.zeros((0,), np.int64)
    np.testing.assert_allclose(ops.ReduceSum(x, none, backend=backend), x.sum(keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(ops.ReduceSum(x, none, noop_with_empty_axes=1, backend=backend), x)
    np.testing.assert_array_equal(ops.ReduceL1(x, noop_with_empty_axes=1, backend=backend), np.abs(x))


def test_reduce_in_graph(backend):
    g = dsl.Graph("r")
    xi = g.input("x", (None, 4, 5), dsl.f32)
    m = ops.ReduceMean(xi, np.array([-1], np.int64), keepdims=0)
    assert m.spec.shape == (None, 4)
    g.output(ops.ReduceLogSumExp(m, np.array([1], np.int64)), "y")
    ai = g.input("axes", (1,), dsl.i64)  # axes known only at run time
    g.output(ops.ReduceSum(xi, ai, keepdims=0), "s")
    model = g.compile(backend=backend)
    x = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    for axes in ([1], [2]):
        out = model.run({"x": x, "axes": np.array(axes, np.int64)})
        np.testing.assert_allclose(out["y"], lse(x.mean(-1), 1, True), rtol=1e-5)
        np.testing.assert_allclose(out["s"], x.sum(axes[0]), rtol=1e-5, atol=1e-6)


def test_reduce_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(dsl.VerifyError, match=r"ReduceSum axes: axis 2 is out of range for input of rank 2"):
        ops.ReduceSum(x, np.array([2]))
    with pytest.raises(dsl.VerifyError, match=r"axis -3 is out of range for input of rank 2"):
        ReduceSumV1(x, axes=(-3,))
    with pytest.raises(dsl.VerifyError, match="more than once"):
        ops.ReduceMax(x, np.array([1, -1]))
    with pytest.raises(dsl.VerifyError, match="ReduceSum input has dtype i8"):
        ops.ReduceSum(x.astype(np.int8))
    with pytest.raises(dsl.VerifyError, match="ArgMax axis: axis 5 is out of range for input of rank 2"):
        ops.ArgMax(x, axis=5)
    with pytest.raises(dsl.VerifyError, match="CumSum axis input must be a scalar"):
        ops.CumSum(x, np.array([0.5], np.float32))


# --------------------------------------------------------------------------- ArgMax / ArgMin

def test_argmax_argmin(backend):
    x = RNG.integers(0, 4, (3, 5, 4)).astype(np.float32)  # many ties
    for axis in (0, 1, -1):
        for keepdims in (0, 1):
            for op, ref in ((ops.ArgMax, np.argmax), (ops.ArgMin, np.argmin)):
                want = ref(x, axis=axis)
                want = np.expand_dims(want, axis) if keepdims else want
                got = op(x, axis=axis, keepdims=keepdims, backend=backend)
                assert got.dtype == np.int64
                np.testing.assert_array_equal(got, want)
                # select_last_index: the first index of the reversed axis, counted from the end
                last = x.shape[axis] - 1 - ref(np.flip(x, axis), axis=axis)
                last = np.expand_dims(last, axis) if keepdims else last
                np.testing.assert_array_equal(op(x, axis=axis, keepdims=keepdims, select_last_index=1,
                                                 backend=backend), last)
    xi = RNG.integers(-100, 100, (6, 7)).astype(np.int32)
    np.testing.assert_array_equal(ops.ArgMin(xi, axis=1, keepdims=0, backend=backend), xi.argmin(1))
    nan = np.array([[1, np.nan, 5, np.nan]], np.float32)
    assert ops.ArgMax(nan, axis=1, backend=backend).item() == 1
    assert ops.ArgMin(nan, axis=1, select_last_index=1, backend=backend).item() == 3


# --------------------------------------------------------------------------- CumSum

def test_cumsum(backend):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    for axis in (0, 1, -1):
        a = axis % 3
        for exclusive in (0, 1):
            for reverse in (0, 1):
                xr = np.flip(x, a) if reverse else x
                want = np.cumsum(xr, a)
                if exclusive:
                    want = want - xr
                want = np.flip(want, a) if reverse else want
                got = ops.CumSum(x, np.array(axis, np.int64), exclusive=exclusive, reverse=reverse, backend=backend)
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cumprod(backend):
    x = RNG.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    for exclusive in (0, 1):
        for reverse in (0, 1):
            xr = np.flip(x, 1) if reverse else x
            want = np.cumprod(xr, 1)
            if exclusive:
                want = np.concatenate([np.ones((3, 1)), want[:, :-1]], axis=1)
            want = np.flip(want, 1) if reverse else want
            got = ops.CumProd(x, np.array(1, np.int64), exclusive=exclusive, reverse=reverse, backend=backend)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    xi = RNG.integers(-9, 9, (10,)).astype(np.int32)
    np.testing.assert_array_equal(ops.CumSum(xi, np.array([0], np.int32), backend=backend), np.cumsum(xi))
    h = np.ones(3000, np.float16)
    np.testing.assert_array_equal(ops.CumSum(h, np.array(0), backend=backend)[-1], np.float16(3000))
