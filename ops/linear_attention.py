"""ONNX LinearAttention (opset 27): the recurrent linear attention of RetNet/GLA/DeltaNet-style
layers, for prefill (T > 1) and decode (T = 1), with grouped heads.

The state S (d_k × d_v per batch entry and key/value head) evolves per token:
linear S += k ⊗ v; gated S = e^g·S + k ⊗ v; delta S += β·k ⊗ (v - Sᵀk); gated_delta both,
and each query head of the group reads o = scale·qᵀS.  Every update touches one column of S
at a time (column m only needs column m), so a work item is one (batch, kv head, value
column): it keeps its column in an f32 workspace and runs the whole sequence, no barrier.
"""
from __future__ import annotations

import math

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS

T = dsl.TypeVar("T")
S = dsl.TypeVar("S")
RULES = ("linear", "gated", "delta", "gated_delta")


@dsl.kernel
def linear_attention_kernel(q: In[T, 3], k: In[T, 3], v: In[T, 3], past: In[S, 4], decay: In[T, 3],
                            beta: In[T, 3], y: Out[T, 3], state: Out[S, 4], work: Out[f32, 2],
                            q_heads: i64, scale: f32, gated: bool_, delta: bool_, has_past: bool_,
                            decay_per_key: bool_, beta_per_head: bool_):
    batch = q.shape[0]
    steps = q.shape[1]
    kv_heads = state.shape[1]
    dk = state.shape[2]
    dv = state.shape[3]
    group = q_heads // kv_heads
    lo, hi = dsl.split(batch * kv_heads * dv)
    for w in range(lo, hi):
        m = w % dv
        h = (w // dv) % kv_heads
        b = w // (dv * kv_heads)
        for d in range(dk):
            work[w, d] = f32(past[b, h, d, m]) if has_past else f32(0)
        for t in range(steps):
            if gated:
                for d in range(dk):
                    g = f32(decay[b, t, h * dk + d]) if decay_per_key else f32(decay[b, t, h])
                    work[w, d] = work[w, d] * dsl.exp(g)
            u = f32(v[b, t, h * dv + m])
            if delta:
                r = f32(0)
                for d in range(dk):
                    r += work[w, d] * f32(k[b, t, h * dk + d])
                bt = f32(beta[b, t, h]) if beta_per_head else f32(beta[b, t, 0])
                u = bt * (u - r)
            for d in range(dk):
                work[w, d] += f32(k[b, t, h * dk + d]) * u
            for j in range(group):
                hq = h * group + j
                o = f32(0)
                for d in range(dk):
                    o += f32(q[b, t, hq * dk + d]) * work[w, d]
                y[b, t, hq * dv + m] = scale * o
        for d in range(dk):
            state[b, h, d, m] = work[w, d]


@dsl.op("LinearAttention", since=27)
class LinearAttention(dsl.Op):
    """query/key/value (B, T, heads·D) -> output (B, T, q_heads·d_v), present_state
    (B, kv_heads, d_k, d_v); optional past_state, decay (gated rules), beta (delta rules)."""

    q_num_heads: int = 0
    kv_num_heads: int = 0
    scale: float = 0.0
    update_rule: str = "gated_delta"
    chunk_size: int = 64  # a tuning hint for chunked GPU kernels; the result does not depend on it
    kernels = {"default": linear_attention_kernel}

    def _dims(self, q, k, v):
        hq, hk = self.q_num_heads, self.kv_num_heads
        if hq <= 0 or hk <= 0 or hq % hk:
            raise VerifyError(f"LinearAttention q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hk})")
        dk = None if q.shape[2] is None else q.shape[2] // hq
        dv = None if v.shape[2] is None else v.shape[2] // hk
        return hq, hk, dk, dv

    def verify(self, query, key, value, past_state=None, decay=None, beta=None):
        op = "LinearAttention"
        if self.update_rule not in RULES:
            raise VerifyError(f"{op} update_rule {self.update_rule!r} is not one of {', '.join(RULES)}")
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.ndim != 3 or t.dtype not in FLOATS or t.dtype != query.dtype:
                raise VerifyError(f"{op} {name} must be (B, T, heads·D) of one float dtype, got {t}")
        gated = "gated" in self.update_rule
        delta = "delta" in self.update_rule
        if gated != (decay is not None):
            raise VerifyError(f"{op} update_rule {self.update_rule!r} {'needs' if gated else 'forbids'} the decay input")
        if delta != (beta is not None):
            raise VerifyError(f"{op} update_rule {self.update_rule!r} {'needs' if delta else 'forbids'} the beta input")
        hq, hk, dk, dv = self._dims(query, key, value)
        if decay is not None and decay.shape[2] not in (None, hk, None if dk is None else hk * dk):
            raise VerifyError(f"{op} decay last dim must be kv_num_heads ({hk}) or kv_num_heads·d_k, got {decay}")
        if beta is not None and beta.shape[2] not in (None, hk, 1):
            raise VerifyError(f"{op} beta last dim must be kv_num_heads ({hk}) or 1, got {beta}")
        if past_state is not None and past_state.ndim != 4:
            raise VerifyError(f"{op} past_state must be (B, kv_heads, d_k, d_v), got {past_state}")

    def infer(self, query, key, value, past_state=None, decay=None, beta=None):
        hq, hk, dk, dv = self._dims(query, key, value)
        state_dtype = query.dtype if past_state is None else past_state.dtype
        return (TensorSpec((query.shape[0], query.shape[1], None if dv is None else hq * dv), query.dtype),
                TensorSpec((query.shape[0], hk, dk, dv), state_dtype))

    def run(self, impl, inputs, outputs, backend):
        q, k, v = inputs[:3]
        past, decay, beta = (list(inputs[3:]) + [None] * 3)[:3]
        y, state = outputs
        hq = self.q_num_heads
        dk = q.shape[2] // hq
        scale = self.scale or 1.0 / math.sqrt(dk)
        dummy = np.zeros((1, 1, 1), q.dtype)
        impl(q, k, v, np.zeros((1, 1, 1, 1), state.dtype) if past is None else past,
             dummy if decay is None else decay, dummy if beta is None else beta, y, state,
             np.empty((state.shape[0] * state.shape[1] * state.shape[3], max(dk, 1)), np.float32),
             hq, float(scale), decay is not None, beta is not None, past is not None,
             decay is not None and decay.shape[2] != state.shape[1], beta is not None and beta.shape[2] != 1,
             backend=backend)
