"""ONNX TensorScatter (opset 24): write a KV-cache update into a fixed-size cache along the
sequence ``axis``, at each batch entry's ``write_indices`` (0 when absent), either ``linear``
(the update must fit before max_sequence_length) or ``circular`` (positions wrap).

The kernel makes one output element per step: the cache viewed as (outer, max_seq, inner),
an element takes the update's value when its sequence position falls in the written window
of its batch entry, else the past cache's (so the output may share past_cache's buffer).
"""
from __future__ import annotations

import math

import numpy as np

import dsl
from dsl import In, Out, bool_, i64
from dsl.opgraph.spec import VerifyError
from ops.elementwise import FLOATS, INTEGERS

T = dsl.TypeVar("T")
MODES = ("linear", "circular")


@dsl.kernel
def tensor_scatter_kernel(past: In[T, 3], update: In[T, 3], write: In[i64], y: Out[T, 3], per_batch: i64,
                          circular: bool_):
    """y[o, s, k] = update[o, s - w, k] when s - w (mod max_seq if circular) < seq, else past[o, s, k];
    w = write[o // per_batch]."""
    max_seq = past.shape[1]
    seq = update.shape[1]
    inner = past.shape[2]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        k = i % inner
        s = (i // inner) % max_seq
        o = i // (inner * max_seq)
        d = s - write[o // per_batch]
        if circular:
            d = d % max_seq
        if d >= 0 and d < seq:
            y.flat[i] = update[o, d, k]
        else:
            y.flat[i] = past.flat[i]


@dsl.op("TensorScatter", since=24)
class TensorScatter(dsl.Op):
    """past_cache (B, ..., max_seq, ..., Dn), update (B, ..., seq, ..., Dn), optional
    write_indices (B,) i64 -> present_cache shaped like past_cache."""
    mode: str = "linear"
    axis: int = -2
    inplace = {0: 0}
    replay = False  # run() range-checks write_indices at every run
    kernels = {"default": tensor_scatter_kernel}

    def _axis(self, ndim: int) -> int:
        if not -ndim <= self.axis < ndim or self.axis % ndim == 0:
            raise VerifyError(f"TensorScatter axis {self.axis} must name a sequence axis of the rank-{ndim} cache "
                              f"other than the batch axis 0 (accepted: 1..{ndim - 1} or {-ndim + 1}..-1)")
        return self.axis % ndim

    def verify(self, past, update, write_indices=None):
        if past.dtype not in INTEGERS + FLOATS + (dsl.bool_,):
            raise VerifyError(f"TensorScatter past_cache dtype {past.dtype} is not supported")
        if update.dtype != past.dtype:
            raise VerifyError(f"TensorScatter update must have past_cache's dtype {past.dtype}, got {update}")
        if self.mode not in MODES:
            raise VerifyError(f"TensorScatter mode {self.mode!r} is not one of {', '.join(MODES)}")
        if past.ndim < 2 or update.ndim != past.ndim:
            raise VerifyError(f"TensorScatter past_cache (rank >= 2) and update need the same rank, got "
                              f"{past} and {update}")
        axis = self._axis(past.ndim)
        for a, (p, u) in enumerate(zip(past.shape, update.shape)):
            if p is None or u is None:
                continue
            if a != axis and p != u or a == axis and u > p:
                raise VerifyError(f"TensorScatter update {update} does not fit past_cache {past} at axis {a}: "
                                  f"shapes must match except along axis {axis}, where update's may be smaller")
        if write_indices is not None:
            if write_indices.dtype != dsl.i64 or write_indices.ndim != 1 or \
                    None not in (write_indices.shape[0], past.shape[0]) and write_indices.shape[0] != past.shape[0]:
                raise VerifyError(f"TensorScatter write_indices must be i64 (batch,) = ({past.shape[0]},), "
                                  f"got {write_indices}")

    def infer(self, past, update, write_indices=None):
        return past.with_()

    def run(self, impl, inputs, outputs, backend):
        past, update = inputs[:2]
        write = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        axis = self._axis(past.ndim)
        outer = math.prod(past.shape[:axis])
        inner = math.prod(past.shape[axis + 1:])
        if write is None:
            write = np.zeros((past.shape[0],), np.int64)  # every entry writes from position 0
        elif write.size and (write.min() < 0 or self.mode == "linear"
                             and write.max() + update.shape[axis] > past.shape[axis]):
            limit = past.shape[axis] - update.shape[axis] if self.mode == "linear" else None
            accepted = f"[0, {limit}] (linear: the update of length {update.shape[axis]} must fit in " \
                       f"{past.shape[axis]})" if limit is not None else ">= 0"
            raise VerifyError(f"TensorScatter write_indices {write.tolist()} out of range; accepted: {accepted}")
        if outputs[0].size == 0:
            return
        impl(past.reshape(outer, past.shape[axis], inner), update.reshape(outer, update.shape[axis], inner), write,
             outputs[0].reshape(outer, past.shape[axis], inner), per_batch=outer // past.shape[0],
             circular=self.mode == "circular", backend=backend)

