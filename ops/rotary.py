"""ONNX RotaryEmbedding (opset 23): rotary position embedding of transformer heads.

Each element of the first ``rotary_embedding_dim`` features of a head is one half of a
rotated pair -- (x[p], x[p + dim/2]) by default, (x[2p], x[2p + 1]) when ``interleaved`` --
turned by the angle whose cos/sin the caches hold for the token's position: the row
``position_ids[b, s]`` of a (max_position, dim/2) cache, or row (b, s) of a
(batch, seq, dim/2) cache.  Features past the rotary dim pass through.  One element per work
item, read in place for 4-D (batch, heads, seq, head) and 3-D (batch, seq, heads·head) input.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, bool_, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS

T = dsl.TypeVar("T")


@dsl.kernel
def rotary_kernel(x: In[T], cos: In[T, 2], sin: In[T, 2], pos: In[i64, 2], y: Out[T], heads: i64, seq: i64,
                  rot: i64, interleaved: bool_, has_pos: bool_, heads_first: bool_):
    head = x.size // (x.shape[0] * heads * seq)
    half = rot // 2
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        d = i % head
        r = i // head
        s = r % seq
        if not heads_first:  # (batch, seq, heads, head)
            s = r // heads % seq
        b = r // (seq * heads)
        if d >= rot:
            y.flat[i] = x.flat[i]
        else:
            base = i - d
            p = d % half
            second = d >= half
            i1 = base + p
            i2 = base + p + half
            if interleaved:
                p = d // 2
                second = d % 2 == 1
                i1 = base + 2 * p
                i2 = i1 + 1
            row = b * seq + s
            if has_pos:
                row = pos[b, s]
            c = cos[row, p]
            sn = sin[row, p]
            x1 = x.flat[i1]
            x2 = x.flat[i2]
            y.flat[i] = sn * x1 + c * x2 if second else c * x1 - sn * x2


@dsl.op("RotaryEmbedding", since=23)
class RotaryEmbedding(dsl.Op):
    """See the module docstring; ``num_heads`` is needed for 3-D input."""

    interleaved: int = 0
    rotary_embedding_dim: int = 0
    num_heads: int = 0
    kernels = {"default": rotary_kernel}
    replay = False  # position_ids are range-checked at every run

    def _layout(self, x):
        if x.ndim == 4:
            return x.shape[1], x.shape[2], x.shape[3]
        if x.ndim != 3:
            raise VerifyError(f"RotaryEmbedding input must be 4-D (batch, heads, seq, head) or 3-D (batch, seq, "
                              f"hidden), got {x}")
        if not self.num_heads:
            raise VerifyError("RotaryEmbedding with 3-D input needs the num_heads attribute")
        hidden = x.shape[2]
        if hidden is not None and hidden % self.num_heads:
            raise VerifyError(f"RotaryEmbedding hidden size {hidden} is not a multiple of num_heads {self.num_heads}")
        return self.num_heads, x.shape[1], None if hidden is None else hidden // self.num_heads

    def verify(self, x, cos_cache, sin_cache, position_ids=None):
        if x.dtype not in FLOATS or cos_cache.dtype != x.dtype or sin_cache.dtype != x.dtype:
            raise VerifyError(f"RotaryEmbedding input and caches must share a float dtype, got {x}, {cos_cache}, "
                              f"{sin_cache}")
        heads, seq, head = self._layout(x)
        rot = self.rotary_embedding_dim or head
        if head is not None and (rot > head or rot % 2):
            raise VerifyError(f"RotaryEmbedding rotary_embedding_dim {rot} must be even and <= the head size {head}")
        want = 2 if position_ids is not None else 3
        for name, c in (("cos_cache", cos_cache), ("sin_cache", sin_cache)):
            if c.ndim != want:
                raise VerifyError(f"RotaryEmbedding {name} must be {'(max_position, dim/2)' if want == 2 else '(batch, seq, dim/2)'}"
                                  f" {'with' if want == 2 else 'without'} position_ids, got {c}")
            if rot is not None and c.shape[-1] not in (None, rot // 2):
                raise VerifyError(f"RotaryEmbedding {name} last dim must be rotary_embedding_dim/2 = {rot // 2}, got {c}")
        if position_ids is not None and (position_ids.dtype != dsl.i64 or position_ids.ndim != 2):
            raise VerifyError(f"RotaryEmbedding position_ids must be i64 (batch, seq), got {position_ids}")

    def infer(self, x, cos_cache, sin_cache, position_ids=None):
        return TensorSpec(x.shape, x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, cos, sin = inputs[:3]
        pos = inputs[3] if len(inputs) > 3 else None
        heads, seq, head = (x.shape[1], x.shape[2], x.shape[3]) if x.ndim == 4 else \
            (self.num_heads, x.shape[1], x.shape[2] // self.num_heads)
        rot = self.rotary_embedding_dim or head
        if pos is not None and pos.size and (pos.min() < 0 or pos.max() >= cos.shape[0]):
            raise ValueError(f"RotaryEmbedding position_ids must lie in [0, {cos.shape[0]}) (the caches' rows), "
                             f"got values {pos.min()}..{pos.max()}")
        cos2 = cos.reshape(-1, cos.shape[-1])
        sin2 = sin.reshape(-1, sin.shape[-1])
        impl(x, cos2, sin2, np.zeros((1, 1), np.int64) if pos is None else pos, outputs[0], heads, seq, rot,
             bool(self.interleaved), pos is not None, x.ndim == 4, backend=backend)
