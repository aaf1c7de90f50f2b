"""The launch fast path: a small argument checker generated per kernel.

A launch whose argument dtypes and ranks were seen (and fully checked) before
only needs identity checks (and a memory-overlap test of its Out arguments, which
types cannot tell), so each kernel gets a generated function with the
kernel's own signature: Python binds the arguments natively and the body does
type/contiguity tests and scalar conversions inline.  ``Vec`` parameters pass
through when they already are what ``Kernel.bind`` would make of them (a writable
1-d array of the exact dtype and length: e.g. gemm_packed's geometry).  Anything
unusual makes it return None and ``Kernel.bind`` runs, so every error message comes
from one place.  This is what keeps launch overhead near a plain ``njit`` call.
"""
from __future__ import annotations

import inspect
from typing import Callable, Optional

import numpy as np

from dsl.lang import types as T

_INT_TYPES = (int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
_FLOAT_TYPES = _INT_TYPES + (float, np.float16, np.float32, np.float64)
_BOOL_TYPES = (bool, np.bool_)


def build(params) -> Optional[Callable]:
    """``fast(*args, **kwargs) -> (values, key) | None`` for these ParamDecls, or None if unsupported."""
    env = {"ndarray": np.ndarray, "MISSING": inspect.Parameter.empty}
    sig, body, values, key = [], [], [], []
    tensors = [p for p in params if p.kind == "tensor"]
    for p in params:
        if p.kind == "vec":  # bind converts anything else (lists, other dtypes) and checks each element
            env[f"V_{p.name}"] = np.dtype(p.annotation.dtype.np)
            env[f"D_{p.name}"] = p.default
            sig.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}=D_{p.name}")
            body.append(f"    if type({p.name}) is not ndarray or {p.name}.dtype != V_{p.name} or "
                        f"{p.name}.shape != ({p.annotation.length},) or not ({p.name}.flags.c_contiguous and "
                        f"{p.name}.flags.writeable): return None")
        elif p.kind == "scalar":
            ann = p.annotation.dtype if isinstance(p.annotation, T.ConstSpec) else p.annotation
            if not isinstance(ann, T.DType):
                return None  # TypeVar scalars: the slow path infers their dtype
            env[f"D_{p.name}"] = p.default
            sig.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}=D_{p.name}")
            accepted = _BOOL_TYPES if ann.is_bool else _INT_TYPES if ann.is_int else _FLOAT_TYPES
            env[f"A_{p.name}"] = frozenset(accepted)
            env[f"C_{p.name}"] = np.float32 if ann.is_storage_only else ann.np.type
            body.append(f"    if type({p.name}) not in A_{p.name}: return None")
            if ann.is_int:  # numpy raises OverflowError for out-of-range Python ints
                body.append(f"    if type({p.name}) is not int and not C_{p.name}({p.name}) == {p.name}: return None")
            body.append(f"    {p.name} = C_{p.name}({p.name})")
            if isinstance(p.annotation, T.ConstSpec):
                key.append(f"{p.name}.item()")
        else:
            sig.append(p.name)
        values.append(p.name)
    if not tensors:
        return None
    # a required parameter after a defaulted one (dsl.grad appends grad_<name> tensors after the
    # forward's scalars): Python forbids that order, so it defaults to MISSING and falls back
    defaulted = False
    for k, text in enumerate(sig):
        if "=" in text:
            defaulted = True
        elif defaulted:
            sig[k] = f"{text}=MISSING"
            body.insert(0, f"    if {text} is MISSING: return None")
    checks = " or ".join(f"type({p.name}) is not ndarray" for p in tensors)
    flags = " and ".join(f"{p.name}.flags.c_contiguous" + (f" and {p.name}.flags.writeable" if p.annotation.writable
                                                           else "") for p in tensors)
    key = [f"{p.name}.dtype, {p.name}.ndim" for p in tensors] + key
    # aliasing is a property of these very arrays, not of their types: test it on every launch
    env["shares"] = np.may_share_memory
    pairs = [f"shares({p.name}, {q.name})" for i, p in enumerate(tensors) for q in tensors[i + 1:]
             if p.annotation.writable or q.annotation.writable]
    src = "\n".join([f"def fast({', '.join(sig)}):",
                     f"    if {checks}: return None",
                     f"    if not ({flags}): return None",
                     *([f"    if {' or '.join(pairs)}: return None"] if pairs else []),
                     *body,
                     f"    return [{', '.join(values)}], ({', '.join(key)},)"])
    exec(compile(src, "<opdsl fast launch>", "exec"), env)
    return env["fast"]
