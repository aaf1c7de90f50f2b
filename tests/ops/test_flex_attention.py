"""FlexAttention on every backend against a numpy reference: plain, grouped K/V heads,
score_mod (causal mask, a captured bias) and prob_mod bodies, f16 and f64; errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.body import Body
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(40)


def reference(q, k, v, scale=None, score_mod=None, prob_mod=None):
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k64, v64 = np.repeat(k64, rep, axis=1), np.repeat(v64, rep, axis=1)
    s = q64 @ np.swapaxes(k64, -1, -2) * (scale if scale is not None else 1 / np.sqrt(q.shape[3]))
    if score_mod is not None:
        s = score_mod(s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    if prob_mod is not None:
        p = prob_mod(p)
    return p @ v64


def qkv(b, hq, hkv, length, seq, e, ev, dtype=np.float32):
    return (RNG.standard_normal((b, hq, length, e)).astype(dtype), RNG.standard_normal((b, hkv, seq, e)).astype(dtype),
            RNG.standard_normal((b, hkv, seq, ev)).astype(dtype))


def causal_body(shape):
    """score_mod: Where(q_idx >= k_idx, scores, -inf)."""
    g = dsl.Graph("causal")
    s = g.input("scores", shape, dsl.f32)
    mask = np.arange(shape[2])[:, None] >= np.arange(shape[3])[None, :]
    g.output(ops.Where(mask, s, np.float32(-np.inf)), "out")
    return Body(g, 1)


def test_plain_and_grouped_heads(backend):
    q, k, v = qkv(2, 4, 2, 3, 5, 8, 6)
    y = ops.FlexAttention(q, k, v, backend=backend)
    assert y.shape == (2, 4, 3, 6) and y.dtype == np.float32
    np.testing.assert_allclose(y, reference(q, k, v), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.FlexAttention(q, k, v, scale=0.3, backend=backend), reference(q, k, v, 0.3),
                               rtol=1e-5, atol=1e-6)


def test_score_mod_and_prob_mod(backend):
    q, k, v = qkv(1, 2, 2, 4, 4, 4, 4)
    shape = (1, 2, 4, 4)
    pg = dsl.Graph("half")                          # prob_mod: probs * 0.5
    p = pg.input("probs", shape, dsl.f32)
    pg.output(ops.Mul(p, np.float32(0.5)), "out")
    y = ops.FlexAttention(q, k, v, score_mod=causal_body(shape), prob_mod=Body(pg, 1), backend=backend)
    tri = np.tril(np.ones((4, 4), bool))
    want = reference(q, k, v, score_mod=lambda s: np.where(tri, s, -np.inf), prob_mod=lambda p: p * 0.5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_captured_bias_in_a_graph(backend):
    """A score_mod reading an outer value: the value is the node's fourth input."""
    q, k, v = qkv(1, 1, 1, 2, 3, 4, 2)
    bg = dsl.Graph("bias")
    s = bg.input("scores", (1, 1, 2, 3), dsl.f32)
    bias = bg.input("bias", (3,), dsl.f32)          # captured
    bg.output(ops.Add(s, bias), "out")
    g = dsl.Graph("flex")
    qi, ki, vi, bi = (g.input(n, a.shape, dsl.f32) for n, a in (("q", q), ("k", k), ("v", v), ("b", np.zeros(3))))
    g.output(ops.FlexAttention(qi, ki, vi, bi, score_mod=Body(bg, 1)), "y")
    b = np.array([0.0, -1.0, 2.0], np.float32)
    y = g.compile(backend=backend).run({"q": q, "k": k, "v": v, "b": b})["y"]
    np.testing.assert_allclose(y, reference(q, k, v, score_mod=lambda s: s + b), rtol=1e-5, atol=1e-6)


def test_f16_and_f64(backend):
    q, k, v = qkv(1, 2, 1, 3, 4, 4, 3, np.float16)
    y = ops.FlexAttention(q, k, v, backend=backend)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), reference(q, k, v), rtol=3e-3, atol=3e-3)
    q, k, v = qkv(1, 1, 1, 2, 3, 4, 3, np.float64)
    np.testing.assert_allclose(ops.FlexAttention(q, k, v, backend=backend), reference(q, k, v), rtol=1e-12, atol=1e-12)


def test_errors():
    q, k, v = qkv(1, 3, 2, 2, 3, 4, 4)
    with pytest.raises(VerifyError, match="q_num_heads 3 must be a multiple of kv_num_heads 2"):
        ops.FlexAttention(q, k, v, backend="interpreter")
    q, k, v = qkv(1, 2, 2, 2, 3, 4, 4)
    with pytest.raises(VerifyError, match="FlexAttention shapes do not fit"):
        ops.FlexAttention(q, k[..., :3].copy(), v, backend="interpreter")
    g = dsl.Graph("bad")
    s = g.input("scores", (1, 2, 2, 3), dsl.f32)
    g.output(ops.Cast(s, to=dsl.f64), "out")        # f64 out of an f32 score_mod
    with pytest.raises(VerifyError, match="score_mod must give a rank-4 f32 tensor"):
        ops.FlexAttention(q, k, v, score_mod=Body(g, 1), backend="interpreter")
