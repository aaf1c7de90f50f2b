"""Export of control-flow nodes (If, Loop, Scan): each ``Body`` param becomes a graph attribute.

A body's graph has the formal inputs and then one input per value it captured from the
enclosing graph, which the node receives as extra inputs (dsl/onnx/subgraph.py).  ONNX
bodies read outer values by name instead, so the node is written with its formal inputs
only and the body's captured inputs become references to the outer tensors: directly when
the names agree, through an ``Identity`` from the outer name otherwise.
"""
from __future__ import annotations

from typing import Dict


def control_flow_node(exporter, n, bodies: Dict[str, object]):
    """The NodeProto of control-flow node ``n`` (``bodies``: param name -> Body)."""
    from onnx import helper

    from dsl.onnx.attributes import node_attributes
    from dsl.onnx.attributes import value_info
    op = n.op
    exporter.note_domain(op)
    captured = sum(b.n_captures for b in bodies.values())
    formal, outer = n.inputs[:len(n.inputs) - captured], n.inputs[len(n.inputs) - captured:]
    while formal and formal[-1] is None:
        formal = formal[:-1]
    proto = helper.make_node(op.op_type, ["" if t is None else t.name for t in formal],
                             [t.name for t in n.outputs], name=n.name, domain=op.domain or None)
    proto.attribute.extend(node_attributes(op, skip=set(bodies)))
    offset = 0
    for name, body in bodies.items():  # in param order, which is the order captures were appended
        sources = outer[offset:offset + body.n_captures]
        offset += body.n_captures
        proto.attribute.append(helper.make_attribute(name, _body_graph(exporter, body, sources, value_info)))
    return proto


def _body_graph(exporter, body, sources, value_info):
    from onnx import helper
    g = body.graph
    nodes, inits = exporter.body(g)
    links = [helper.make_node("Identity", [src.name], [t.name], name=f"{g.name}/capture_{t.name}")
             for t, src in zip(g.inputs[body.n_formal:], sources) if t.name != src.name]
    inputs = [value_info(t.name, t.spec, symbolic=False) for t in g.inputs[:body.n_formal]]
    outputs = [value_info(t.name, t.spec, symbolic=False) for t in g.outputs]
    return helper.make_graph(links + nodes, g.name.replace("/", "_"), inputs, outputs, initializer=inits)
