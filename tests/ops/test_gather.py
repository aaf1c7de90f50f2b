"""Indexing ops (ops/gather.py) on every backend against numpy: Gather, GatherElements,
GatherND, ScatterElements, ScatterND, OneHot, TopK, NonZero; graphs, folding, errors."""
import ml_dtypes
import numpy as np
import pytest

import dsl
import ops
from dsl.lang.types import from_numpy
from ops.gather import TopK1

RNG = np.random.default_rng(3)


def graph_run(build, arrays, backend):
    """``build(*graph inputs)`` -> output tensor(s), compiled and run on ``arrays``."""
    g = dsl.Graph("t")
    ins = [g.input(f"in{i}", a.shape, from_numpy(a.dtype)) for i, a in enumerate(arrays)]
    outs = build(*ins)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for k, t in enumerate(outs):
        g.output(t, f"y{k}")
    res = g.compile(backend=backend).run({f"in{i}": a for i, a in enumerate(arrays)})
    return tuple(res[f"y{k}"] for k in range(len(outs)))


def test_gather_axes_dtypes_negative(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    idx = np.array([[0, -1], [2, 1]], np.int64)
    for axis in (0, 1, 2, -1):
        n = x.shape[axis]
        use = idx if n > 2 else np.array([[0, -1], [1, 0]], np.int64)
        want = np.take(x, use % n, axis=axis)
        np.testing.assert_array_equal(ops.Gather(x, use, axis=axis, backend=backend), want)
    for dt in (np.bool_, ml_dtypes.bfloat16):
        xd = (RNG.integers(0, 2, (5, 3)) if dt is np.bool_ else RNG.integers(-9, 9, (5, 3))).astype(dt)
        i32 = np.array([4, -5, 2], np.int32)
        np.testing.assert_array_equal(ops.Gather(xd, i32, backend=backend), xd[i32])
    s = ops.Gather(x, np.array(1, np.int64), axis=1, backend=backend)  # scalar index drops the axis
    np.testing.assert_array_equal(s, x[:, 1])


def test_gather_out_of_range_names_op_input_and_range(backend):
    x = np.zeros((3, 2), np.float32)
    with pytest.raises(IndexError, match=r"Gather input 'indices' has index 3 out of range; valid: \[-3, 2\]"):
        ops.Gather(x, np.array([0, 3], np.int64), backend=backend)
    with pytest.raises(IndexError, match=r"GatherElements input 'indices' has index -4"):
        ops.GatherElements(x, np.array([[-4, 0]], np.int64), backend=backend)
    with pytest.raises(IndexError, match="ScatterND input 'indices'"):
        ops.ScatterND(x, np.array([[5]], np.int64), np.zeros((1, 2), np.float32), backend=backend)
    with pytest.raises(dsl.VerifyError, match=r"Gather axis 2 is out of range for rank 2"):
        ops.Gather(x, np.array([0], np.int64), axis=2, backend=backend)
    with pytest.raises(dsl.VerifyError, match="Gather input 'indices' has dtype f32"):
        ops.Gather(x, np.array([0.0], np.float32), backend=backend)


def test_gather_elements_and_scatter_elements(backend):
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    idx = RNG.integers(-4, 4, (2, 3, 2)).astype(np.int64)
    want = np.take_along_axis(x[:2, :, :], idx % 4, axis=1)
    np.testing.assert_array_equal(ops.GatherElements(x, idx, axis=1, backend=backend), want)
    upd = RNG.standard_normal(idx.shape).astype(np.float32)
    for red in ("none", "add", "mul", "max", "min"):
        ref = x.copy()
        for p in np.ndindex(idx.shape):  # ONNX's sequential loop
            q = (p[0], idx[p] % 4, p[2])
            ref[q] = {"none": lambda a, b: b, "add": np.add, "mul": np.multiply,
                      "max": np.maximum, "min": np.minimum}[red](ref[q], upd[p])
        got = ops.ScatterElements(x, idx, upd, axis=1, reduction=red, backend=backend)
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_gather_nd_batch_dims_and_scatter_nd(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    idx = np.array([[[1, 2]], [[0, -1]]], np.int64)  # batch_dims=1: (2, 1, 2)
    got = ops.GatherND(x, idx, batch_dims=1, backend=backend)
    np.testing.assert_array_equal(got, np.stack([x[0, 1, 2], x[1, 0, 3]]).reshape(2, 1))
    got = ops.GatherND(x, np.array([[1], [0]], np.int64), backend=backend)
    np.testing.assert_array_equal(got, x[[1, 0]])
    ind = np.array([[0, 1], [1, 2], [0, 1]], np.int32)  # a duplicate: applied in order
    upd = RNG.standard_normal((3, 4)).astype(np.float32)
    ref = x.copy()
    ref[0, 1] = upd[2]
    ref[1, 2] = upd[1]
    np.testing.assert_array_equal(ops.ScatterND(x, ind, upd, backend=backend), ref)
    ref = x.copy()
    for u in range(3):
        ref[tuple(ind[u])] += upd[u]
    np.testing.assert_allclose(ops.ScatterND(x, ind, upd, reduction="add", backend=backend), ref, rtol=1e-6)


def test_scatter_reduction_by_opset():
    with pytest.raises(dsl.VerifyError, match="reduction 'max' is not accepted at opsets 16-17"):
        from ops.scatter import ScatterND16
        ScatterND16(np.zeros(3, np.float32), np.zeros((1, 1), np.int64), np.zeros(1, np.float32),
                    reduction="max", backend="numba")


def test_onehot(backend):
    idx = np.array([[0, 2], [-1, 5]], np.int64)
    vals = np.array([2, 7], np.float32)
    for axis in (-1, 0, 1):
        got = ops.OneHot(idx, np.array(3, np.int64), vals, axis=axis, backend=backend)
        norm = np.where(idx < 0, idx + 3, idx)
        hot = (norm[..., None] == np.arange(3)).astype(np.float32)  # out of range: all off
        ref = np.moveaxis(np.where(hot > 0, 7, 2).astype(np.float32), -1, axis)
        np.testing.assert_array_equal(got, ref)


def test_topk_ties_lower_index_first(backend):
    x = np.array([[3, 1, 3, 2, 5, 5, 0, 3]], np.float32)
    v, i = ops.TopK(x, np.array([5], np.int64), backend=backend)
    np.testing.assert_array_equal(i, [[4, 5, 0, 2, 7]])
    np.testing.assert_array_equal(v, [[5, 5, 3, 3, 3]])
    v, i = ops.TopK(x, np.array([3], np.int64), largest=0, backend=backend)
    np.testing.assert_array_equal(i, [[6, 1, 3]])
    xs = RNG.integers(0, 6, (3, 7, 2)).astype(np.int32)
    v, i = ops.TopK(xs, np.array([4], np.int64), axis=1, backend=backend)
    order = np.lexsort((np.broadcast_to(np.arange(7)[None, :, None], xs.shape), -xs), axis=1)[:, :4]
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, np.take_along_axis(xs, order, axis=1))


def test_topk_k_as_graph_input_and_error(backend):
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    v, i = graph_run(lambda a, k: ops.TopK(a, k), [x, np.array([3], np.int64)], backend)
    np.testing.assert_array_equal(i, np.argsort(-x, axis=1, kind="stable")[:, :3])
    with pytest.raises(dsl.VerifyError, match="TopK k=7 is out of range"):
        ops.TopK(x, np.array([7], np.int64), backend=backend)
    v1, i1 = TopK1(x, k=2, axis=0, backend=backend)  # opsets 1-9: k is an attribute
    np.testing.assert_array_equal(i1, np.argsort(-x, axis=0, kind="stable")[:2])
    hot, = graph_run(lambda a, d, v: ops.OneHot(a, d, v), [np.array([1, 0], np.int64), np.array(4, np.int64),
                                                          np.array([0, 1], np.int32)], backend)
    np.testing.assert_array_equal(hot, np.eye(4, dtype=np.int32)[[1, 0]])  # depth known at run time


def test_nonzero_eager_graph_and_chain(backend):
    x = np.array([[0, 1.5, 0], [2, 0, -3]], np.float32)
    np.testing.assert_array_equal(ops.NonZero(x, backend=backend), np.array(np.nonzero(x)))
    b = RNG.integers(0, 2, (4, 5, 3)).astype(np.bool_)
    np.testing.assert_array_equal(ops.NonZero(b, backend=backend), np.array(np.nonzero(b)))
    y, = graph_run(lambda a: ops.Transpose(ops.NonZero(a)), [x], backend)
    np.testing.assert_array_equal(y, np.array(np.nonzero(x)).T)
    empty = ops.NonZero(np.zeros((2, 2), np.float32), backend=backend)
    assert empty.shape == (2, 0) and empty.dtype == np.int64


def test_gather_folds_constants_and_runs_in_graph(backend):
    g = dsl.Graph("fold")
    xi = g.input("x", (2, 3), dsl.f32)
    shape = g.constant("shape", np.array([2, 3, 4], np.int64))
    pick = ops.Gather(shape, np.array([1], np.int64))
    g.output(ops.Reshape(xi, ops.Gather(shape, np.array([0, 1], np.int64))), "y")
    g.output(pick, "n")
    model = g.compile(backend=backend)
    assert model.stats["folded"] == 2
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    out = model.run({"x": x})
    np.testing.assert_array_equal(out["y"], x)
    np.testing.assert_array_equal(out["n"], [3])
    gi, = graph_run(lambda a, i: ops.Gather(a, i, axis=1), [x, np.array([2, 0], np.int64)], backend)
    np.testing.assert_array_equal(gi, x[:, [2, 0]])


def test_compress(backend):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    cond = np.array([True, False, True, True])
    np.testing.assert_array_equal(ops.Compress(x, cond, axis=0, backend=backend), np.compress(cond, x, axis=0))
    cond = np.array([False, True, False, False, True])               # shorter than the axis
    np.testing.assert_array_equal(ops.Compress(x, cond, axis=-1, backend=backend), np.compress(cond, x, axis=1))
    flat = np.zeros(24, bool)
    flat[[3, 7, 20]] = True
    np.testing.assert_array_equal(ops.Compress(x, flat, backend=backend), x.reshape(-1)[[3, 7, 20]])
