"""Momentum, Adagrad and Adam (ai.onnx.preview.training) on every backend against numpy
update rules: several tensors per node, f32 and f64, step 0 and later steps; errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(21)


def tensors(n, shape, dtype, states):
    return [[RNG.standard_normal(s).astype(dtype) for s in shape[:n]] for _ in range(2 + states)]


def momentum_ref(r, t, x, g, v, alpha, beta, norm, nesterov):
    gr = norm * x + g
    vn = alpha * v + (beta if t > 0 else 1) * gr
    return x - r * (gr + alpha * vn if nesterov else vn), vn


def adagrad_ref(r, t, x, g, h, decay, eps, norm):
    gr = norm * x + g
    hn = h + gr * gr
    return x - r / (1 + t * decay) * gr / (np.sqrt(hn) + eps), hn


def adam_ref(r, t, x, g, v, h, alpha, beta, eps, norm, post):
    gr = norm * x + g
    vn = alpha * v + (1 - alpha) * gr
    hn = beta * h + (1 - beta) * gr * gr
    ra = r * np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    return (1 - post) * (x - ra * vn / (np.sqrt(hn) + eps)), vn, hn


SHAPES = [(3, 4), (5,)]


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum(backend, mode):
    xs, gs, vs = tensors(2, SHAPES, np.float32, 1)
    for t in (0, 3):
        out = ops.Momentum(np.float32(0.1), np.int64(t), *xs, *gs, *vs, alpha=0.9, beta=0.5, mode=mode,
                           norm_coefficient=0.01, backend=backend)
        for k in range(2):
            want = momentum_ref(0.1, t, xs[k], gs[k], vs[k], 0.9, 0.5, 0.01, mode == "nesterov")
            np.testing.assert_allclose(out[k], want[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(out[2 + k], want[1], rtol=1e-5, atol=1e-6)


def test_adagrad_f64(backend):
    xs, gs, hs = tensors(2, SHAPES, np.float64, 1)
    hs = [np.abs(h) for h in hs]
    out = ops.Adagrad(np.float64(0.2), np.int64(4), *xs, *gs, *hs, decay_factor=0.1, epsilon=1e-5,
                      norm_coefficient=0.001, backend=backend)
    for k in range(2):
        want = adagrad_ref(0.2, 4, xs[k], gs[k], hs[k], 0.1, 1e-5, 0.001)
        np.testing.assert_allclose(out[k], want[0], rtol=1e-12)
        np.testing.assert_allclose(out[2 + k], want[1], rtol=1e-12)


def test_adam_steps_in_a_graph(backend):
    """Three steps feeding each step's X, V, H back: a small training loop."""
    x, g = RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    gr = dsl.Graph("adam")
    ins = [gr.input(n, s, d) for n, s, d in (("r", (), dsl.f32), ("t", (), dsl.i64), ("x", (2, 3), dsl.f32),
                                              ("g", (2, 3), dsl.f32), ("v", (2, 3), dsl.f32), ("h", (2, 3), dsl.f32))]
    for name, o in zip(("x", "v", "h"), ops.Adam(*ins, alpha=0.8, beta=0.95, norm_coefficient_post=0.01)):
        gr.output(o, name + "_new")
    model = gr.compile(backend=backend)
    state = {"x": x, "v": np.zeros_like(x), "h": np.zeros_like(x)}
    want = (x.astype(np.float64), np.zeros((2, 3)), np.zeros((2, 3)))
    for t in range(3):
        out = model.run({"r": np.float32(0.05), "t": np.int64(t), "g": g, **state})
        state = {k: out[k + "_new"] for k in ("x", "v", "h")}
        want = adam_ref(0.05, t, want[0], g, want[1], want[2], 0.8, 0.95, 1e-6, 0.0, 0.01)
        for k, w in zip(("x", "v", "h"), want):
            np.testing.assert_allclose(state[k], w, rtol=1e-5, atol=1e-6)


def test_errors():
    x = np.zeros(3, np.float32)
    with pytest.raises(VerifyError, match=r"Adam takes R, T and n each of X, G, V, H \(2 \+ 4·n inputs\), got 5"):
        ops.Adam(np.float32(1), np.int64(0), x, x, x, backend="interpreter")
    with pytest.raises(VerifyError, match=r"Adagrad H\[0\] must match X\[0\]"):
        ops.Adagrad(np.float32(1), np.int64(0), x, x, np.zeros(4, np.float32), backend="interpreter")
    with pytest.raises(VerifyError, match="Momentum mode 'heavy' is not one of standard, nesterov"):
        ops.Momentum(np.float32(1), np.int64(0), x, x, x, alpha=0.9, beta=0.1, mode="heavy", norm_coefficient=0.0,
                     backend="interpreter")
    with pytest.raises(VerifyError, match=r"T \(step count\) must be an i64 scalar"):
        ops.Adagrad(np.float32(1), np.int32(0), x, x, x, backend="interpreter")
