"""Moving between torch tensors and the numpy arrays opdsl's ops run on, without copies, and
the output specs of an op for tensors whose sizes are symbolic (``torch.compile``'s fake
tensors): ``infer`` runs on probe sizes and each output dim is rebuilt from the symbols."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch

from dsl.lang import types as T
from dsl.opgraph.op import check_and_infer
from dsl.opgraph.spec import TensorSpec
from dsl.runtime.foreign import torch_numpy
from dsl.torch.schema import dsl_dtype, torch_dtype


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy view of a CPU tensor (a contiguous copy first when it is strided)."""
    return torch_numpy(t if t.is_contiguous() else t.contiguous())


def as_torch(a: np.ndarray) -> torch.Tensor:
    """A numpy array as a torch tensor sharing its memory (bfloat16 through its bit pattern)."""
    a = np.ascontiguousarray(a)
    if a.dtype == T.bf16.np:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def empty(spec: TensorSpec) -> torch.Tensor:
    return torch.empty(tuple(spec.shape), dtype=torch_dtype(spec.dtype))


def concrete_specs(op, tensors: Sequence[Optional[torch.Tensor]]) -> List[Optional[TensorSpec]]:
    """Specs of real tensors, with their values (ops that read shape inputs need them)."""
    where = f"{type(op).__name__} (torch call)"
    return [None if t is None else TensorSpec(tuple(t.shape), dsl_dtype(t, where), value=as_numpy(t))
            for t in tensors]


# probe sizes for symbolic dims: distinct, odd, unlikely to be special to an infer
_PROBES = (1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049, 1051, 1061, 1063, 1069)


def symbolic_specs(op, tensors: Sequence[Optional[torch.Tensor]]):
    """(output specs with int dims, output dims as ints or SymInts) for fake tensors.

    ``infer`` sees plain ints: each symbolic size gets a probe value, then each symbol is
    moved by one to learn how every output dim depends on it (affine, which covers
    broadcasting, concatenation and reshapes by constants).  A dim it cannot explain becomes
    a new data-dependent size."""
    symbols, keys = [], {}
    for t in tensors:
        if t is None:
            continue
        for d in t.shape:
            if not isinstance(d, int) and str(d) not in keys:
                keys[str(d)] = len(symbols)
                symbols.append(d)
    if len(symbols) > len(_PROBES):
        raise TypeError(f"{type(op).__name__}: more than {len(_PROBES)} symbolic sizes")
    where = "torch fake tensor"

    def specs_for(values):
        return [None if t is None else TensorSpec(
            tuple(d if isinstance(d, int) else values[keys[str(d)]] for d in t.shape), dsl_dtype(t, where))
            for t in tensors]

    base = list(_PROBES[:len(symbols)])
    outs = check_and_infer(op, specs_for(base), where="torch.compile fake call")
    moved = []
    for i in range(len(symbols)):
        values = list(base)
        values[i] += 2
        moved.append(check_and_infer(op, specs_for(values), where="torch.compile fake call"))
    shapes = []
    for k, out in enumerate(outs):
        dims = []
        for axis, d in enumerate(out.shape):
            if d is None:
                dims.append(torch.library.get_ctx().new_dynamic_size())
                continue
            expr, ok = d, True
            for i, sym in enumerate(symbols):
                other = moved[i][k].shape[axis] if len(moved[i][k].shape) == len(out.shape) else None
                if other is None or (other - d) % 2:
                    ok = False
                    break
                slope = (other - d) // 2
                if slope:
                    expr = expr + slope * (sym - base[i])
            dims.append(expr if ok else torch.library.get_ctx().new_dynamic_size())
        shapes.append(dims)
    return outs, shapes
