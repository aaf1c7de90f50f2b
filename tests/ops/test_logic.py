"""Comparisons, logical ops, Not, Where, IsNaN and IsInf on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(5)

COMPARE = [(ops.Equal, np.equal), (ops.Less, np.less), (ops.LessOrEqual, np.less_equal),
           (ops.Greater, np.greater), (ops.GreaterOrEqual, np.greater_equal)]


def test_compare_floats_with_nan_and_broadcast(backend):
    a = np.array([[1.0, np.nan, 3.0, -np.inf, np.inf, 2.0]], np.float32)
    b = np.array([[1.0], [3.0], [np.nan]], np.float32)
    for op, ref in COMPARE:
        y = op(a, b, backend=backend)
        assert y.dtype == np.bool_ and y.shape == (3, 6)
        np.testing.assert_array_equal(y, ref(a, b), err_msg=op.__name__)


@pytest.mark.parametrize("dtype", [np.int8, np.uint64, np.float16])
def test_compare_dtypes(backend, dtype):
    if np.dtype(dtype).kind == "f":
        a, b = RNG.integers(-3, 3, (4, 5)).astype(dtype), RNG.integers(-3, 3, (5,)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        a = RNG.integers(info.min, info.max, (4, 5), endpoint=True, dtype=dtype)
        b = np.concatenate([a[0, :3], RNG.integers(info.min, info.max, 2, endpoint=True, dtype=dtype)])
    for op, ref in COMPARE[:2]:
        np.testing.assert_array_equal(op(a, b, backend=backend), ref(a, b), err_msg=op.__name__)


def test_logical_ops_and_not(backend):
    p = RNG.integers(0, 2, (2, 3, 4)).astype(bool)
    q = RNG.integers(0, 2, (3, 1)).astype(bool)
    np.testing.assert_array_equal(ops.And(p, q, backend=backend), p & q)
    np.testing.assert_array_equal(ops.Or(p, q, backend=backend), p | q)
    np.testing.assert_array_equal(ops.Xor(p, q, backend=backend), p ^ q)
    np.testing.assert_array_equal(ops.Equal(p, q, backend=backend), p == q)
    np.testing.assert_array_equal(ops.Not(p, backend=backend), ~p)


def test_where_three_way_broadcast(backend):
    c = RNG.integers(0, 2, (2, 1, 4)).astype(bool)
    x = RNG.standard_normal((3, 1)).astype(np.float32)
    y = RNG.standard_normal((1, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(ops.Where(c, x, y, backend=backend), np.where(c, x, y))
    xi = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(ops.Where(np.array([True, False, True]), xi, np.int64(-1), backend=backend),
                                  np.where([True, False, True], xi, -1))


def test_isnan_isinf(backend):
    x = np.array([1.0, np.nan, -np.inf, np.inf, 0.0, -3.0], np.float32)
    np.testing.assert_array_equal(ops.IsNaN(x, backend=backend), np.isnan(x))
    np.testing.assert_array_equal(ops.IsInf(x, backend=backend), np.isinf(x))
    np.testing.assert_array_equal(ops.IsInf(x, detect_negative=0, backend=backend), np.isposinf(x))
    np.testing.assert_array_equal(ops.IsInf(x, detect_positive=0, backend=backend), np.isneginf(x))
    h = x.astype(np.float16)
    np.testing.assert_array_equal(ops.IsNaN(h, backend=backend), np.isnan(h))


def test_graph_mask_select(backend):
    """Where(Greater(a, b), a, b) in a graph == max."""
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4,)).astype(np.float32)
    g = dsl.Graph("t")
    ai, bi = g.input("a", a.shape, dsl.f32), g.input("b", b.shape, dsl.f32)
    g.output(ops.Where(ops.Greater(ai, bi), ai, bi), "y")
    y = g.compile(backend=backend).run({"a": a, "b": b})["y"]
    np.testing.assert_array_equal(y, np.maximum(a, b))


@pytest.mark.parametrize("call,message", [
    (lambda: ops.And(np.ones(2, np.int32), np.ones(2, np.int32)), "And input has dtype i32; accepted: bool"),
    (lambda: ops.EqualV7(np.ones(2, np.float32), np.ones(2, np.float32)), "Equal input has dtype f32"),
    (lambda: ops.Less(np.ones(2, np.int32), np.ones(2, np.int64)), "need one dtype"),
    (lambda: ops.Where(np.ones(2, np.int32), np.ones(2), np.ones(2)), "condition has dtype i32"),
    (lambda: ops.Where(np.ones(2, bool), np.ones(2), np.ones(3)), "do not broadcast"),
    (lambda: ops.IsNaN(np.ones(2, np.int32)), "IsNaN input has dtype i32"),
    (lambda: ops.Not(np.ones(2, np.float32)), "Not input has dtype f32"),
])
def test_bad_inputs(call, message):
    with pytest.raises(VerifyError, match=message):
        call()
