"""ONNX export: ``Graph.to_onnx()`` -> ``onnx.ModelProto`` that passes ``onnx.checker``.

It reads graphs through their documented structure (dsl/opgraph/graph.py) and installs
itself as ``Graph.to_onnx`` when imported (graph.py sits below it).

* Inputs keep their names; ``None`` dims become symbolic dims (``<input>_d<axis>``).
* Constants become initializers.
* Every node keeps its op's (domain, op_type); params that differ from the op's
  defaults become attributes (defaults are implied, which also keeps attributes
  that newer opsets added out of older models).  DType params are written as
  element type codes on ai.onnx ops (Cast's ``to``) and as their names ("u8") on
  custom ops, bools as ints, arrays as tensors.
* Each custom domain used gets an ``opset_import`` entry (the version the graph was
  loaded with, else the highest ``since`` of its ops).
* The graph compiler's own ops (FusedMatMul, FusedElementwise, FusedConv, Reorder) are
  written as the standard ops they stand for (lower.py), so the graph of a compiled model
  exports to a model other runtimes run.
* Composed ops (``@dsl.composed``) are written as a node plus a FunctionProto
  holding their body, so other runtimes can expand them (opdsl's own com.opdsl ops in
  a body are written as standard ops where one exists: lower.py) and ``dsl.load_onnx``
  maps them back to the registered composed op (or expands the body when the op
  is not registered in that process).  The body bakes in the node's params; nodes of
  one composed type with different params get distinct function names.
* Control-flow nodes (If, Loop, Scan) write their bodies as graph attributes, reading
  captured values from the enclosing graph by name (subgraph_export.py).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from dsl.onnx.attributes import c_order, node_attributes, value_info
from dsl.onnx.lower import lower
from dsl.onnx.subgraph_export import control_flow_node
from dsl.opgraph import graph as _graph
from dsl.opgraph.body import Body
from dsl.opgraph.op import Op

DEFAULT_OPSET = 21  # ai.onnx opset written when the graph does not say
IR_VERSION = 10     # at least (opset 21 needs it); newer opsets raise it to what they need


def export(graph, check: bool = True):
    """``graph`` as an ``onnx.ModelProto``; ``check`` runs ``onnx.checker.check_model``."""
    import onnx
    from onnx import helper

    ctx = _Exporter(graph)
    nodes, inits = ctx.body(graph)
    inputs = [value_info(t.name, t.spec, symbolic=True, names=t.dim_names) for t in graph.inputs]
    outputs = [value_info(t.name, t.spec, symbolic=False) for t in graph.outputs]
    # types of intermediates: custom-domain nodes have no ONNX type inference of their own
    out_names = {t.name for t in graph.outputs}
    typed = [value_info(t.name, t.spec, symbolic=False) for n in graph.nodes for t in n.outputs
             if t.name not in out_names]
    g = helper.make_graph(nodes, graph.name, inputs, outputs, initializer=inits, value_info=typed)
    opsets = ctx.opsets(graph.opset_imports)
    for fn in ctx.functions.values():  # functions use the model's version of every domain
        domains = {""} | {n.domain for n in fn.node}
        del fn.opset_import[:]
        fn.opset_import.extend(helper.make_opsetid(d, opsets[d]) for d in sorted(domains))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
                              functions=list(ctx.functions.values()), producer_name="opdsl")
    model.ir_version = max(IR_VERSION, helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True))
    if check:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise ValueError(f"exported model of graph {graph.name!r} fails onnx.checker: {e}") from None
    return model


# --------------------------------------------------------------------------- pieces

def _fresh_names(graph):
    """name hint -> a name no tensor or node of ``graph`` (or an earlier call) uses."""
    used = set(graph.tensors) | {n.name for n in graph.nodes}

    def fresh(hint: str) -> str:
        name, k = hint, 0
        while name in used:
            k += 1
            name = f"{hint}_{k}"
        used.add(name)
        return name
    return fresh


class _Exporter:
    def __init__(self, graph):
        self.graph = graph
        self.used: Dict[str, int] = {}          # domain -> highest since of its ops
        self.functions: Dict[Tuple[str, str], object] = {}
        self.function_keys: Dict[Tuple[str, str], List[Tuple[object, str]]] = {}

    def note_domain(self, op: Op) -> None:
        dom = op.domain
        self.used[dom] = max(self.used.get(dom, 1), int(type(op).since or 1))

    def opsets(self, declared: Dict[str, int]) -> Dict[str, int]:
        out = {"": declared.get("", max(DEFAULT_OPSET, self.used.get("", 1)))}
        for dom, since in self.used.items():
            if dom:
                out[dom] = declared.get(dom, since)
        return out

    def body(self, graph, as_function: bool = False):
        """(nodes, initializers) of ``graph``; in a function constants become Constant nodes."""
        from onnx import helper, numpy_helper
        nodes, inits = [], []
        for name, value in graph.constants.items():
            tensor = numpy_helper.from_array(c_order(value), name)
            if as_function:
                nodes.append(helper.make_node("Constant", [], [name], value=tensor, name=f"{name}_const"))
            else:
                inits.append(tensor)
        fresh = _fresh_names(graph)
        for n in graph.nodes:
            lowered = lower(n, self.standard_opset(), fresh, in_function=as_function)
            if lowered is None:
                nodes.append(self.node(n))
            else:  # standard ops that other runtimes run (dsl/onnx/lower.py)
                nodes.extend(lowered)
                for ln in lowered:  # a lowering may write a contrib op (com.microsoft QLinearAdd)
                    if ln.domain:
                        self.used.setdefault(ln.domain, 1)
        return nodes, inits

    def standard_opset(self) -> int:
        """The ai.onnx version the model will import (see opsets())."""
        return self.graph.opset_imports.get("", DEFAULT_OPSET)

    def node(self, n):
        from onnx import helper
        op = n.op
        self.note_domain(op)
        op_type = op.op_type
        bodies = {k: v for k, v in op.params.items() if isinstance(v, Body)}
        if bodies:  # If / Loop / Scan: bodies become graph attributes (subgraph_export.py)
            return control_flow_node(self, n, bodies)
        if n.subgraph is not None or getattr(type(op), "composed", False):
            op_type = self.function_for(n)
        proto = helper.make_node(op_type, ["" if t is None else t.name for t in n.inputs],
                                 [t.name for t in n.outputs], name=n.name, domain=op.domain or None)
        proto.attribute.extend(node_attributes(op))
        return proto

    def function_for(self, n) -> str:
        """The FunctionProto name holding this composed node's body (created once per params)."""
        from onnx import helper
        op = n.op
        key = (op.domain, op.op_type)
        variants = self.function_keys.setdefault(key, [])
        for known_op, fname in variants:
            if known_op == op:
                return fname
        fname = op.op_type if not variants else f"{op.op_type}__{len(variants)}"
        variants.append((op, fname))
        dtypes = [None if t is None else t.spec.dtype for t in n.inputs]
        ranks = [0 if t is None else t.spec.ndim for t in n.inputs]
        dtypes += [None] * (len(type(op).tensor_args) - len(dtypes))
        ranks += [0] * (len(type(op).tensor_args) - len(ranks))
        body = op.function_graph(dtypes, ranks)
        nodes, _ = self.body(body, as_function=True)
        fn_opsets = []  # filled by export() once every domain's version is known
        inputs = list(type(op).tensor_args)
        outputs = [t.name for t in body.outputs]
        fn = helper.make_function(op.domain, fname, inputs, outputs, nodes, fn_opsets,
                                  attributes=list(op.params))
        self.functions[(op.domain, fname)] = fn
        return fname


_graph.install("to_onnx", export)
