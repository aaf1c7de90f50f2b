"""The memory plan of a compiled model: one arena of buffers shared by intermediate tensors
whose lifetimes do not overlap (greedy best-fit in node order), in place where an op allows it,
its input dies at that node and running in place costs no speed.  ``dsl.Model`` plans once per
set of concrete shapes.

In place is not free: with y on top of x, LLVM's run-time alias check sends a compiled loop to
its scalar version (Relu, Neg, Add 3.2-4.3x slower, Exp 6.7x, Sigmoid 9x on 32K floats;
benchmarks/RESULTS.md, "Launch and wake overhead").  So by default only ops whose in-place run
is a plain copy that the model then skips (``inplace_noop``: Reshape, Flatten, Squeeze,
Unsqueeze, Identity, Dropout) take their input's buffer; ``inplace_all=True`` (OPDSL_INPLACE_ALL=1)
honours every op's ``inplace`` for the smallest arena.

``views`` (concat_inplace.py) names tensors stored inside another tensor's buffer at a byte
offset: a Concat's inputs inside its output.  Such a tensor gets no buffer of its own; the
buffer it lives in is taken when the first of them is produced and kept until that tensor dies.
``copies_onto_itself`` tells the model which in-place nodes (a Reshape) have nothing to do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

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
    views: Dict[str, Tuple[str, int]] = field(default_factory=dict)  # tensor -> (holder, byte offset)
    naive_bytes: int = 0                                   # one buffer per tensor

    @property
    def arena_bytes(self) -> int:
        return sum(self.sizes)


def plan_memory(nodes: Sequence, layout: Dict[str, Tuple[tuple, np.dtype]],
                outputs: Sequence, views: Optional[Dict[str, Tuple[str, int]]] = None,
                inplace_all: bool = False, free_inplace: Optional[Callable] = None) -> MemoryPlan:
    """Greedy best-fit over node order.  ``layout``: tensor name -> (physical shape, dtype);
    ``views``: tensor name -> (name of the tensor holding it, byte offset); ``inplace_all``:
    run every op that declares ``inplace`` in place, not only the ``inplace_noop`` ones;
    ``free_inplace(node)``: the {output: input} pairs the node's chosen kernel runs in place at
    no cost (``Op.free_inplace``), honoured too."""
    plan = MemoryPlan()
    views = dict(views or {})
    produced = {t.name: t for n in nodes for t in n.outputs}
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

    def take(size: int) -> int:
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
        return b

    def hold(t, b: int) -> None:
        owner[id(t)] = b
        users[b] += 1
        plan.assign[t.name] = b

    for k, n in enumerate(nodes):
        for oi, t in enumerate(n.outputs):
            size = nbytes(t)
            if id(t) in out_ids or size == 0:
                continue
            plan.naive_bytes += size
            if t.name in views:  # lives in its holder's buffer, taken now if not yet
                holder = produced[views[t.name][0]]
                if id(holder) not in owner:
                    hold(holder, take(nbytes(holder)))
                plan.views[t.name] = views[t.name]
                continue
            if id(t) in owner:
                continue  # a holder, its buffer taken by its first view
            # a kernel that reads each element just before writing it: not when that input is also
            # another input of the node (a FusedConv whose image is its residual reads it elsewhere)
            pairs = {} if free_inplace is None else {
                o: i for o, i in free_inplace(n).items()
                if i < len(n.inputs) and n.inputs[i] is not None and sum(t is n.inputs[i] for t in n.inputs) == 1}
            if inplace_all or runs_nothing_in_place(n.op):
                pairs.update(type(n.op).inplace)
            src_i = pairs.get(oi)
            src = n.inputs[src_i] if src_i is not None and src_i < len(n.inputs) else None
            if (src is not None and id(src) in owner and last.get(id(src)) == k
                    and users[owner[id(src)]] == 1 and nbytes(src) == size
                    and layout[src.name][1] == layout[t.name][1]):
                b = owner[id(src)]
                plan.inplace.append((t.name, src.name))
            else:
                b = take(size)
            hold(t, b)
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


def runs_nothing_in_place(op) -> bool:
    """Whether the op's in-place run is a copy onto itself, which the model skips."""
    return bool(getattr(type(op), "inplace_noop", False))


def written_as_outputs(nodes: Sequence, outputs: Sequence, memory: MemoryPlan,
                       layout: Dict[str, Tuple[tuple, np.dtype]], read_counts: Dict[str, int]) -> Dict[str, str]:
    """{tensor name: graph output name} for each graph output that an ``inplace_noop`` op
    (Identity, Reshape, ...) makes of a node's result nothing else reads: that node writes the
    output's bytes itself and the copy is skipped.  A graph output is a fresh array per run, so
    the copy never ran in place: an Identity ending a BERT layer copied its whole output each
    run.  Only arena tensors of the same bytes qualify (not a graph input, constant or output,
    not inside or holding a Concat's views, not part of another in-place pair); ``read_counts``:
    tensor name -> how many node inputs and graph outputs read it."""
    out_count: Dict[int, int] = {}
    for t in outputs:
        out_count[id(t)] = out_count.get(id(t), 0) + 1
    paired = {name for pair in memory.inplace for name in pair}
    holders = {holder for holder, _ in memory.views.values()}
    found: Dict[str, str] = {}
    for n in nodes:
        if not runs_nothing_in_place(n.op) or type(n.op).inplace.get(0) != 0 or not n.inputs or not n.outputs:
            continue
        src, out = n.inputs[0], n.outputs[0]
        if (src is None or out_count.get(id(out)) != 1 or read_counts.get(out.name) != 1
                or any(read_counts.get(t.name) for t in n.outputs[1:])):
            continue
        if (src.name not in memory.assign or src.name in memory.views or src.name in holders
                or src.name in paired or read_counts.get(src.name) != 1 or src.name in found):
            continue
        (s_shape, s_dt), (o_shape, o_dt) = layout[src.name], layout[out.name]
        if s_dt == o_dt and int(np.prod(s_shape, dtype=np.int64)) == int(np.prod(o_shape, dtype=np.int64)):
            found[src.name] = out.name
    return found


def physical_layout(specs: Dict[str, TensorSpec]) -> Dict[str, Tuple[tuple, np.dtype]]:
    return {name: (physical_shape(s.shape, s.format), s.dtype.np) for name, s in specs.items()}


def copies_onto_itself(node, arrays, memory: MemoryPlan, read=None) -> bool:
    """Whether the node's op says an in-place run only copies (``inplace_noop``: Reshape,
    Flatten, Squeeze, Unsqueeze, Identity, Dropout) and the plan gave its first output its input's very
    bytes.  Any other output (Dropout's mask) must be one nothing reads (``read``: names of the
    tensors some node or the graph's outputs read; None: the node must have one output)."""
    if not runs_nothing_in_place(node.op) or not node.outputs:
        return False
    out = node.outputs[0]
    if any(read is None or t.name in read for t in node.outputs[1:]):
        return False
    src = dict(memory.inplace).get(out.name)
    if src is None or node.inputs[0] is None or node.inputs[0].name != src:
        return False
    a, b = arrays[out.name], arrays[src]
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.nbytes == b.nbytes and a.dtype == b.dtype)
