"""LinearAttention on every backend against the recurrence written in numpy: the four update
rules, grouped heads, a past state, decode after prefill."""
import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(17)


def ref(q, k, v, hq, hk, rule, past=None, decay=None, beta=None):
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hk
    q4 = q.reshape(b, t, hq, dk).astype(np.float64)
    k4 = k.reshape(b, t, hk, dk).astype(np.float64)
    v4 = v.reshape(b, t, hk, dv).astype(np.float64)
    s = np.zeros((b, hk, dk, dv)) if past is None else past.astype(np.float64).copy()
    out = np.zeros((b, t, hq, dv))
    for i in range(t):
        if "gated" in rule:
            g = decay[:, i].reshape(b, hk, -1)                       # (b, hk, 1 or dk)
            s = s * np.exp(g)[..., None]
        u = v4[:, i]
        if "delta" in rule:
            r = np.einsum("bhdm,bhd->bhm", s, k4[:, i])
            u = beta[:, i].reshape(b, -1, 1) * (u - r)
        s = s + k4[:, i][..., None] * u[..., None, :]
        out[:, i] = np.einsum("bhd,bhdm->bhm", q4[:, i], np.repeat(s, hq // hk, axis=1)) / np.sqrt(dk)
    return out.reshape(b, t, hq * dv), s


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_update_rules_with_grouped_heads(backend, rule):
    b, t, hq, hk, dk, dv = 2, 5, 4, 2, 3, 4
    q = RNG.standard_normal((b, t, hq * dk)).astype(np.float32) * 0.5
    k = RNG.standard_normal((b, t, hk * dk)).astype(np.float32) * 0.5
    v = RNG.standard_normal((b, t, hk * dv)).astype(np.float32)
    past = RNG.standard_normal((b, hk, dk, dv)).astype(np.float32) * 0.1
    decay = -RNG.uniform(0, 1, (b, t, hk * dk)).astype(np.float32) if "gated" in rule else None
    beta = RNG.uniform(0, 1, (b, t, hk)).astype(np.float32) if "delta" in rule else None
    y, state = ops.LinearAttention(q, k, v, past, decay, beta, q_num_heads=hq, kv_num_heads=hk, update_rule=rule,
                                   backend=backend)
    want_y, want_s = ref(q, k, v, hq, hk, rule, past, decay, beta)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, want_s, rtol=1e-4, atol=1e-5)


def test_decode_step_continues_prefill(backend):
    b, t, h, d = 1, 4, 2, 3
    q, k, v = (RNG.standard_normal((b, t + 1, h * d)).astype(np.float32) * 0.5 for _ in range(3))
    _, state = ops.LinearAttention(q[:, :t], k[:, :t], v[:, :t], q_num_heads=h, kv_num_heads=h,
                                   update_rule="linear", backend=backend)
    y1, _ = ops.LinearAttention(q[:, t:], k[:, t:], v[:, t:], state, q_num_heads=h, kv_num_heads=h,
                                update_rule="linear", backend=backend)
    full, _ = ops.LinearAttention(q, k, v, q_num_heads=h, kv_num_heads=h, update_rule="linear", backend=backend)
    np.testing.assert_allclose(y1[:, 0], full[:, t], rtol=1e-5, atol=1e-6)


def test_errors():
    x = np.zeros((1, 2, 4), np.float32)
    with pytest.raises(VerifyError, match="'gated' needs the decay input"):
        ops.LinearAttention(x, x, x, q_num_heads=2, kv_num_heads=2, update_rule="gated", backend="interpreter")
    with pytest.raises(VerifyError, match=r"q_num_heads \(3\) must be a positive multiple of kv_num_heads \(2\)"):
        ops.LinearAttention(x, x, x, q_num_heads=3, kv_num_heads=2, update_rule="linear", backend="interpreter")
