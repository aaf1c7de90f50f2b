"""Graph compile passes, in order (``compile_graph`` is the pipeline):

1. ``inline``        composed ops are replaced by their bodies (recursively), on a copy
2. ``infer_and_fold`` shape/type inference with ``None`` dims and verify, node by node;
                     nodes whose inputs are all constants run now and become constants
3. ``remove_dead``   nodes and constants no graph output depends on are dropped
4. ``assign_formats`` each op picks its formats; Reorder nodes are inserted where a
                     producer and a consumer disagree (one per tensor and format; a
                     reorder that would undo the one producing a tensor is cancelled;
                     constants are reordered at compile time); outputs end plain
5. ``select_kernels`` the implementation of every node for the backend
6. ``plan_memory``   (per set of concrete shapes, called by dsl.Model) buffers shared
                     between tensors whose lifetimes do not overlap; in-place where the
                     op allows it and the input dies at that node
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from dsl import config
from dsl.formats import Reorder, normalize_choice, physical_shape, to_nchwc16_ref
from dsl.graph import Graph, Node, Tensor
from dsl.op import TensorSpec, VerifyError, check_and_infer, describe


def compile_graph(graph: Graph, backend: Optional[str] = None, formats: str = "auto", fold: bool = True,
                  max_tensor_bytes: Optional[int] = None):
    from dsl.model import Model
    limit = tensor_limit(max_tensor_bytes)
    if formats not in ("auto", "plain"):
        raise ValueError(f"Graph.compile(formats={formats!r}): accepted 'auto' or 'plain'")
    if not graph.outputs:
        raise ValueError(f"graph {graph.name!r} has no outputs: call graph.output(tensor, name) first")
    backend = backend or config.default_backend()
    from backends import base
    base.get(backend)  # unknown backend names fail here, before any work
    g = inline(graph)
    stats = {"folded": infer_and_fold(g, backend, fold, limit), "removed": remove_dead(g)}
    stats["reorders"] = assign_formats(g) if formats == "auto" else 0
    impls = select_kernels(g, backend)
    return Model(g, backend, impls, stats, max_tensor_bytes=limit)


# --------------------------------------------------------------------------- size cap

class TensorSizeError(ValueError):
    """A tensor the graph would make opdsl allocate is larger than the configured cap."""


def tensor_limit(max_tensor_bytes: Optional[int]) -> int:
    """The cap in bytes: the argument when given, else OPDSL_MAX_TENSOR_BYTES (default 4 GiB)."""
    if max_tensor_bytes is None:
        return config.max_tensor_bytes()
    if isinstance(max_tensor_bytes, bool) or not isinstance(max_tensor_bytes, (int, np.integer)) \
            or max_tensor_bytes <= 0:
        raise ValueError(f"max_tensor_bytes must be a positive int, got {max_tensor_bytes!r}")
    return int(max_tensor_bytes)


def check_tensor_bytes(shape: Sequence, dtype, what: str, limit: int) -> None:
    """Raise TensorSizeError naming ``what`` before a tensor of ``shape`` x ``dtype`` is allocated.
    Exact Python-int arithmetic: a product of huge dims cannot wrap around to a small number."""
    nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
    if nbytes > limit:
        raise TensorSizeError(f"{what}: shape {tuple(int(d) for d in shape)} of {np.dtype(dtype)} needs {nbytes} bytes "
                              f"({_human_bytes(nbytes)}), over the limit of {limit} bytes ({_human_bytes(limit)}); "
                              "raise it with max_tensor_bytes= or OPDSL_MAX_TENSOR_BYTES if this is intended")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# --------------------------------------------------------------------------- 1. inlining

def inline(src: Graph) -> Graph:
    """A copy of ``src`` with every composed node replaced by its body."""
    g = Graph(src.name)
    g.opset_imports = dict(src.opset_imports)
    m: Dict[int, Tensor] = {}
    for t in src.inputs:
        m[id(t)] = g.input(t.name, t.dims, t.spec.dtype)
    for name, value in src.constants.items():
        m[id(src.tensors[name])] = g.constant(name, value)
    _emit(g, src, "", m)
    for t in src.outputs:
        g.output(m[id(t)], t.name)
    return g


def _emit(g: Graph, body: Graph, prefix: str, m: Dict[int, Tensor]) -> None:
    for n in body.nodes:
        ins = [None if t is None else m[id(t)] for t in n.inputs]
        if n.subgraph is not None:
            sub = n.subgraph
            sm: Dict[int, Tensor] = {}
            for arg, x in zip(type(n.op).tensor_args, ins):
                if x is not None:
                    sm[id(sub.tensors[arg])] = x
            for cname, value in sub.constants.items():
                sm[id(sub.tensors[cname])] = g.constant(g.unique_name(f"{prefix}{n.name}/{cname}"), value)
            _emit(g, sub, f"{prefix}{n.name}/", sm)
            for o, so in zip(n.outputs, sub.outputs):
                m[id(o)] = sm[id(so)]
            continue
        node = g.add_node(n.op, ins, [o.spec for o in n.outputs],
                          name=g.unique_name(prefix + n.name, node=True),
                          out_names=[g.unique_name(prefix + o.name) for o in n.outputs])
        for o, new in zip(n.outputs, node.outputs):
            m[id(o)] = new


# --------------------------------------------------------------------------- 2. inference, folding

def infer_and_fold(g: Graph, backend: str, fold: bool = True, limit: Optional[int] = None) -> int:
    """Re-infer every node's outputs in order (inputs may have changed); fold constant
    nodes (none larger than ``limit`` bytes).  Returns the number of folded nodes."""
    limit = tensor_limit(limit)
    kept: List[Node] = []
    folded = 0
    for n in g.nodes:
        specs = [None if t is None else t.spec for t in n.inputs]
        outs = check_and_infer(n.op, specs, where=f"node {n.name!r}")
        if len(outs) != len(n.outputs):
            raise VerifyError(f"{describe(n.op)} (node {n.name!r}): infer gave {len(outs)} outputs, "
                              f"the node has {len(n.outputs)}")
        for t, s in zip(n.outputs, outs):
            t.spec = s.with_(format="plain", value=s.value)
        consts = [t for t in n.inputs if t is not None]
        inferred = all(s.value is not None for s in outs)  # infer computed the values (Shape)
        if fold and type(n.op).foldable and outs and (inferred or (
                consts and all(t.kind == "constant" for t in consts) and all(s.known for s in outs))):
            for t, s in zip(n.outputs, outs):
                check_tensor_bytes(s.shape, s.dtype.np, f"constant folding of node {n.name!r} "
                                   f"({describe(n.op)}), output {t.name!r}", limit)
            if inferred:
                values = tuple(np.array(s.value, dtype=s.dtype.np).reshape(s.shape) for s in outs)
            else:
                values = n.op.apply_eager([None if t is None else t.value for t in n.inputs], backend)
                values = values if isinstance(values, tuple) else (values,)
            for t, v in zip(n.outputs, values):
                v = np.ascontiguousarray(v)
                v.setflags(write=False)
                t.kind, t.producer, t.value = "constant", None, v
                t.spec = t.spec.with_(value=v)
                g.constants[t.name] = v
            folded += 1
            continue
        kept.append(n)
    g.nodes = kept
    return folded


# --------------------------------------------------------------------------- 3. dead nodes

def remove_dead(g: Graph) -> int:
    """Drop nodes (and constants) no output depends on.  Returns how many nodes went."""
    live = {id(t) for t in g.outputs}
    kept: List[Node] = []
    for n in reversed(g.nodes):
        if any(id(o) in live for o in n.outputs):
            kept.append(n)
            live.update(id(t) for t in n.inputs if t is not None)
    removed = len(g.nodes) - len(kept)
    g.nodes = kept[::-1]
    for name in [c for c in g.constants if id(g.tensors[c]) not in live]:
        del g.constants[name]
        del g.tensors[name]
    return removed


# --------------------------------------------------------------------------- 4. formats

def assign_formats(g: Graph) -> int:
    """Choose every node's formats and insert reorders; returns the number inserted."""
    order: List[Node] = []
    cache: Dict[Tuple[int, str], Tensor] = {}
    inserted = 0

    def convert(t: Tensor, fmt: str) -> Tensor:
        nonlocal inserted
        if t.spec.format == fmt:
            return t
        key = (id(t), fmt)
        if key in cache:
            return cache[key]
        if t.kind == "node" and isinstance(t.producer.op, Reorder) and t.producer.inputs[0].spec.format == fmt:
            out = t.producer.inputs[0]  # undoing the reorder that made t
        elif t.kind == "constant" and fmt == "nchwc16":
            value = to_nchwc16_ref(t.value)
            value.setflags(write=False)
            out = g.constant(g.unique_name(f"{t.name}.nchwc16"), value)
            out.spec = t.spec.with_(format="nchwc16")
        else:
            node = g.add_node(Reorder(to=fmt), [t], [t.spec.with_(format=fmt)],
                              name=g.unique_name(f"reorder_{t.name}_{fmt}", node=True),
                              out_names=[g.unique_name(f"{t.name}.{fmt}")], append=False)
            order.append(node)
            inserted += 1
            out = node.outputs[0]
        cache[key] = out
        return out

    for n in g.nodes:
        specs = [None if t is None else t.spec for t in n.inputs]
        ins, outs = normalize_choice(n.op, specs, len(n.outputs), n.op.select_format(*specs),
                                     [o.spec for o in n.outputs])
        n.inputs = [None if t is None else convert(t, f) for t, f in zip(n.inputs, ins)]
        for o, f in zip(n.outputs, outs):
            o.spec = o.spec.with_(format=f, value=o.spec.value)
        order.append(n)
    outputs = []
    for t in g.outputs:
        if t.spec.format == "plain":
            outputs.append(t)
            continue
        name = t.name
        g.rename(t, g.unique_name(f"{name}.{t.spec.format}"))
        plain = convert(t, "plain")
        g.outputs = [o for o in g.outputs if o is not t]
        outputs.append(g.output(plain, name) if plain.name != name else plain)
        if outputs[-1].kind == "node" and outputs[-1].producer not in order:
            order.append(outputs[-1].producer)  # an Identity copy added by output()
    g.outputs = outputs
    g.nodes = order
    return inserted


# --------------------------------------------------------------------------- 5. kernels

def select_kernels(g: Graph, backend: str) -> Dict[str, object]:
    impls = {}
    for n in g.nodes:
        specs = [None if t is None else t.spec for t in n.inputs]
        try:
            impls[n.name] = n.op.implementation(specs, backend)
        except VerifyError as e:
            raise VerifyError(f"node {n.name!r}: {e}") from None
    return impls


# --------------------------------------------------------------------------- 6. memory

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


def plan_memory(nodes: Sequence[Node], layout: Dict[str, Tuple[tuple, np.dtype]],
                outputs: Sequence[Tensor]) -> MemoryPlan:
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
