"""The memory plan of a compiled model: one arena of buffers shared by intermediate tensors
whose lifetimes do not overlap (greedy best-fit in node order), in place where an op allows it
and its input dies at that node.  ``dsl.Model`` plans once per set of concrete shapes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np

from dsl.opgraph.formats import physical_shape
from dsl.opgraph.spec import TensorSpec


@dataclass
class MemoryPlan:
    """Which arena buffer holds each intermediate tensor (graph outputs are fresh
    arrays per run; inputs and constants are never written)."""

    sizes: List[int] = field(default_factory=list)      # bytes per buffer
    assign: Dict[str, int] = field(default_factory=dict)  # tensor name -> buffer index
    inplace: List[Tuple[str, str]] = field(default_factory=list)  # (output, input) sharing
    naive_bytes: int = 0                                   # one buffer per tensor

    @property
    def arena_bytes(self) -> int:
        return sum(self.sizes)


def plan_memory(nodes: Sequence, layout: Dict[str, Tuple[tuple, np.dtype]],
                outputs: Sequence) -> MemoryPlan:
    """Greedy best-fit over node order.  ``layout``: tensor name -> (physical shape, dtype)."""
    plan = MemoryPlan()
    out_ids = {id(t) for t in outputs}
    last: Dict[int, int] = {}
    for k, n in enumerate(nodes):
        for t in n.inputs:
            if t is not None:
                last[id(t)] = k
    users: Dict[int, int] = {}         # buffer -> live tensors in it
    owner: Dict[int, int] = {}         # id(tensor) -> buffer
    free: List[int] = []

    def nbytes(t):
        shape, dt = layout[t.name]
        return int(np.prod(shape, dtype=np.int64)) * dt.itemsize

    for k, n in enumerate(nodes):
        for oi, t in enumerate(n.outputs):
            size = nbytes(t)
            if id(t) in out_ids or size == 0:
                continue
            plan.naive_bytes += size
            src_i = type(n.op).inplace.get(oi)
            src = n.inputs[src_i] if src_i is not None and src_i < len(n.inputs) else None
            if (src is not None and id(src) in owner and last.get(id(src)) == k
                    and users[owner[id(src)]] == 1 and nbytes(src) == size
                    and layout[src.name][1] == layout[t.name][1]):
                b = owner[id(src)]
                plan.inplace.append((t.name, src.name))
            else:
                fits = [b for b in free if plan.sizes[b] >= size]
                if fits:
                    b = min(fits, key=lambda b: plan.sizes[b])
                elif free:
                    b = max(free, key=lambda b: plan.sizes[b])
                    plan.sizes[b] = size
                else:
                    b = len(plan.sizes)
                    plan.sizes.append(size)
                    users[b] = 0
                if b in free:
                    free.remove(b)
            owner[id(t)] = b
            users[b] += 1
            plan.assign[t.name] = b
        dying = {id(t): t for t in n.inputs if t is not None and last.get(id(t)) == k}
        dying.update({id(t): t for t in n.outputs if id(t) not in last})  # never read
        for t in dying.values():
            b = owner.pop(id(t), None)
            if b is None:
                continue
            users[b] -= 1
            if users[b] == 0:
                free.append(b)
    return plan


def physical_layout(specs: Dict[str, TensorSpec]) -> Dict[str, Tuple[tuple, np.dtype]]:
    return {name: (physical_shape(s.shape, s.format), s.dtype.np) for name, s in specs.items()}
