"""``dsl.grad`` writes its reversed loops in forms that vectorize, with the same results:

* under strict math, loops that add into row adjoints are split (dsl/lang/adjoint_fission.py);
  the split gradient must equal the unsplit one bit for bit on every backend (same terms, same
  order, ``-0.0`` for a branch not taken);
* the gradient of ``m = max(m, e)`` goes to the first ``e`` equal to the final ``m``, found by an
  integer min search instead of a loop carrying a flag (dsl/lang/adjoint_first.py): ties go
  to the first element, none equal to the value before the loop."""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, f64
from dsl.lang import adjoint_fission
from tests.dsl import grad_kernels as K


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


@dsl.kernel(threads=2)
def row_extremes(x: In[f64, 2], hi: Out[f64], lo: Out[f64]):
    rlo, rhi = dsl.split(x.shape[0])
    for r in range(rlo, rhi):
        m = x[r, 0]  # the value before the loop: it gets the gradient when no later element equals m
        for j in range(1, x.shape[1]):
            m = max(m, x[r, j])
        n = 1e300
        for j in range(x.shape[1]):
            n = min(n, x[r, j])
        hi[r] = m
        lo[r] = n


def test_extremes_give_the_gradient_to_the_first_equal_element(backend):
    x = np.array([[1.0, 3.0, 0.5, 3.0, 0.5],     # max tied at 1 and 3, min tied at 2 and 4
                  [7.0, 2.0, 2.0, 2.0, 2.0],     # the max before the loop; every later element ties the min
                  [4.0, 4.0, 4.0, 4.0, 4.0],     # all equal: max to element 1 (the first e), min to 0
                  [-1.0, -2.0, 5.0, -3.0, 5.0]])
    ghi, glo = np.array([1.5, -2.0, 3.0, 0.25]), np.array([10.0, 20.0, 30.0, 40.0])
    gx = np.zeros_like(x)
    g = dsl.grad(row_extremes)
    g(x, np.zeros(4), np.zeros(4), ghi, glo, gx, backend=backend)
    expect = np.zeros_like(x)
    for r in range(4):
        later = x[r, 1:]
        m = max(x[r, 0], later.max())
        expect[r, 1 + int(np.argmax(later == m)) if (later == m).any() else 0] += ghi[r]
        expect[r, int(np.argmin(x[r]))] += glo[r]
    np.testing.assert_array_equal(gx, expect)
    assert g.source("python", x, np.zeros(4), np.zeros(4), ghi, glo, gx).count("first_") >= 4  # both searches


def test_extreme_of_a_loop_nest_goes_to_the_first_in_row_major_order(backend):
    x = np.array([[0.0, 2.5, 1.0], [2.5, -1.0, 2.5]])
    gx = np.zeros_like(x)
    dsl.grad(K.max_2d)(x, np.zeros(1), np.array([3.0]), gx, backend=backend)
    np.testing.assert_array_equal(gx, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0]])  # d(2 x)/dx * 3, at (0, 1) only
