"""Attention on every backend against a numpy reference written here (4-D and 3-D layouts,
grouped heads, masks, causal with a cache, windows, soft cap, the QK output, errors)."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(5)


def ref_attention(q, k, v, mask=None, past=None, causal=False, scale=None, softcap=0.0, window=(-1, -1)):
    """q (B, Hq, Sq, D), k/v (B, Hk, S, D): the spec's formulas, in f64."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    if past is not None:
        k = np.concatenate([past[0], k], axis=2)
        v = np.concatenate([past[1], v], axis=2)
    sq, skv = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else scale
    s = q @ kk.transpose(0, 1, 3, 2) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    bias = np.zeros((sq, skv))
    if mask is not None:
        bias = np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask.astype(np.float64)
    offset = 0 if past is None else past[0].shape[2]
    diff = np.arange(sq)[:, None] + offset - np.arange(skv)[None, :]
    allowed = np.ones_like(diff, bool)
    if causal:
        allowed &= diff >= 0
    if window[0] >= 0:
        allowed &= diff <= window[0]
    if window[1] >= 0:
        allowed &= -diff <= window[1]
    bias = bias + np.where(allowed, 0.0, -np.inf)
    s = s + bias
    top = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isneginf(top), 0, top))
    p = p / np.where(p.sum(-1, keepdims=True) == 0, 1, p.sum(-1, keepdims=True))
    p = np.where(np.isneginf(np.broadcast_to(bias, s.shape).max(-1, keepdims=True)), 0, p)
    return p @ vv, p


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_multi_and_grouped_heads_with_causal_cache(backend):
    q, k, v = rand(2, 4, 3, 8), rand(2, 2, 3, 8), rand(2, 2, 3, 6)
    past = (rand(2, 2, 2, 8), rand(2, 2, 2, 6))
    y, pk, pv, qk = ops.Attention(q, k, v, None, past[0], past[1], is_causal=1, qk_matmul_output_mode=3,
                                  backend=backend)
    want, probs = ref_attention(q, k, v, past=past, causal=True)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(qk, probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(pk, np.concatenate([past[0], k], axis=2))
    np.testing.assert_array_equal(pv, np.concatenate([past[1], v], axis=2))


def test_3d_layout_masks_window_and_softcap(backend):
    b, sq, skv, hq, hk, d = 2, 4, 5, 2, 1, 4
    q, k, v = rand(b, sq, hq * d), rand(b, skv, hk * d), rand(b, skv, hk * d)
    q4 = q.reshape(b, sq, hq, d).transpose(0, 2, 1, 3)
    k4 = k.reshape(b, skv, hk, d).transpose(0, 2, 1, 3)
    v4 = v.reshape(b, skv, hk, d).transpose(0, 2, 1, 3)
    bool_mask = RNG.random((sq, skv)) > 0.3
    bool_mask[1] = False                                     # a fully masked row gives zeros
    y = ops.Attention(q, k, v, bool_mask, q_num_heads=hq, kv_num_heads=hk, backend=backend)[0]
    want = ref_attention(q4, k4, v4, mask=bool_mask)[0].transpose(0, 2, 1, 3).reshape(b, sq, hq * d)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    assert not y[:, 1].any()
    add_mask = rand(sq, skv)
    y = ops.Attention(q, k, v, add_mask, q_num_heads=hq, kv_num_heads=hk, softcap=2.0, scale=0.3,
                      left_window_size=1, right_window_size=2, backend=backend)[0]
    want = ref_attention(q4, k4, v4, mask=add_mask, softcap=2.0, scale=0.3, window=(1, 2))[0]
    np.testing.assert_allclose(y, want.transpose(0, 2, 1, 3).reshape(b, sq, hq * d), rtol=1e-5, atol=1e-6)


def test_attention_in_a_graph_with_f16():
    q, k, v = (rand(1, 2, 3, 4).astype(np.float16) for _ in range(3))
    g = dsl.Graph("att")
    ins = [g.input(n, x.shape, dsl.f16) for n, x in zip("qkv", (q, k, v))]
    g.output(ops.Attention(*ins, is_causal=1)[0], "y")
    y = g.compile(backend="numba").run(dict(zip("qkv", (q, k, v))))["y"]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, ref_attention(q, k, v, causal=True)[0], rtol=2e-3, atol=2e-3)


def test_errors_name_the_problem():
    q, k, v = rand(1, 4, 3, 8), rand(1, 3, 3, 8), rand(1, 3, 3, 8)
    with pytest.raises(VerifyError, match=r"query heads \(4\) must be a multiple of key/value heads \(3\)"):
        ops.Attention(q, k, v, backend="interpreter")
    with pytest.raises(VerifyError, match="q_num_heads attribute is needed"):
        ops.Attention(rand(1, 3, 8), rand(1, 3, 8), rand(1, 3, 8), backend="interpreter")
    with pytest.raises(VerifyError, match="past_key and past_value must be given together"):
        ops.Attention(q, q, q, None, rand(1, 4, 2, 8), backend="interpreter")
    with pytest.raises(VerifyError, match="attn_mask must be bool or Q's dtype"):
        ops.Attention(q, q, q, np.zeros((3, 3), np.int32), backend="interpreter")
