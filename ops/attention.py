"""ONNX Attention (opsets 23-25): scaled dot-product attention with multi-, grouped- and
multi-query heads, boolean or additive masks, causal and sliding-window masking aligned to a
KV cache, soft capping, past/present key-value caches and the optional QK output.

Two kernels: ``kv_concat_kernel`` writes present_key/present_value (past ‖ new, always 4-D);
``attention_kernel`` then gives each team thread whole query rows: scores into an f32
workspace row (bias, mask and window applied, max tracked), exp and sum, then the
probability-weighted sum of V.  Everything is computed in f32 (f64 inputs in f64 would only
matter past f32's range of attention scores; they are rounded like the other floats).  A
row whose every key is masked gives zeros, not NaN, as the spec requires.  3-D inputs
(batch, seq, heads·head_size) are read through strides, never transposed in memory.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS

T = dsl.TypeVar("T")
V = dsl.TypeVar("V")
M = dsl.TypeVar("M")

NO_MASK = 0
BOOL_MASK = 1
ADD_MASK = 2
NEG_INF = -math.inf


@dsl.kernel
def kv_concat_kernel(past: In[T], x: In[T], out: Out[T, 4], past_len: i64, sb: i64, sh: i64, ss: i64):
    """out[b, h, s, :] = past[b, h, s, :] for s < past_len, else x at (b, h, s - past_len)
    read through x's strides (3-D or 4-D layout)."""
    heads = out.shape[1]
    seq = out.shape[2]
    d = out.shape[3]
    lo, hi = dsl.split(out.size)
    for i in range(lo, hi):
        e = i % d
        r = i // d
        s = r % seq
        r = r // seq
        h = r % heads
        b = r // heads
        if s < past_len:
            out.flat[i] = past.flat[((b * heads + h) * past_len + s) * d + e]
        else:
            out.flat[i] = x.flat[b * sb + h * sh + (s - past_len) * ss + e]


@dsl.kernel
def attention_kernel(q: In[T], k: In[T, 4], v: In[V, 4], mask: In[M, 4], nonpad: In[i64, 1], y: Out[T],
                     qk: Out[T, 4], work: Out[f32, 2],
                     q_sb: i64, q_sh: i64, q_ss: i64, y_sb: i64, y_sh: i64, y_ss: i64,
                     mask_mode: i64, mask_len: i64, scale: f32, softcap: f32, causal: bool_,
                     past_len: i64, use_nonpad: bool_, left: i64, right: i64, qk_mode: i64):
    """One query row (b, h, i) per step: see the module docstring; ``qk_mode`` -1 skips the
    QK output, 0-3 are ONNX's qk_matmul_output_mode."""
    heads = qk.shape[1]
    sq = qk.shape[2]
    skv = qk.shape[3]
    kv_heads = k.shape[1]
    dq = k.shape[3]
    dv = v.shape[3]
    group = heads // kv_heads
    lo, hi = dsl.split(qk.shape[0] * heads * sq)
    for row in range(lo, hi):
        i = row % sq
        h = (row // sq) % heads
        b = row // (sq * heads)
        hk = h // group
        pq = b * q_sb + h * q_sh + i * q_ss
        offset = past_len
        valid = skv
        if use_nonpad:
            valid = nonpad.flat[b]
            offset = valid - sq
        mb = b if mask.shape[0] > 1 else 0
        mh = h if mask.shape[1] > 1 else 0
        mi = i if mask.shape[2] > 1 else 0
        pm = ((mb * mask.shape[1] + mh) * mask.shape[2] + mi) * mask.shape[3]
        top = f32(NEG_INF)
        bias_top = f32(NEG_INF)
        for j in range(skv):
            pk = ((b * kv_heads + hk) * skv + j) * dq
            s = f32(0)
            for e in range(dq):
                s += f32(q.flat[pq + e]) * f32(k.flat[pk + e])
            s = s * scale
            if softcap > 0:
                s = softcap * dsl.tanh(s / softcap)
            if qk_mode == 0 or qk_mode == 1:
                qk.flat[row * skv + j] = s
            bias = f32(0)
            if mask_mode != NO_MASK:
                if j < mask_len:
                    mv = f32(mask.flat[pm + (j if mask.shape[3] > 1 else 0)])
                    if mask_mode == BOOL_MASK:
                        bias = f32(0) if mv != 0 else f32(NEG_INF)
                    else:
                        bias = mv
                else:
                    bias = f32(NEG_INF)
            diff = i + offset - j
            if causal and diff < 0:
                bias = f32(NEG_INF)
            if left >= 0 and diff > left:
                bias = f32(NEG_INF)
            if right >= 0 and -diff > right:
                bias = f32(NEG_INF)
            if j >= valid:
                bias = f32(NEG_INF)
            s = s + bias
            if qk_mode == 2:
                qk.flat[row * skv + j] = s
            work[row, j] = s
            top = max(top, s)
            bias_top = max(bias_top, bias)
        masked = bias_top == f32(NEG_INF)
        if top == f32(NEG_INF):
            top = f32(0)
        total = f32(0)
        for j in range(skv):
            p = dsl.exp(work[row, j] - top)
            work[row, j] = p
            total += p
        if total == 0:
            total = f32(1)
        for j in range(skv):
            p = f32(0) if masked else work[row, j] / total
            work[row, j] = p
            if qk_mode == 3:
                qk.flat[row * skv + j] = p
        py = b * y_sb + h * y_sh + i * y_ss
        for e in range(dv):
            acc = f32(0)
            pv = (b * kv_heads + hk) * skv * dv + e
            for j in range(skv):
                acc += work[row, j] * f32(v.flat[pv + j * dv])
            y.flat[py + e] = acc


def _heads(x: TensorSpec, heads: Optional[int], what: str, op: str):
    """(heads, seq, head_size) of a 3-D (batch, seq, heads·size) or 4-D (batch, heads, seq, size) input."""
    if x.ndim == 4:
        return x.shape[1], x.shape[2], x.shape[3]
    if x.ndim != 3:
        raise VerifyError(f"{op} {what} must be 3-D (batch, seq, hidden) or 4-D (batch, heads, seq, size), got {x}")
    if not heads:
        raise VerifyError(f"{op} {what} is 3-D, so the {'q' if what == 'Q' else 'kv'}_num_heads attribute is needed")
    hidden = x.shape[2]
    if hidden is not None and hidden % heads:
        raise VerifyError(f"{op} {what} hidden size {hidden} is not a multiple of {heads} heads")
    return heads, x.shape[1], None if hidden is None else hidden // heads


@dsl.op("Attention", since=23)
class Attention(dsl.Op):
    """softmax(Q·Kᵀ·scale + bias)·V; see the module docstring."""

    is_causal: int = 0
    kv_num_heads: int = 0
    q_num_heads: int = 0
    qk_matmul_output_mode: int = 0
    scale: Optional[float] = None
    softcap: float = 0.0
    softmax_precision: int = 0
    left_window_size: int = -1
    right_window_size: int = -1
    kernels = {"default": attention_kernel}
    foldable = False

    def _dims(self, q, k, v, past_key=None):
        op = "Attention"
        if not (q.ndim == k.ndim == v.ndim):
            raise VerifyError(f"{op} Q, K and V must have one rank (3 or 4), got {q}, {k}, {v}")
        hq, sq, dq = _heads(q, self.q_num_heads, "Q", op)
        hk, skv, dk = _heads(k, self.kv_num_heads, "K", op)
        hv, _, dv = _heads(v, self.kv_num_heads, "V", op)
        if hq is not None and hk is not None and (hk == 0 or hq % hk):
            raise VerifyError(f"{op} query heads ({hq}) must be a multiple of key/value heads ({hk})")
        if dq is not None and dk is not None and dq != dk:
            raise VerifyError(f"{op} Q head size {dq} differs from K head size {dk}")
        past = 0 if past_key is None else past_key.shape[2]
        total = None if skv is None or past is None else skv + past
        return hq, sq, dq, hk, total, dv

    def verify(self, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        for name, t in (("Q", q), ("K", k), ("V", v)):
            if t.dtype not in FLOATS:
                raise VerifyError(f"Attention {name} must be a float tensor, got {t}")
        if q.dtype != k.dtype:
            raise VerifyError(f"Attention Q and K must share a dtype, got {q} and {k}")
        if (past_key is None) != (past_value is None):
            raise VerifyError("Attention past_key and past_value must be given together")
        if nonpad_kv_seqlen is not None and past_key is not None:
            raise VerifyError("Attention nonpad_kv_seqlen cannot be combined with past_key/past_value")
        if past_key is not None and past_key.ndim != 4:
            raise VerifyError(f"Attention past_key must be 4-D (batch, kv_heads, past, head_size), got {past_key}")
        if attn_mask is not None:
            if attn_mask.dtype != dsl.bool_ and attn_mask.dtype != q.dtype:
                raise VerifyError(f"Attention attn_mask must be bool or Q's dtype {q.dtype}, got {attn_mask}")
            if attn_mask.ndim > 4 or attn_mask.ndim < 1:
                raise VerifyError(f"Attention attn_mask must have rank 1 to 4, got {attn_mask}")
        if self.qk_matmul_output_mode not in (0, 1, 2, 3):
            raise VerifyError(f"Attention qk_matmul_output_mode {self.qk_matmul_output_mode} is not one of 0, 1, 2, 3")
        if self.left_window_size < -1 or self.right_window_size < -1:
            raise VerifyError("Attention left_window_size/right_window_size must be -1 or >= 0, got "
                              f"{self.left_window_size}/{self.right_window_size}")
        self._dims(q, k, v, past_key)

    def infer(self, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        hq, sq, dq, hk, total, dv = self._dims(q, k, v, past_key)
        batch = q.shape[0]
        y = (batch, sq, None if hq is None or dv is None else hq * dv) if q.ndim == 3 else (batch, hq, sq, dv)
        return (TensorSpec(y, q.dtype), TensorSpec((batch, hk, total, dq), k.dtype),
                TensorSpec((batch, hk, total, dv), v.dtype), TensorSpec((batch, hq, sq, total), q.dtype))

    def run(self, impl, inputs, outputs, backend):
        q, k, v = inputs[:3]
        mask, past_k, past_v, nonpad = (list(inputs[3:]) + [None] * 4)[:4]
        y, present_k, present_v, qk = outputs
        batch, hk, total, dq = present_k.shape
        dv = present_v.shape[3]
        hq, sq = qk.shape[1], qk.shape[2]
        past = 0 if past_k is None else past_k.shape[2]
        for x, past_x, present in ((k, past_k, present_k), (v, past_v, present_v)):
            d = present.shape[3]
            seq = x.shape[1] if x.ndim == 3 else x.shape[2]
            strides = (seq * hk * d, d, hk * d) if x.ndim == 3 else (hk * seq * d, seq * d, d)
            src = np.zeros(1, x.dtype) if past_x is None else past_x
            kv_concat_kernel(src, x, present, past, *strides, backend=backend)
        q_strides = (sq * hq * dq, dq, hq * dq) if q.ndim == 3 else (hq * sq * dq, sq * dq, dq)
        y_strides = (sq * hq * dv, dv, hq * dv) if y.ndim == 3 else (hq * sq * dv, sq * dv, dv)
        if mask is None:
            mode, mask4, mask_len = NO_MASK, np.zeros((1, 1, 1, 1), np.float32), total
        else:
            mode = BOOL_MASK if mask.dtype == np.bool_ else ADD_MASK
            mask4 = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
            mask_len = mask.shape[-1] if mask.shape[-1] > 1 else total
        nonpad_arr = np.zeros(1, np.int64) if nonpad is None else nonpad.reshape(-1)
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(dq)
        work = np.empty((batch * hq * sq, max(total, 1)), np.float32)
        qk_mode = self.qk_matmul_output_mode
        if qk_mode == 1 and not self.softcap:
            qk_mode = 0
        impl(q, present_k, present_v, mask4, nonpad_arr, y, qk, work, *q_strides, *y_strides, mode, mask_len,
             float(scale), float(self.softcap), bool(self.is_causal), past, nonpad is not None,
             int(self.left_window_size), int(self.right_window_size), qk_mode, backend=backend)

