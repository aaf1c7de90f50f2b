"""Graph-valued attributes (the bodies of If, Loop and Scan) at ONNX import.

Each body becomes a ``dsl.Graph`` wrapped in a ``Body`` (dsl/opgraph/body.py): its formal
inputs first, with the specs the op class gives (``body_formals``), then one input per
outer-scope value the body reads.  ONNX lets a body use any name of an enclosing graph;
``Scope`` resolves such a name on first use -- an outer constant, or a value computed from
constants at load, is copied in as a constant (so it still folds), anything else becomes a
captured input, and the outer tensor is appended to the control-flow node's inputs.
Nested bodies capture through every level between them and the name's graph.  Loop-carried values may change shape between
iterations: when the body's outputs do not fit its formal inputs, the op class widens them
(``relax``) and the body is built again.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from dsl.onnx.errors import OnnxImportError
from dsl.opgraph import registry
from dsl.opgraph.body import Body
from dsl.opgraph.graph import Graph, Tensor
from dsl.opgraph.host_values import is_host
from dsl.opgraph.spec import TensorSpec, VerifyError

_MAX_WIDENING = 4  # builds of one body before its carried shapes settle (each widening adds None dims)


class Scope(dict):
    """Names visible in a body: its own, then (on first use) its enclosing graphs'."""

    def __init__(self, parent: dict, graph: Graph):
        super().__init__()
        self.parent, self.graph = parent, graph
        self.captured: List[Tensor] = []  # outer tensors, in the order of the body's captured inputs

    def __contains__(self, name) -> bool:
        return dict.__contains__(self, name) or name in self.parent

    def __missing__(self, name):
        if name not in self.parent:
            raise KeyError(name)
        outer = self.parent[name]
        if outer is None:
            inner = None
        elif outer.kind == "constant" or outer.spec.value is not None:  # known at load: a constant here too
            value = outer.graph.constants[outer.name] if outer.kind == "constant" else outer.spec.value
            inner = self.graph.constant(self.graph.unique_name(name), value)
        else:
            inner = (self.graph.input(self.graph.unique_name(name), outer.spec) if is_host(outer.spec) else
                     self.graph.input(self.graph.unique_name(name), outer.spec.shape, outer.spec.dtype))
            self.captured.append(outer)
        self[name] = inner
        return inner


def graph_attributes(node) -> List:
    import onnx
    return [a for a in node.attribute if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)]


def import_bodies(node, env: dict, ins: List[Optional[Tensor]], opsets: Dict[str, int], functions: Dict,
                  depth: int, reader, where: str) -> Tuple[dict, List[Tensor]]:
    """(the node's attributes with each graph attribute as a ``Body``, the outer tensors its
    bodies capture -- to append to the node's inputs, bodies in the op's param order)."""
    import onnx

    domain = registry.normalize_domain(node.domain)
    cls = registry.find(domain, node.op_type, opsets.get(domain))
    if cls is None or not hasattr(cls, "body_formals"):
        name = f"{domain or 'ai.onnx'}::{node.op_type}"
        raise OnnxImportError(f"{where}: has graph attributes ({', '.join(a.name for a in graph_attributes(node))}) "
                                   f"but {name} is not a control-flow op opdsl runs (If, Loop, Scan)")
    attrs = {a.name: reader.attribute_value(a, where) for a in node.attribute
             if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)}
    specs = [None if t is None else t.spec for t in ins]
    captured: List[Tensor] = []
    captures: Dict[str, List[Tensor]] = {}
    table = list(cls.param_table())
    # a body the node can never run (the other branch of an If whose condition is known at
    # load) is not built: it stands for the one that runs, and may not even import
    never = cls.never_run(specs)
    graphs = [a for a in graph_attributes(node) if a.name not in never]
    for a in graphs:
        if a.type == onnx.AttributeProto.GRAPHS:
            raise OnnxImportError(f"{where}: attribute {a.name!r} holds a list of graphs, which "
                                       f"{node.op_type} does not take")
        label = f"body {a.name!r} of {where}"
        try:
            formals = cls.body_formals(a.name, attrs, specs)
        except VerifyError as e:
            raise OnnxImportError(f"{where}: {e}") from None
        if len(a.g.input) != len(formals):
            raise OnnxImportError(f"{label} declares {len(a.g.input)} inputs; {node.op_type} passes it "
                                       f"{len(formals)} ({_describe(formals)})")
        for _ in range(_MAX_WIDENING):
            body, scope = _build(a.g, formals, env, opsets, functions, depth, reader, label,
                                 f"{node.name or node.op_type}/{a.name}")
            try:
                wider = cls.relax(a.name, attrs, formals, body.output_specs)
            except VerifyError as e:
                raise OnnxImportError(f"{label}: {e}") from None
            if wider == formals:
                break
            formals = wider
        attrs[a.name] = body
        captures[a.name] = scope.captured
    for name, runs_instead in never.items():
        attrs[name], captures[name] = attrs[runs_instead], captures[runs_instead]
    for name in sorted(captures, key=table.index):  # in the op's param order (If: then's, else's)
        captured += captures[name]
    return attrs, captured


def _declared_shape(vi) -> Optional[tuple]:
    """The shape a body input declares (None dims for symbolic ones), or None when it has none."""
    t = vi.type
    if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim)


def _describe(specs: List[TensorSpec]) -> str:
    return ", ".join(str(s) for s in specs) or "nothing"


def _build(gp, formals: List[TensorSpec], env: dict, opsets, functions, depth: int, reader, label: str,
           name: str) -> Tuple[Body, Scope]:
    bg = Graph(name)
    scope = Scope(env, bg)
    scope[""] = None
    for vi, spec in zip(gp.input, formals):
        if dict.__contains__(scope, vi.name):
            raise OnnxImportError(f"{label}: input name {vi.name!r} is declared twice")
        if is_host(spec):
            scope[vi.name] = bg.input(vi.name, spec)
            continue
        declared = _declared_shape(vi)
        if spec.shape == () and declared is not None and all(d == 1 for d in declared):
            spec = TensorSpec(declared, spec.dtype)  # a scalar the body declares as [1] (Loop's counter)
        scope[vi.name] = bg.input(vi.name, spec.shape, spec.dtype)
    for init in gp.initializer:
        scope[init.name] = bg.constant(bg.unique_name(init.name),
                                       reader.tensor_value(init, f"{label} initializer {init.name!r}"))
    try:
        reader.import_nodes(bg, gp.node, scope, opsets, functions, depth + 1)
    except OnnxImportError as e:
        raise OnnxImportError(f"{label}: {e}") from None
    for vo in gp.output:
        if vo.name not in scope or scope[vo.name] is None:
            raise OnnxImportError(f"{label}: output {vo.name!r} is not produced by any node of the body, "
                                       f"a body input or an enclosing graph")
        t = scope[vo.name]
        bg.output(t, vo.name if vo.name not in {o.name for o in bg.outputs} else bg.unique_name(vo.name))
    return Body(bg, len(formals), label), scope
