"""Graph compile passes, in order (compiler.py's ``compile_graph`` is the pipeline):

1. ``inline``        composed ops are replaced by their bodies (recursively), on a copy
2. ``infer_and_fold`` shape/type inference with ``None`` dims and verify, node by node;
                     nodes whose inputs are all constants run now and become constants
   (fusion.py's ``fuse``: the graph rewrites ops declare, e.g. Conv + BatchNormalization + Relu
                     into one node; compiler.py runs it here unless ``fuse=False``)
3. ``remove_output_copies`` an Identity onto a graph output goes: its input's producer
                     writes the output itself
4. ``remove_dead``   nodes and constants no graph output depends on are dropped
5. ``assign_formats`` each op picks its formats; Reorder nodes are inserted where a
                     producer and a consumer disagree (one per tensor and format; a
                     reorder that would undo the one producing a tensor is cancelled;
                     constants are reordered at compile time); outputs end plain
6. ``select_kernels`` the implementation of every node for the backend
7. memory.py's ``plan_memory``, per set of concrete shapes, called by dsl.Model

Passes take graphs (graph.py's structure) without importing graph.py, which sits above them.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from dsl.opgraph.formats import normalize_choice, to_nchwc16_ref
from dsl.opgraph.graph import Graph, Identity
from dsl.opgraph.limits import check_tensor_bytes, tensor_limit
from dsl.opgraph.host_values import is_host
from dsl.opgraph.op import check_and_infer
from dsl.opgraph.reorder import Reorder
from dsl.opgraph.spec import VerifyError, describe


# --------------------------------------------------------------------------- 1. inlining

def inline(src):
    """A copy of ``src`` with every composed node replaced by its body."""
    g = Graph(src.name)
    g.opset_imports = dict(src.opset_imports)
    m: Dict[int, object] = {}
    for t in src.inputs:
        m[id(t)] = g.input_like(t)
    for name, value in src.constants.items():
        c = m[id(src.tensors[name])] = g.constant(name, value)
        c.spec = c.spec.with_(quant=src.tensors[name].spec.quant, value=c.spec.value)
    _emit(g, src, "", m)
    for t in src.outputs:
        g.output(m[id(t)], t.name)
    return g


def _emit(g, body, prefix: str, m: Dict[int, object]) -> None:
    for n in body.nodes:
        ins = [None if t is None else m[id(t)] for t in n.inputs]
        if n.subgraph is not None:
            sub = n.subgraph
            sm: Dict[int, object] = {}
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

def infer_and_fold(g, backend: str, fold: bool = True, limit: Optional[int] = None) -> int:
    """Re-infer every node's outputs in order (inputs may have changed); fold constant
    nodes (none larger than ``limit`` bytes).  Returns the number of folded nodes."""
    limit = tensor_limit(limit)
    kept: list = []
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
                v = np.ascontiguousarray(v).reshape(np.shape(v))  # 0-d stays 0-d
                v.setflags(write=False)
                t.kind, t.producer, t.value = "constant", None, v
                t.spec = t.spec.with_(value=v)
                g.constants[t.name] = v
            folded += 1
            continue
        kept.append(n)
    g.nodes = kept
    return folded


# --------------------------------------------------------------------------- 3. output copies

def remove_output_copies(g) -> int:
    """Drop an Identity whose output is a graph output when its input is another node's output
    that no graph output is: that node writes the graph output itself (as ``Graph.output`` does
    when it renames a tensor).  The copy read and wrote the output once more after the rest of
    the run had evicted it: ~50 us of the BERT layer's ~4 ms on one core.  Returns how many went."""
    outputs = {id(t) for t in g.outputs}
    kept, removed = [], 0
    for n in g.nodes:
        src = n.inputs[0] if len(n.inputs) == 1 and len(n.outputs) == 1 else None
        out = n.outputs[0] if src is not None else None
        if (type(n.op) is Identity and src is not None and src.kind == "node" and id(out) in outputs
                and id(src) not in outputs and src.spec == out.spec):
            del g.tensors[src.name]
            src.name = out.name
            g.tensors[out.name] = src
            g.outputs[[id(t) for t in g.outputs].index(id(out))] = src
            outputs.add(id(src))
            removed += 1
            continue
        kept.append(n)
    g.nodes = kept
    return removed


# --------------------------------------------------------------------------- 4. dead nodes

def remove_dead(g) -> int:
    """Drop nodes (and constants) no output depends on.  Returns how many nodes went."""
    live = {id(t) for t in g.outputs}
    kept: list = []
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


# --------------------------------------------------------------------------- 5. formats

def assign_formats(g) -> int:
    """Choose every node's formats and insert reorders; returns the number inserted."""
    order: list = []
    cache: Dict[Tuple[int, str], object] = {}
    inserted = 0

    def convert(t, fmt: str):
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

    plain_only = _read_plain_only(g)
    for n in g.nodes:
        specs = [None if t is None else t.spec for t in n.inputs]
        out_specs = [o.spec for o in n.outputs]
        if any(is_host(s) for s in specs + out_specs):
            order.append(n)  # sequences and optionals hold plain tensors: nothing to convert
            continue
        ins, outs = normalize_choice(n.op, specs, len(n.outputs), n.op.select_format(*specs), out_specs)
        if any(f == "nchwc16" and id(o) in plain_only for o, f in zip(n.outputs, outs)):
            alt = n.op.select_plain_format(*specs)
            if alt is not None:
                ins, outs = normalize_choice(n.op, specs, len(n.outputs), alt, out_specs)
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


def _read_plain_only(g) -> set:
    """ids of the tensors every reader of which wants plain: graph outputs and inputs of ops
    without an nchwc16 format (the planner's cue for ``Op.writes_plain``)."""
    readers = g.readers()
    outputs = {id(t) for t in g.outputs}
    found = set()
    for n in g.nodes:
        for o in n.outputs:
            rs = readers.get(id(o), [])
            if (rs or id(o) in outputs) and all("nchwc16" not in type(r.op).formats for r in rs):
                found.add(id(o))
    return found


# --------------------------------------------------------------------------- 5. kernels

def select_kernels(g, backend: str) -> Dict[str, object]:
    impls = {}
    for n in g.nodes:
        specs = [None if t is None else t.spec for t in n.inputs]
        try:
            impls[n.name] = n.op.implementation(specs, backend)
        except VerifyError as e:
            raise VerifyError(f"node {n.name!r}: {e}") from None
    return impls
