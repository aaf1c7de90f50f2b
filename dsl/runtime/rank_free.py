"""One compiled specialization for every rank of the tensors a kernel reads only flat.

``dsl.lang.rank_use`` decides, from a specialization's parsed and checked IR, which tensor
parameters the body cannot tell the rank of.  Their rank then leaves the specialization's code
key (it becomes ``ANY_RANK``): the kernel is compiled once with those tensors as 1-D, and every
launch passes them as 1-D views of the same memory (a C-contiguous array's ``ravel()``, no
copy).  All three backends compile the same flattened IR, so they agree by construction.

A kernel launched at ranks 1, 2 and 4 compiles once; one that indexes ``x[i, j]`` or reads
``x.shape[k]`` still compiles per rank.  Debug builds keep per-rank code: their out-of-range
messages name the tensor's own shape.
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from dsl.lang import ir
from dsl.lang import rank_use

ANY_RANK = "any"  # the rank in a shared specialization key


def free_params(params, parsed_body, kernel_ir: ir.Kernel) -> Tuple[int, ...]:
    """Indices (in ``params``, the kernel's ParamDecls) of the tensors compiled flat: rank-free
    in ``kernel_ir`` and without a rank fixed by their annotation (``In[f32, 2]`` binds one
    rank anyway)."""
    free = rank_use.rank_free(parsed_body, kernel_ir)
    return tuple(i for i, p in enumerate(params)
                 if p.kind == "tensor" and p.name in free and p.annotation.ndim is None)


def flattened_by(params, kernel_ir, values: Sequence[Any]) -> Tuple[int, ...]:
    """The tensors a launcher built for ``kernel_ir`` (a front-end record's) takes flat for these
    ``values``: those whose compiled rank differs from the value's."""
    if kernel_ir is None or len(kernel_ir.params) != len(params):
        return ()
    return tuple(i for i, (p, q) in enumerate(zip(params, kernel_ir.params))
                 if p.kind == "tensor" and isinstance(q, ir.TensorParam) and q.ndim != values[i].ndim)


def shared_key(key: Tuple, params, free: Sequence[int]) -> Tuple:
    """``key`` (``Kernel.bind``'s: one (dtype, rank) per tensor first) with the ranks of the
    ``free`` tensors replaced by ``ANY_RANK``."""
    tensors = [i for i, p in enumerate(params) if p.kind == "tensor"]
    out = list(key)
    for k, i in enumerate(tensors):
        if i in free:
            out[k] = (key[k][0], ANY_RANK)
    return tuple(out)


def flatten(values: Sequence[Any], flat: Sequence[int]) -> List[Any]:
    """``values`` with the tensors at ``flat`` as 1-D views: launch values are C-contiguous (checked
    before), so ``ravel`` never copies, and it is the cheapest view numpy makes (~0.2 us)."""
    out = list(values)
    for i in flat:
        v = out[i]
        if v.ndim != 1:
            out[i] = v.ravel()
    return out
