"""Data formats (PPL.NN): ``plain`` (row-major NCHW) and ``nchwc16`` (channel-blocked).

A 4-D tensor with logical shape (N, C, H, W) stored ``nchwc16`` is a C-contiguous
array of physical shape (N, ceil(C/16), H, W, 16): channel ``c`` lives at
``[n, c // 16, h, w, c % 16]``; channels C..16*ceil(C/16)-1 are padding and hold
zeros.  ``TensorSpec.shape`` stays logical; kernels get the physical array.

Ops say which formats they take (``Op.formats``) and pick per node with
``Op.select_format``; dsl/passes.py inserts ``Reorder`` nodes where producer and
consumer disagree, reuses one reorder per (tensor, format), cancels a reorder
that would undo the one that produced a tensor, and reorders graph outputs back
to plain.  A node whose op does not declare ``keeps_padding = True`` and writes an
nchwc16 output whose C is not a multiple of 16 is followed by a launch of
``zero_padding`` so the zero invariant holds whatever the op computes (sigmoid(0)
is not 0).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl.op import FORMATS, Op, TensorSpec
from dsl.lang.types import In, InOut, Out, TypeVar, i64

BLOCK = 16
T = TypeVar("T")


def physical_shape(shape: Tuple[int, ...], fmt: str) -> Tuple[int, ...]:
    """The array shape a tensor of logical ``shape`` has when stored in ``fmt``."""
    if fmt == "plain":
        return tuple(shape)
    if fmt == "nchwc16":
        if len(shape) != 4:
            raise ValueError(f"nchwc16 stores 4-D (N, C, H, W) tensors, got shape {shape}")
        n, c, h, w = shape
        return (n, -(-c // BLOCK), h, w, BLOCK)
    raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")


def needs_padding_fix(spec: TensorSpec) -> bool:
    return spec.format == "nchwc16" and spec.shape[1] is not None and spec.shape[1] % BLOCK != 0


# --------------------------------------------------------------------------- numpy references

def to_nchwc16_ref(x: np.ndarray) -> np.ndarray:
    """numpy reference of the plain -> nchwc16 reorder (tests, docs)."""
    n, c, h, w = x.shape
    cb = -(-c // BLOCK)
    padded = np.zeros((n, cb * BLOCK, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cb, BLOCK, h, w).transpose(0, 1, 3, 4, 2))


def to_plain_ref(y: np.ndarray, channels: int) -> np.ndarray:
    n, cb, h, w, b = y.shape
    return np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)[:, :channels])


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


# --------------------------------------------------------------------------- format selection

def normalize_choice(op: Op, inputs: Sequence[Optional[TensorSpec]], n_out: int, choice,
                     out_specs: Sequence[TensorSpec]):
    """Validate ``op.select_format``'s answer -> (input formats, output formats)."""
    name = f"{op.domain + '::' if op.domain else ''}{op.op_type}.select_format"
    try:
        ins, outs = choice
    except (TypeError, ValueError):
        raise TypeError(f"{name} must return (input formats, output formats), got {choice!r}") from None
    ins = tuple(ins)
    if len(ins) != len(inputs):
        raise TypeError(f"{name} returned {len(ins)} input formats for {len(inputs)} inputs")
    outs = (outs,) * n_out if isinstance(outs, str) else tuple(outs)
    if len(outs) != n_out:
        raise TypeError(f"{name} returned {len(outs)} output formats for {n_out} outputs")
    allowed = tuple(type(op).formats) + ("plain",)
    fixed_in = []
    for spec, f in zip(inputs, ins):
        if spec is None:
            fixed_in.append(None)
            continue
        f = f or "plain"
        _check_format(name, f, spec, allowed)
        fixed_in.append(f)
    fixed_out = []
    for spec, f in zip(out_specs, outs):
        f = f or "plain"
        if spec.ndim != 4:
            f = "plain"
        _check_format(name, f, spec, allowed)
        fixed_out.append(f)
    return tuple(fixed_in), tuple(fixed_out)


def _check_format(name, f, spec, allowed):
    if f not in FORMATS:
        raise ValueError(f"{name}: unknown format {f!r}; known: {', '.join(FORMATS)}")
    if f not in allowed:
        raise ValueError(f"{name}: format {f!r} is not in the op's formats {allowed}")
    if f == "nchwc16" and spec.ndim != 4:
        raise ValueError(f"{name}: nchwc16 needs a 4-D tensor, got {spec}")


def default_select_format(op: Op, inputs: Sequence[Optional[TensorSpec]]):
    """Follow the producers: when the op lists nchwc16, every input is 4-D with one
    shape and some input already is nchwc16, run blocked; otherwise plain."""
    data = [s for s in inputs if s is not None]
    blocked = ("nchwc16" in type(op).formats and data and all(s.ndim == 4 for s in data)
               and len({s.shape for s in data}) == 1 and any(s.format == "nchwc16" for s in data))
    fmt = "nchwc16" if blocked else "plain"
    return tuple(None if s is None else fmt for s in inputs), fmt
