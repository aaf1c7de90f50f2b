"""Reorders between data formats (formats.py): the kernels that convert plain <-> nchwc16, the
``Reorder`` op the compiler inserts where a producer and a consumer disagree, and the launch
that re-zeroes nchwc16 padding after an op that does not promise to keep it (sigmoid(0) is
not 0).  Where reorders go is decided in passes.py (``assign_formats``).
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl.lang.types import In, InOut, Out, TypeVar, i64
from dsl.onnx.lower import names, register
from dsl.opgraph.formats import BLOCK
from dsl.opgraph.op import Op
from dsl.opgraph.spec import FORMATS

T = TypeVar("T")


# --------------------------------------------------------------------------- reorder kernels

@dsl.kernel
def plain_to_nchwc16(x: In[T, 4], y: Out[T, 5]):
    """Scatter NCHW into blocks of 16 channels; padding channels get 0."""
    lo, hi = dsl.split(y.size)
    c_total = x.shape[1]
    nb = y.shape[1]
    h = y.shape[2]
    w = y.shape[3]
    for i in range(lo, hi):
        lane = i % 16
        r = i // 16
        col = r % w
        r = r // w
        row = r % h
        r = r // h
        blk = r % nb
        n = r // nb
        c = blk * 16 + lane
        if c < c_total:
            y.flat[i] = x[n, c, row, col]
        else:
            y.flat[i] = 0


@dsl.kernel
def nchwc16_to_plain(x: In[T, 5], y: Out[T, 4]):
    """Gather blocks of 16 channels back to NCHW, dropping the padding."""
    lo, hi = dsl.split(y.size)
    c_total = y.shape[1]
    h = y.shape[2]
    w = y.shape[3]
    for i in range(lo, hi):
        col = i % w
        r = i // w
        row = r % h
        r = r // h
        c = r % c_total
        n = r // c_total
        y.flat[i] = x[n, c // 16, row, col, c % 16]


@dsl.kernel
def zero_padding(y: InOut[T, 5], channels: i64):
    """Write 0 into the padding channels (>= channels) of the last block."""
    nb = y.shape[1]
    h = y.shape[2]
    w = y.shape[3]
    pad = nb * 16 - channels
    lo, hi = dsl.split(y.shape[0] * h * w * pad)
    for i in range(lo, hi):
        lane = channels % 16 + i % pad
        r = i // pad
        col = r % w
        r = r // w
        row = r % h
        n = r // h
        y[n, nb - 1, row, col, lane] = 0


class Reorder(Op):
    """Inserted by the compiler: converts a tensor to format ``to``.  Not registered
    (it never appears in a user graph or an ONNX file)."""

    op_type = "Reorder"
    domain = "com.opdsl"
    to: str = "plain"
    formats = FORMATS
    keeps_padding = True
    keeps_quant = True  # the same values in another layout

    def infer(self, x):
        return x.spec.with_(format=self.to)

    def select_format(self, x):
        return ("nchwc16" if self.to == "plain" else "plain",), (self.to,)

    def select(self, x, backend):
        return self.to

    kernels = {"nchwc16": plain_to_nchwc16, "plain": nchwc16_to_plain}


def fix_padding(y: np.ndarray, channels: int, backend: str) -> None:
    if channels % BLOCK:
        zero_padding(y, channels, backend=backend)


# --------------------------------------------------------------------------- the standard ONNX form

@register("com.opdsl", "Reorder", everywhere=True)
def _reorder(node, opset, emit) -> bool:
    """A format change (plain <-> nchwc16) keeps the logical values: Identity."""
    (x,), _, (y,) = names(node)
    emit("Identity", [x], [y])
    return True
