"""Reshape, Transpose and Identity on every backend against numpy."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(3)


def shape(*dims):
    return np.array(dims, np.int64)


@pytest.mark.parametrize("target,allowzero,expected", [
    ((4, 0, -1), 0, (4, 3, 2)),    # 0 copies the input dim, -1 is inferred
    ((-1,), 0, (24,)),
    ((0, 0, 4), 0, (2, 3, 4)),
    ((2, -1), 0, (2, 12)),
    ((1, 24, 1), 0, (1, 24, 1)),
])
def test_reshape(backend, target, allowzero, expected):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    y = ops.Reshape(x, shape(*target), allowzero=allowzero, backend=backend)
    assert y.shape == expected
    np.testing.assert_array_equal(y.reshape(-1), x.reshape(-1))


def test_reshape_allowzero_and_empty(backend):
    e = np.zeros((0, 3), np.float32)
    assert ops.Reshape(e, shape(3, 0), allowzero=1, backend=backend).shape == (3, 0)
    assert ops.Reshape(e, shape(0, 3), backend=backend).shape == (0, 3)


def test_reshape_shape_known_only_at_run_time(backend):
    g = dsl.Graph("dyn")
    x = g.input("x", (None, 6), dsl.f32)
    s = g.input("s", (2,), dsl.i64)
    g.output(ops.Relu(ops.Reshape(x, s)), "y")
    model = g.compile(backend=backend)
    xv = RNG.standard_normal((2, 6)).astype(np.float32)
    out = model.run({"x": xv, "s": shape(3, -1)})["y"]
    np.testing.assert_array_equal(out, np.maximum(xv, 0).reshape(3, 4))


@pytest.mark.parametrize("in_shape", [(2, 3, 4), (1, 5, 1, 6), (7,), (3, 1), (2, 3, 2, 3, 2, 3, 2, 2)], ids=str)
def test_transpose(backend, in_shape):
    x = RNG.standard_normal(in_shape).astype(np.float32)
    perms = [None] + [tuple(RNG.permutation(len(in_shape))) for _ in range(3)]
    if len(in_shape) == 8:
        perms.append((7, 5, 3, 1, 6, 4, 2, 0))  # nothing merges: 8 axes, a leading loop over 2
    for perm in perms:
        np.testing.assert_array_equal(ops.Transpose(x, perm=perm, backend=backend), np.transpose(x, perm))


@pytest.mark.parametrize("grid", [1, 5])
def test_strided_copy_splits_mid_run(backend, grid):
    """strided_copy_kernel decodes a thread's first index once and counts the outer axes up after
    each run: a split that starts inside a run and runs that wrap several axes at once (sizes 1
    and primes) copy every element once, at its place (xoff/yoff included)."""
    from ops.shape import contiguous_strides, strided_copy_kernel
    x = np.arange(2 + 3 * 1 * 5 * 2 * 7 * 3, dtype=np.float32)
    shape = (3, 1, 5, 2, 7, 3)
    perm = (4, 0, 3, 1, 5, 2)  # y axes read from these x axes
    xs = contiguous_strides(shape)
    out_shape = [shape[p] for p in perm]
    y = np.full(1 + int(np.prod(out_shape)), -1, np.float32)
    strided_copy_kernel(x, y, np.array(out_shape, np.int64), np.array([xs[p] for p in perm], np.int64),
                        np.array(contiguous_strides(out_shape), np.int64), 2, 1, backend=backend, grid=grid)
    want = x[2:].reshape(shape).transpose(perm).reshape(-1)
    assert y[0] == -1
    np.testing.assert_array_equal(y[1:], want)


def test_transpose_other_dtypes_and_identity(backend):
    xb = RNG.integers(0, 2, (3, 4)).astype(bool)
    np.testing.assert_array_equal(ops.Transpose(xb, backend=backend), xb.T)
    xi = RNG.integers(-9, 9, (2, 3, 5)).astype(np.int64)
    np.testing.assert_array_equal(ops.Transpose(xi, perm=[1, 2, 0], backend=backend), xi.transpose(1, 2, 0))
    np.testing.assert_array_equal(ops.Identity(xi, backend=backend), xi)


def test_eager_equals_graph(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    g = dsl.Graph("sh")
    xi = g.input("x", (None, 3, 4), dsl.f32)
    y = ops.Transpose(ops.Reshape(xi, g.constant("s", shape(0, -1, 2))), perm=[2, 0, 1])
    g.output(y, "y")
    assert y.shape == (2, None, 6)
    eager = ops.Transpose(ops.Reshape(x, shape(0, -1, 2), backend=backend), perm=[2, 0, 1], backend=backend)
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": x})["y"], eager)
    np.testing.assert_array_equal(eager, x.reshape(2, 6, 2).transpose(2, 0, 1))


def test_errors_name_the_problem():
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(dsl.VerifyError, match="more than one -1"):
        ops.Reshape(x, shape(-1, -1))
    with pytest.raises(dsl.VerifyError, match=r"cannot infer -1: 24 elements .* shape \[5, -1\]"):
        ops.Reshape(x, shape(5, -1))
    with pytest.raises(dsl.VerifyError, match="changes the element count"):
        ops.Reshape(x, shape(5, 5))
    with pytest.raises(dsl.VerifyError, match="allowzero=1 cannot have both 0 and -1"):
        ops.Reshape(x, shape(0, -1), allowzero=1)
    with pytest.raises(dsl.VerifyError, match="shape input must be i64"):
        ops.Reshape(x, np.array([24], np.int32))
    with pytest.raises(dsl.VerifyError, match="copies input axis 3"):
        ops.Reshape(x, shape(1, 1, 1, 0))
    with pytest.raises(dsl.VerifyError, match=r"perm \[0, 0, 1\] is not a permutation of the 3 axes"):
        ops.Transpose(x, perm=[0, 0, 1])
    with pytest.raises(dsl.VerifyError, match=r"perm \[1, 0\] is not a permutation"):
        ops.Transpose(x, perm=[1, 0])


def test_transpose_property():
    """Random shapes and permutations (merging, dropping size-1 axes) agree with numpy on numba."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.integers(1, 3), min_size=1, max_size=8).flatmap(
        lambda s: st.tuples(st.just(tuple(s)), st.permutations(range(len(s))))))
    def check(case):
        in_shape, perm = case
        x = RNG.standard_normal(in_shape).astype(np.float32)
        np.testing.assert_array_equal(ops.Transpose(x, perm=perm, backend="numba"), np.transpose(x, perm))
    check()


# --------------------------------------------------------------------------- Shape, Size, Flatten, Squeeze, Unsqueeze, Expand

@pytest.mark.parametrize("start,end", [(0, None), (1, None), (-2, None), (0, -1), (-10, 10), (2, 1)])
def test_shape_and_size(backend, start, end):
    x = np.zeros((2, 3, 4), np.float32)
    np.testing.assert_array_equal(ops.Shape(x, start=start, end=end, backend=backend),
                                  np.array(x.shape[slice(start, end)], np.int64))
    size = ops.Size(x, backend=backend)
    assert size.shape == () and size.dtype == np.int64 and size == 24


def test_shape_infer_gives_the_value():
    g = dsl.Graph("s")
    x = g.input("x", (2, None, 4), dsl.f32)
    assert ops.Shape(x).spec.value is None                    # a dim is unknown
    np.testing.assert_array_equal(ops.Shape(x, end=1).spec.value, [2])
    np.testing.assert_array_equal(ops.Shape(x, start=-1).spec.value, [4])


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(backend, axis):
    x = RNG.integers(-9, 9, (2, 3, 1, 4)).astype(np.int64)
    k = axis % x.ndim if axis < 0 else axis
    np.testing.assert_array_equal(ops.Flatten(x, axis=axis, backend=backend), x.reshape(int(np.prod(x.shape[:k])), -1))


def test_squeeze_unsqueeze(backend):
    x = RNG.standard_normal((1, 3, 1, 2)).astype(np.float32)
    np.testing.assert_array_equal(ops.Squeeze(x, backend=backend), x.reshape(3, 2))
    np.testing.assert_array_equal(ops.Squeeze(x, shape(-2), backend=backend), x.reshape(1, 3, 2))
    assert ops.SqueezeV1(x, axes=(0,), backend=backend).shape == (3, 1, 2)
    np.testing.assert_array_equal(ops.Unsqueeze(x, shape(0, -1, 3), backend=backend), x.reshape(1, 1, 3, 1, 1, 2, 1))
    assert ops.UnsqueezeV1(x, axes=(1,), backend=backend).shape == (1, 1, 3, 1, 2)
    b = np.array([True, False])
    assert ops.Unsqueeze(b, shape(1), backend=backend).shape == (2, 1)


@pytest.mark.parametrize("in_shape,target", [((3, 1), (2, 1, 6)), ((1,), (4,)), ((2, 3), (1, 1)),
                                             ((2, 1, 4), (3, 2, 5, 4)), ((3,), ()), ((0, 1), (0, 3))], ids=str)
def test_expand(backend, in_shape, target):
    x = RNG.standard_normal(in_shape).astype(np.float32)
    want = x * np.ones(target, np.float32)
    np.testing.assert_array_equal(ops.Expand(x, np.array(target, np.int64), backend=backend), want)


def test_shape_subgraph_folds_at_compile_time(backend):
    """Shape -> Slice -> Concat -> Reshape: with the input shape known the shape arithmetic
    becomes a constant and only the Reshape (and Relu) remain."""
    g = dsl.Graph("fold")
    x = g.input("x", (2, 3, 4), dsl.f32)
    batch = ops.Slice(ops.Shape(x), shape(0), shape(1))
    target = ops.Concat(batch, g.constant("minus1", shape(-1)), axis=0)
    g.output(ops.Relu(ops.Reshape(x, target)), "y")
    model = g.compile(backend=backend)
    kinds = [n.op.op_type for n in model.graph.nodes]
    assert "Shape" not in kinds and "Concat" not in kinds and "Slice" not in kinds, kinds
    xv = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(model.run({"x": xv})["y"], np.maximum(xv, 0).reshape(2, 12))


def test_shape_subgraph_with_dynamic_batch_is_planned(backend):
    """Unknown batch: the shape arithmetic is evaluated while planning each input shape
    (model.shape_values), so the run gets a plan rather than running node by node."""
    g = dsl.Graph("dyn")
    x = g.input("x", (None, 3, 4), dsl.f32)
    batch = ops.Slice(ops.Shape(x), shape(0), shape(1))
    target = ops.Concat(batch, g.constant("minus1", shape(-1)), axis=0)
    y = ops.Reshape(x, target)
    assert y.shape == (None, None)
    g.output(ops.Relu(y), "y")
    model = g.compile(backend=backend)
    assert "Shape" in [n.op.op_type for n in model.graph.nodes]
    for batch_size in (2, 5):
        xv = RNG.standard_normal((batch_size, 3, 4)).astype(np.float32)
        np.testing.assert_array_equal(model.run({"x": xv})["y"], np.maximum(xv, 0).reshape(batch_size, 12))
    assert model.memory_plan() is not None  # planned, not run node by node


def test_shape_family_errors():
    x = np.ones((2, 1, 4), np.float32)
    with pytest.raises(dsl.VerifyError, match="Flatten axis 4 is out of range"):
        ops.Flatten(x, axis=4)
    with pytest.raises(dsl.VerifyError, match="Squeeze axis 0 of input .* has size 2, not 1"):
        ops.Squeeze(x, shape(0))
    with pytest.raises(dsl.VerifyError, match=r"Unsqueeze axes \[0, 0\] repeat an axis"):
        ops.Unsqueeze(x, shape(0, 0))
    with pytest.raises(dsl.VerifyError, match=r"Unsqueeze axes 5 is out of range for rank 4"):
        ops.Unsqueeze(x, shape(5))
    with pytest.raises(dsl.VerifyError, match=r"does not broadcast to \(3, 4\) \(axis 0: 2 vs 3\)"):
        ops.Expand(np.ones((2, 1), np.float32), shape(3, 4))
    with pytest.raises(dsl.VerifyError, match="Expand shape input must be a 1-D i64"):
        ops.Expand(x, np.array([2], np.int32))
    g = dsl.Graph("e")
    with pytest.raises(dsl.VerifyError, match="Squeeze without axes needs every dim known"):
        ops.Squeeze(g.input("x", (None, 3), dsl.f32))


def test_reshape_v1_attribute(backend):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(ops.ReshapeV1(x, shape=(0, -1), backend=backend), x.reshape(2, 12))
