"""Data formats: ``plain`` (row-major NCHW) and ``nchwc16`` (channel-blocked, PPL.NN's layout).

A 4-D tensor with logical shape (N, C, H, W) stored ``nchwc16`` is a C-contiguous array of
physical shape (N, ceil(C/16), H, W, 16): channel ``c`` lives at ``[n, c // 16, h, w, c % 16]``;
channels C..16*ceil(C/16)-1 are padding and hold zeros.  ``TensorSpec.shape`` stays logical;
kernels get the physical array.  This module holds the pure rules (physical shapes, numpy
references, the checks on ``Op.select_format``'s answer); reorder.py holds the kernels that
convert between formats.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from dsl.opgraph.spec import FORMATS, TensorSpec, describe

BLOCK = 16


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


# --------------------------------------------------------------------------- format selection

def normalize_choice(op, inputs: Sequence[Optional[TensorSpec]], n_out: int, choice,
                     out_specs: Sequence[TensorSpec]):
    """Validate ``op.select_format``'s answer -> (input formats, output formats)."""
    name = f"{describe(op)}.select_format"
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


def default_select_format(op, inputs: Sequence[Optional[TensorSpec]]):
    """Follow the producers: when the op lists nchwc16, every input is 4-D with one
    shape and some input already is nchwc16, run blocked; otherwise plain."""
    data = [s for s in inputs if s is not None]
    blocked = ("nchwc16" in type(op).formats and data and all(s.ndim == 4 for s in data)
               and len({s.shape for s in data}) == 1 and any(s.format == "nchwc16" for s in data))
    fmt = "nchwc16" if blocked else "plain"
    return tuple(None if s is None else fmt for s in inputs), fmt
