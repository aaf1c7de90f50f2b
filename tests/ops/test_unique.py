"""Unique on every backend against np.unique: flattened and along an axis, sorted and by first
occurrence, all four outputs, NaN, bool and 16-bit floats, graph use and errors."""
import numpy as np
import pytest

import dsl
from ops.unique import Unique


def reference(x, axis=None, sort=True):
    """np.unique's four outputs, renumbered by first occurrence when not sorted."""
    y, idx, inv, cnt = np.unique(x, axis=axis, return_index=True, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    if not sort:
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis)
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
    return y, idx, inv, cnt


def check(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("sort", [1, 0])
def test_flattened(backend, sort):
    x = np.array([[2, 1, 1], [3, 4, 3], [-5, 2, 1]], np.int32)
    check(Unique(x, sorted=sort, backend=backend), reference(x, sort=bool(sort)))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_along_axis(backend, axis):
    x = np.array([[[1, 0], [1, 0], [2, 3]], [[1, 0], [1, 0], [0, 3]]], np.float32)
    for sort in (1, 0):
        check(Unique(x, axis=axis, sorted=sort, backend=backend), reference(x, axis % 3, bool(sort)))


def test_dtypes_and_nan(backend):
    f = np.array([1.5, np.nan, -2, 1.5, np.nan, 0], np.float32)
    y, idx, inv, cnt = Unique(f, backend=backend)
    np.testing.assert_array_equal(y, [-2, 0, 1.5, np.nan])  # NaN last, all NaNs one group (numpy)
    np.testing.assert_array_equal(idx, [2, 5, 0, 1])
    np.testing.assert_array_equal(inv, [2, 3, 0, 2, 3, 1])
    np.testing.assert_array_equal(cnt, [1, 1, 2, 2])
    b = np.array([True, False, True], bool)
    check(Unique(b, backend=backend), reference(b))
    h = np.array([3, 1, 3, 2], np.float16)
    check(Unique(h, sorted=0, backend=backend), reference(h, sort=False))


def test_graph_and_empty(backend):
    g = dsl.Graph("u")
    x = g.input("x", (None,), dsl.i64)
    y, idx, inv, cnt = Unique(x, sorted=0)
    g.output(y, "y")
    g.output(cnt, "counts")
    g.output(inv, "inverse")
    m = g.compile(backend=backend)
    v = np.array([7, 7, 1, 7, 1, 9], np.int64)
    out = m.run({"x": v})
    np.testing.assert_array_equal(out["y"], [7, 1, 9])
    np.testing.assert_array_equal(out["counts"], [3, 2, 1])
    np.testing.assert_array_equal(out["inverse"], [0, 0, 1, 0, 1, 2])
    out = m.run({"x": np.zeros(0, np.int64)})
    assert out["y"].shape == (0,) and out["inverse"].shape == (0,)


def test_larger_random_input(backend):
    x = np.random.default_rng(3).integers(0, 40, size=(300,)).astype(np.int64)
    check(Unique(x, backend=backend), reference(x))


def test_errors():
    with pytest.raises(dsl.VerifyError, match="Unique axis 2 is out of range for rank 2; accepted: -2..1"):
        Unique(np.zeros((2, 2), np.float32), axis=2)
    with pytest.raises(dsl.VerifyError, match="Unique sorted must be 0 or 1, got 2"):
        Unique(np.zeros(2, np.float32), sorted=2)
