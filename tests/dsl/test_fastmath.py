"""``@dsl.kernel(fastmath=True)``: results agree with numpy within a float32 tolerance on
every backend (the compiled ones may reorder sums and use approximate math)."""
import numpy as np

import dsl
from dsl import In, Out, f32


@dsl.kernel(threads=4, fastmath=True)
def softmax_rows(x: In[f32, 2], y: Out[f32, 2]):
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        m = x[r, 0]
        for j in range(1, n):
            m = max(m, x[r, j])
        s = f32(0)
        for j in range(n):
            e = dsl.exp(x[r, j] - m)
            y[r, j] = e
            s += e
        for j in range(n):
            y[r, j] *= 1.0 / s


@dsl.kernel(threads=3, fastmath=True)
def activations(x: In[f32], y: Out[f32, 2]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y[0, i] = 1.0 / (1.0 + dsl.exp(-v))             # sigmoid
        y[1, i] = dsl.tanh(v)
        y[2, i] = dsl.log(dsl.abs(v) + 1e-3)
        y[3, i] = dsl.clamp(v, -1.5, 2.0) + min(v, 0.25, 3.0 * v)
        y[4, i] = v * 0.5 * (1.0 + dsl.tanh(0.7978846 * (v + 0.044715 * v * v * v)))   # GELU (tanh form)


def test_fastmath_softmax_matches_numpy(backend):
    x = np.random.default_rng(0).normal(0, 3, (37, 300)).astype(np.float32)
    x[5, 7] = 60.0   # one dominant entry: the rest of that row underflows toward 0
    y = np.zeros_like(x)
    softmax_rows(x, y, backend=backend)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-9)


def test_fastmath_activations_match_numpy(backend):
    x = np.concatenate([np.linspace(-12, 12, 997), [0.0, -0.0, 1e-20, -1e-20, 80.0, -80.0]]).astype(np.float32)
    y = np.zeros((5, x.size), np.float32)
    activations(x, y, backend=backend)
    v = x.astype(np.float64)
    want = np.stack([1 / (1 + np.exp(-v)), np.tanh(v), np.log(np.abs(v) + np.float32(1e-3)),
                     np.clip(v, -1.5, 2.0) + np.minimum(np.minimum(v, 0.25), 3 * v),
                     v * 0.5 * (1 + np.tanh(0.7978846 * (v + 0.044715 * v ** 3)))])
    np.testing.assert_allclose(y[:4], want[:4], rtol=1e-5, atol=1e-6)
    # GELU: a 1-ulp tanh near -1 (allowed on OpenCL) times |v|/2 = 40 at v = -80
    np.testing.assert_allclose(y[4], want[4], rtol=1e-5, atol=4e-6)
