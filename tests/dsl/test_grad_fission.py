"""``dsl.grad`` under strict math splits the reversed loops that add into row adjoints
(dsl/lang/adjoint_fission.py) so that they vectorize.  The split gradient must equal the unsplit
one bit for bit on every backend: same terms, same order, ``-0.0`` for a branch not taken."""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, f64
from dsl.lang import adjoint_fission


@dsl.kernel(threads=2)
def softmax32(x: In[f32, 2], y: Out[f32, 2]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        m = -3.0e38
        for j in range(x.shape[1]):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(x.shape[1]):
            s += dsl.exp(x[r, j] - m)
        for j in range(x.shape[1]):
            y[r, j] = dsl.exp(x[r, j] - m) / s


@dsl.kernel(threads=2)
def branchy_rows(x: In[f64, 2], y: Out[f64, 2]):
    """The row adjoint of ``s`` is added to under both branches of the reversed loop."""
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        s = 0.0
        for j in range(x.shape[1]):
            s += x[r, j] * x[r, j]
        for j in range(x.shape[1]):
            if x[r, j] > 0.0:
                y[r, j] = x[r, j] * dsl.sqrt(s)
            else:
                y[r, j] = dsl.exp(x[r, j]) / s


def _gradients(kernel, x, backend, split: bool):
    g = dsl.grad(kernel)
    y = np.zeros_like(x)
    gy = np.random.default_rng(3).standard_normal(x.shape).astype(x.dtype)
    gx = np.zeros_like(x)
    run = g if split else g._build(kernel.bind((x, y), {})[0], split=False)
    run(x, y, gy, gx, backend=backend)
    return gx


@pytest.mark.parametrize("cols", [3, adjoint_fission.CHUNK, 150])  # fewer, exactly, and not a multiple
def test_split_softmax_gradient_is_bitwise_the_unsplit_one(backend, cols):
    x = np.random.default_rng(cols).standard_normal((5, cols)).astype(np.float32) * 4
    split, whole = _gradients(softmax32, x, backend, True), _gradients(softmax32, x, backend, False)
    np.testing.assert_array_equal(split, whole)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    gy = np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(split, p * (gy - (gy * p).sum(1, keepdims=True)), rtol=2e-4, atol=1e-6)


def test_split_under_branches_is_bitwise_the_unsplit_one(backend):
    x = np.random.default_rng(5).standard_normal((4, 70))
    x[:, ::7] = 0.0  # the else side, where the stored term of the other branch is -0.0
    np.testing.assert_array_equal(_gradients(branchy_rows, x, backend, True),
                                  _gradients(branchy_rows, x, backend, False))


def test_which_loops_are_split():
    x = np.zeros((2, 8), np.float32)
    text = dsl.grad(softmax32).source("python", x, x, x, x.copy())
    assert text.count("dsl.local((64,), dsl.f32)") == 2  # adj_s and adj_m: one array per statement
    assert text.count(f"dsl.i64({adjoint_fission.CHUNK})):") == 2  # the two reversed loops that add
    branchy = dsl.grad(branchy_rows).source("python", *(np.zeros((2, 8)),) * 4)
    assert "dsl.f64(-0.0)" in branchy  # a term under a branch starts as the identity
    # fast math lets the compiler reassociate and vectorize the whole loop: nothing is split
    fast = dsl.grad(dsl.kernel(threads=2, fastmath=True)(softmax32.fn))
    assert "dsl.local" not in fast.source("python", x, x, x, x.copy())
