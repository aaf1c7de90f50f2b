"""FlexAttention (ai.onnx.preview, opset 1): scaled dot-product attention over rank-4
(batch, heads, seq, head_size) tensors with grouped K/V heads and two optional modifier
subgraphs, as PyTorch's flex_attention: ``score_mod`` rewrites the (B, Hq, L, S) scores
before the softmax (masks, biases, soft caps), ``prob_mod`` the probabilities after it.

The modifiers are bodies (``dsl.opgraph.body.Body``, imported like If/Loop bodies by
dsl/onnx/subgraph.py): one formal input, the scores/probabilities in the softmax precision
(``softmax_precision``, by default f32 for f16/bf16/f32 inputs and f64 for f64), then the outer
values they capture, which the importer appends to the node's inputs (score_mod's first).
``flex_kernel`` works on whole query rows in three phases -- scores (Q·Kᵀ·scale, summed in
f64), softmax, probabilities·V -- and one launch runs every phase no modifier separates, so
an unmodified FlexAttention is a single launch.
"""
from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

import dsl
from dsl import In, InOut, Out, bool_, f64
from dsl.opgraph.body import Body
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS
from ops.quant import ONNX_DTYPES

T = dsl.TypeVar("T")
C = dsl.TypeVar("C")
DOMAIN = "ai.onnx.preview"


@dsl.kernel
def flex_kernel(q: In[T, 4], k: In[T, 4], v: In[T, 4], s: InOut[C, 4], y: Out[T, 4], scale: f64,
                scores: bool_, softmax: bool_, output: bool_):
    """Per query row (b, h, i), K/V head h // (Hq / Hkv): the phases that are switched on."""
    hq = q.shape[1]
    seq_q = q.shape[2]
    e_n = q.shape[3]
    group = hq // k.shape[1]
    seq_k = k.shape[2]
    ev_n = v.shape[3]
    lo, hi = dsl.split(q.shape[0] * hq * seq_q)
    for row in range(lo, hi):
        i = row % seq_q
        h = (row // seq_q) % hq
        b = row // (seq_q * hq)
        hk = h // group
        base = row * seq_k
        if scores:
            for j in range(seq_k):
                acc = f64(0)
                for e in range(e_n):
                    acc += f64(q[b, h, i, e]) * f64(k[b, hk, j, e])
                s.flat[base + j] = acc * scale
        if softmax and seq_k > 0:
            top = f64(s.flat[base])
            for j in range(1, seq_k):
                top = max(top, f64(s.flat[base + j]))
            total = f64(0)
            for j in range(seq_k):
                p = dsl.exp(f64(s.flat[base + j]) - top)
                s.flat[base + j] = p
                total += f64(s.flat[base + j])
            for j in range(seq_k):
                s.flat[base + j] = f64(s.flat[base + j]) / total
        if output:
            for e in range(ev_n):
                acc = f64(0)
                for j in range(seq_k):
                    acc += f64(s.flat[base + j]) * f64(v[b, hk, j, e])
                y[b, h, i, e] = acc


def softmax_dtype(q_dtype, precision: Optional[int]) -> dsl.DType:
    """The dtype scores and probabilities are kept in (and modifier bodies see)."""
    if precision is not None:
        dt = ONNX_DTYPES.get(precision)
        if dt not in FLOATS:
            raise VerifyError(f"FlexAttention softmax_precision {precision} is not a float type; accepted: "
                              f"1 (f32), 10 (f16), 16 (bf16), 11 (f64)")
        return dt
    return dsl.f64 if q_dtype == dsl.f64 else dsl.f32


@dsl.op("FlexAttention", domain=DOMAIN, since=1)
class FlexAttention(dsl.Op):
    """Q (B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, S, Ev) -> Y (B, Hq, L, Ev); Hq a multiple
    of Hkv; ``scale`` defaults to 1/√E.  Inputs after V are the modifiers' captured values."""
    score_mod: Optional[Body] = None
    prob_mod: Optional[Body] = None
    scale: Optional[float] = None
    softmax_precision: Optional[int] = None
    kernels = {"default": flex_kernel}
    replay = False  # run() evaluates the modifier bodies

    @classmethod
    def body_formals(cls, attr: str, attrs: dict, specs) -> List[TensorSpec]:
        """Each modifier takes the (B, Hq, L, S) scores/probabilities in the softmax precision."""
        q, k = specs[0], specs[1]
        if q is None or k is None or q.ndim != 4 or k.ndim != 4:
            raise VerifyError(f"FlexAttention Q and K must be rank 4, got {q} and {k}")
        return [TensorSpec((q.shape[0], q.shape[1], q.shape[2], k.shape[2]),
                           softmax_dtype(q.dtype, attrs.get("softmax_precision")))]

    @classmethod
    def relax(cls, attr, attrs, formals, outs):
        return formals

    @classmethod
    def never_run(cls, specs):
        return {}

    def _captures(self, captures):
        n = self.score_mod.n_captures if self.score_mod is not None else 0
        return list(captures[:n]), list(captures[n:])

    def verify(self, q, k, v, *captures):
        for name, t in (("Q", q), ("K", k), ("V", v)):
            if t.dtype not in FLOATS or t.ndim != 4:
                raise VerifyError(f"FlexAttention {name} must be a rank-4 float tensor "
                                  f"(batch, heads, seq, head_size), got {t}")
        if k.dtype != q.dtype or v.dtype != q.dtype:
            raise VerifyError(f"FlexAttention Q, K and V need one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")

        def differ(a, b):
            return a is not None and b is not None and a != b
        if differ(q.shape[3], k.shape[3]) or differ(k.shape[2], v.shape[2]) or differ(k.shape[1], v.shape[1]) \
                or differ(q.shape[0], k.shape[0]) or differ(k.shape[0], v.shape[0]):
            raise VerifyError(f"FlexAttention shapes do not fit: Q {q.shape}, K {k.shape}, V {v.shape}; accepted: "
                              f"Q (B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, S, Ev)")
        if None not in (q.shape[1], k.shape[1]) and (k.shape[1] == 0 or q.shape[1] % k.shape[1]):
            raise VerifyError(f"FlexAttention q_num_heads {q.shape[1]} must be a multiple of kv_num_heads {k.shape[1]}")
        want = self.body_formals("", {"softmax_precision": self.softmax_precision}, [q, k])[0]
        n = sum(b.n_captures for b in (self.score_mod, self.prob_mod) if b is not None)
        if len(captures) != n:
            raise VerifyError(f"FlexAttention takes Q, K, V and the {n} values its modifiers capture, "
                              f"got {3 + len(captures)} inputs")
        for name, body in (("score_mod", self.score_mod), ("prob_mod", self.prob_mod)):
            if body is None:
                continue
            outs = body.output_specs
            if body.n_formal != 1 or len(outs) != 1:
                raise VerifyError(f"FlexAttention {name} must take one tensor and give one, its graph takes "
                                  f"{body.n_formal} and gives {len(outs)}")
            if outs[0].dtype != want.dtype or outs[0].ndim != 4:
                raise VerifyError(f"FlexAttention {name} must give a rank-4 {want.dtype} tensor shaped like its "
                                  f"input {want}, gives {outs[0]}")

    def infer(self, q, k, v, *captures):
        return TensorSpec((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), v.dtype)

    def run(self, impl, inputs, outputs, backend):
        q, k, v = inputs[:3]
        score_caps, prob_caps = self._captures(inputs[3:])
        y = outputs[0]
        dt = softmax_dtype(TensorSpec.of(q).dtype, self.softmax_precision)
        shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        s = np.empty(shape, dt.np)
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(q.shape[3])

        def launch(scores, softmax, output):
            impl(q, k, v, s, y, scale=float(scale), scores=scores, softmax=softmax, output=output, backend=backend)

        def modify(name, body, caps):
            out = body.run(backend, [s], caps)[0]
            if out.shape != shape or out.dtype != s.dtype:
                raise VerifyError(f"FlexAttention {name} gave {out.dtype}{out.shape}; it must keep its input's "
                                  f"{s.dtype}{shape}")
            np.copyto(s, out)

        if y.size == 0 and s.size == 0:
            return
        launch(True, self.score_mod is None, self.score_mod is None and self.prob_mod is None)
        if self.score_mod is not None:
            modify("score_mod", self.score_mod, score_caps)
            launch(False, True, self.prob_mod is None)
        if self.prob_mod is not None:
            modify("prob_mod", self.prob_mod, prob_caps)
            launch(False, False, True)

