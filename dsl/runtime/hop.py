"""One hop from ``kernel(...)`` to machine code: a binder generated per kernel specialization.

A steady-state launch used to cross five Python frames (``Kernel.__call__``, the fast path's
checker, the launcher, its entry choice, ``_run``): ~3.5 us against ~0.25 us for a bare
``njit`` call (issue 28).  Once a small launch has run through them, the kernel generates
``hop``: a function with the kernel's own positional parameters that re-checks exactly what the
fast path checks (array types, dtype, rank, C-contiguity, writable outputs, overlap of outputs,
scalar types and their conversion), adds up the tensors' sizes, arms Ctrl-C and calls the
serial entry's machine code (``Launcher.direct_entry``).  Anything else -- another dtype or
rank, a launch big enough for the parallel entry, keyword arguments, a ``grid=`` or
``backend=`` -- returns False before any work, and the usual path runs (and raises its errors:
every message comes from ``Kernel.bind``).  The values reach the entry point only after those
checks, so they have exactly its compiled types.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np

from backends import interrupt
from dsl.lang import types as T
from dsl.runtime.fastpath import _FLOAT_TYPES, _INT_TYPES, _BOOL_TYPES


def build(params, values: Sequence, entry) -> Optional[Callable[..., bool]]:
    """``hop(*args) -> bool`` (True: launched) for launches whose tensors have the dtypes and
    ranks of ``values`` (the checked values of a launch that just ran), or None when a kernel's
    parameters need what only the full path does (Vec, ConstSpec or TypeVar scalars, f16 bits).
    ``entry``: the launcher's ``backends.base.DirectEntry``."""
    env = {"ndarray": np.ndarray, "shares": np.may_share_memory, "arm": interrupt.arm,
           "READ": memoryview(interrupt.COUNTER), "ENTRY": entry.fn, "COUNTER": entry.counter,
           "GRID": entry.grid, "LIMIT": entry.max_elements, "Interrupt": KeyboardInterrupt}
    sig, checks, flags, body, tensors = [], [], [], [], []
    for k, (p, v) in enumerate(zip(params, values)):
        name = f"a{k}"  # positional only: a parameter's own name could be one the binder uses
        if p.kind == "tensor":
            dt = p.annotation.dtype  # a DType, or a TypeVar (In[T]) that this launch bound to v's dtype
            if type(v) is not np.ndarray or v.dtype.kind not in "biuf" or v.dtype == np.float16 or (
                    isinstance(dt, T.DType) and v.dtype != np.dtype(dt.np)):
                return None  # f16/bf16 travel as their bits: the launcher converts them
            env[f"T_{name}"] = v.dtype
            tensors.append((name, p))
            checks.append(f"type({name}) is not ndarray or {name}.dtype is not T_{name} or {name}.ndim != {v.ndim}")
            flags += [f"    _f = {name}.flags",
                      f"    if not (_f.c_contiguous{' and _f.writeable' if p.annotation.writable else ''}): return False"]
        elif p.kind == "scalar" and isinstance(p.annotation, T.DType) and not p.annotation.is_storage_only:
            body += _scalar(name, p.annotation, env)
        else:
            return None  # Vec, ConstSpec, TypeVar and f16 scalar parameters: the full path binds them
        sig.append(name)
    if not tensors or len(values) != len(params):
        return None
    # distinct arrays that own their memory (base None) cannot overlap; views get numpy's exact test
    pairs = [f"({a}.base is not None or {b}.base is not None or {a} is {b}) and shares({a}, {b})"
             for i, (a, pa) in enumerate(tensors) for b, pb in tensors[i + 1:]
             if pa.annotation.writable or pb.annotation.writable]
    size = " + ".join(f"{a}.size" for a, _ in tensors)
    src = "\n".join([f"def hop({', '.join(sig)}):",
                     f'    """One checked launch of {len(tensors)} tensor(s) straight to the serial entry."""',
                     f"    if {' or '.join(checks)}: return False",
                     *flags,
                     f"    if {size} >= LIMIT: return False",
                     *[f"    if {pair}: return False" for pair in pairs],
                     *body,
                     "    _start = arm()",
                     f"    ENTRY({', '.join(sig)}, GRID, COUNTER, _start)",
                     "    if READ[0] != _start: raise Interrupt('opdsl launch interrupted')",
                     "    return True"])
    exec(compile(src, "<opdsl one-hop launch>", "exec"), env)
    hop = env["hop"]
    hop.arity = len(sig)
    return hop


def _scalar(name: str, ann: T.DType, env: dict) -> List[str]:
    """The lines checking and converting scalar ``name`` as the fast path does.  The entry point
    unboxes a Python float itself (rounding to f32 once, as numpy does) and a Python int in the
    parameter's range exactly, so those pass unconverted; other types are converted first."""
    env[f"A_{name}"] = frozenset(_BOOL_TYPES if ann.is_bool else _INT_TYPES if ann.is_int else _FLOAT_TYPES)
    env[f"C_{name}"] = ann.np.type
    convert = [f"        if type({name}) not in A_{name}: return False"]
    if ann.is_int:
        lo, hi = T.int_range(ann)
        env[f"LO_{name}"], env[f"HI_{name}"] = lo, hi
        return [f"    if type({name}) is int:",
                f"        if not LO_{name} <= {name} <= HI_{name}: return False",  # bind raises the error
                f"    elif type({name}) is not C_{name}:", *convert,
                f"        if not C_{name}({name}) == {name}: return False",
                f"        {name} = C_{name}({name})"]
    if ann.is_float:
        return [f"    if type({name}) is not float and type({name}) is not C_{name}:", *convert,
                f"        {name} = C_{name}({name})"]
    return [f"    if type({name}) is not C_{name}:", *convert, f"        {name} = C_{name}({name})"]
