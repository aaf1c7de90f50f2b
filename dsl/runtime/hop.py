"""One hop from ``kernel(...)`` to machine code: a binder generated per kernel specialization.

A steady-state launch used to cross five Python frames (``Kernel.__call__``, the fast path's
checker, the launcher, its entry choice, ``_run``): ~3.5 us against ~0.25 us for a bare
``njit`` call (issue 28).  Once a small launch has run through them, the kernel generates
``hop``: a function with the kernel's own positional parameters that re-checks exactly what the
fast path checks (dsl/runtime/arg_check.py's rules: array types, dtype, rank, C-contiguity,
writable outputs, overlap of outputs, scalar kinds, ranges and conversion), adds up the
tensors' sizes, arms Ctrl-C and calls the serial entry's machine code (``Launcher.direct_entry``).  Anything else -- another dtype or
rank, a launch big enough for the parallel entry, keyword arguments, a ``grid=`` or
``backend=`` -- returns False before any work, and the usual path runs (and raises its errors:
every message comes from ``Kernel.bind``).  The values reach the entry point only after those
checks, so they have exactly its compiled types.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from backends import interrupt
from dsl.lang import types as T
from dsl.runtime import arg_check

_FAIL = "return False"


def build(params, values: Sequence, entry, flat: Sequence[int] = ()) -> Optional[Callable[..., bool]]:
    """``hop(*args) -> bool`` (True: launched) for launches whose tensors have the dtypes and
    ranks of ``values`` (the checked values of a launch that just ran), or None when a kernel's
    parameters need what only the full path does (Vec, ConstSpec or TypeVar scalars, f16 bits).
    ``entry``: the launcher's ``backends.base.DirectEntry``; ``flat``: the tensors its code takes
    as 1-D views (a specialization every rank shares, dsl/runtime/rank_free.py).  The checks are
    arg_check.py's rules."""
    env = dict(arg_check.GUARD_ENV, arm=interrupt.arm, READ=memoryview(interrupt.COUNTER), ENTRY=entry.fn,
               COUNTER=entry.counter, GRID=entry.grid, LIMIT=entry.max_elements, Interrupt=KeyboardInterrupt)
    sig, checks, body, tensors = [], [], [], []
    for k, (p, v) in enumerate(zip(params, values)):
        name = f"a{k}"  # positional only: a parameter's own name could be one the binder uses
        if p.kind == "tensor":
            dt = p.annotation.dtype  # a DType, or a TypeVar (In[T]) that this launch bound to v's dtype
            if type(v) is not np.ndarray or v.dtype.kind not in "biuf" or v.dtype == np.float16 or (
                    isinstance(dt, T.DType) and v.dtype != np.dtype(dt.np)):
                return None  # f16/bf16 travel as their bits: the launcher converts them
            env[f"T_{name}"] = v.dtype
            tensors.append((name, p.annotation.writable))
            checks += arg_check.tensor_lines(name, p.annotation.writable, _FAIL, dtype=f"T_{name}", ndim=v.ndim,
                                             flags_local=True)
        elif p.kind == "scalar" and isinstance(p.annotation, T.DType) and not p.annotation.is_storage_only:
            body += arg_check.scalar_lines(name, p.annotation, env, _FAIL, convert=False)
        else:
            return None  # Vec, ConstSpec, TypeVar and f16 scalar parameters: the full path binds them
        sig.append(name)
    if not tensors or len(values) != len(params):
        return None
    size = " + ".join(f"{a}.size" for a, _ in tensors)
    passed = [f"{a}.ravel()" if k in flat and values[k].ndim != 1 else a for k, a in enumerate(sig)]
    src = "\n".join([f"def hop({', '.join(sig)}):",
                     f'    """One checked launch of {len(tensors)} tensor(s) straight to the serial entry."""',
                     *checks,
                     f"    if {size} >= LIMIT: {_FAIL}",
                     *arg_check.overlap_lines(tensors, _FAIL),
                     *body,
                     "    _start = arm()",
                     f"    ENTRY({', '.join(passed)}, GRID, COUNTER, _start)",
                     "    if READ[0] != _start: raise Interrupt('opdsl launch interrupted')",
                     "    return True"])
    exec(compile(src, "<opdsl one-hop launch>", "exec"), env)
    hop = env["hop"]
    hop.arity = len(sig)
    return hop
