"""Which tensor parameters a kernel's body can tell the rank of.

A tensor read and written only through ``t.flat[i]``, ``t.size``, ``t.vload``/``t.vstore`` and
flat atomics sees its elements in one order whatever its shape, so one compiled specialization
with that tensor taken as 1-D serves every rank (dsl/runtime/kernel.py passes it a flat view).
Elementwise, activation, cast and fill kernels are launched at ranks 1 to 5; compiling each of
them once instead of once per rank is most of what the default test suite used to compile twice.

Anything else a body does with a tensor can observe its rank: ``t[i, j]`` (one index per axis,
so ``t[i]`` too), ``t.shape[k]``, ``len(t)``, ``t.ndim`` (folded to a constant by the checker,
so it is looked for in the parsed body), ``a, b = t.shape``, and passing ``t`` to a
``@dsl.func`` (whose specialization is typed by the rank).  The rule is a list of what is safe:
a node kind this module does not know counts as observing, so a new construct can only make a
kernel specialize per rank as before, never share code it should not.
"""
from __future__ import annotations

from typing import Iterable

from dsl.lang import ir

# node kinds that reach a tensor without seeing its rank, whatever their other fields
_FLAT_ALWAYS = (ir.Size, ir.VLoad, ir.VStore)
# node kinds that see it only when they are not flat (``t[i, j]``) and not when flat (``t.flat[i]``)
_FLAT_WHEN_FLAG = (ir.Load, ir.Store, ir.AtomicFetchAdd, ir.AtomicAdd)


def observed_ranks(bodies: Iterable, tensors: Iterable[str]) -> frozenset:
    """The names among ``tensors`` whose rank some statement of ``bodies`` (sequences of IR
    statements, parsed or checked) can observe."""
    names = frozenset(tensors)
    seen = set()
    for body in bodies:
        for node in ir.walk(tuple(body)):
            name = getattr(node, "tensor", None)
            if name is None and isinstance(node, ir.Name):
                name = node.name  # a tensor used as a plain value (a builtin argument): be safe
            if name not in names or name in seen:
                continue
            if isinstance(node, _FLAT_ALWAYS) or (isinstance(node, _FLAT_WHEN_FLAG) and node.flat):
                continue
            seen.add(name)
    return frozenset(seen)


def rank_free(parsed_body, kernel: ir.Kernel) -> frozenset:
    """Names of ``kernel``'s tensor parameters whose rank neither its parsed body (where
    ``t.ndim`` and ``a, b = t.shape`` still appear) nor its checked body can observe."""
    tensors = [p.name for p in kernel.params if isinstance(p, ir.TensorParam)]
    if not tensors:
        return frozenset()
    return frozenset(tensors) - observed_ranks((parsed_body, kernel.body), tensors)
