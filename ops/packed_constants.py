"""Work done once per constant array: packed weight panels kept while the weights live.

A graph's constants are read-only all the way down, so a GEMM or convolution may pack them once
and reuse the packed copy at every call.  The copy is keyed by the array's root (the array every
view of it comes from), held through a weak reference so it goes when the weights go, and by
what the caller's layout depends on (shape, strides, tile, zero points).  Any other array is
packed at every call: someone may change its values between calls.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Hashable

import numpy as np

from dsl.opgraph.launch_plan import owner

_KEPT: dict = {}  # id(root array) -> (weakref to it, {key: what make() returned})


def immutable(x: np.ndarray) -> bool:
    """Whether no one can change x's values: it and every array it views are read-only (graph
    constants are; a read-only view of a writable array is not)."""
    while isinstance(x, np.ndarray):
        if x.flags.writeable:
            return False
        x = x.base
    return True


def once_per_array(x: np.ndarray, key: Hashable, make: Callable[[], Any]) -> Any:
    """``make()`` for ``x`` and ``key``, computed once while x's root lives.  The caller decides
    that ``x`` is constant (``immutable``); ``key`` must hold x's address, shape, strides and dtype
    (two views of one root are different arrays) and whatever else the result depends on."""
    base = owner(x)
    hit = _KEPT.get(id(base))
    if hit is not None and hit[0]() is base and key in hit[1]:
        return hit[1][key]
    made = make()
    if hit is None or hit[0]() is not base:
        try:
            hit = (weakref.ref(base, lambda _, k=id(base), drop=_KEPT.pop: drop(k, None)), {})
        except TypeError:  # not weak-referenceable: made again at every call
            return made
        _KEPT[id(base)] = hit
    hit[1][key] = made
    return made


def view_key(x: np.ndarray) -> tuple:
    """What tells two views of one root apart: address, shape, strides and dtype."""
    return (x.__array_interface__["data"][0], x.shape, x.strides, x.dtype.str)
