"""Arithmetic every emitter spells the same way, whatever the target language: row-major
offsets of an index into a buffer, and the classification of float constants that have no
decimal literal (NaN, infinities).  (Saturation ranges of float-to-int conversions are a
language fact: ``dsl.lang.types.int_range``.)

Emitters pass already-spelled operands (strings) and get strings back, so the offsets in
numba's Python and in C read alike: ``(i * n1 + j) * n2 + k``.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence


def row_major(index: Sequence[str], dims: Sequence[str]) -> str:
    """The flat offset of ``index`` in a C-contiguous buffer whose extents are ``dims`` (Horner's
    rule, so it needs no strides: ``(i0 * d1 + i1) * d2 + i2``).  ``dims[0]`` is not used."""
    if not index:
        return "0"
    code = index[0]
    for d in range(1, len(index)):
        code = f"({code}) * {dims[d]} + {index[d]}" if d > 1 else f"{code} * {dims[d]} + {index[d]}"
    return code


def strides(shape: Sequence[int]) -> List[int]:
    """Row-major element strides of a buffer with a compile-time ``shape``."""
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def row_major_static(index: Sequence[str], shape: Sequence[int]) -> str:
    """The flat offset of ``index`` into a buffer of compile-time ``shape``: ``i0 * 12 + i1 * 4 + i2``."""
    if not index:
        return "0"
    return " + ".join(i if s == 1 else f"{i} * {s}" for i, s in zip(index, strides(shape)))


def special_float(value: float) -> Optional[str]:
    """'nan', 'inf' or '-inf' for the constants no decimal literal spells, else None."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return None
