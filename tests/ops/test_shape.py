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
