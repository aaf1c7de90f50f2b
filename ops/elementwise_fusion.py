"""The elementwise fusion pass: DAGs of elementwise float nodes become one FusedElementwise node
(ops/fused_elementwise.py), one launch and one pass over memory instead of one per node.

Runs at compile after the pairwise rewrites (dsl/opgraph/fusion.py ``fusion_pass``), so a Conv
or MatMul first takes what it can do in its own epilogue (activation, bias) and the rest of a
chain fuses here.  Starting from the last node, a group takes a producer when the producer is
fusable and every reader of its output is already in the group (and that output is not a graph
output): intermediates nobody else needs are never stored.  GELU spelled out (Div, Erf, Add,
Mul, Mul) is one group; a value read outside the chain ends it there.  The group becomes a
program (dsl/lang/expr_tree.py): one step per node, made by its row's ``Fusion.build``.

Fusable: the rows of ops/elementwise_table.py that say how they fuse (today Add, Sub, Mul, Div,
Pow, Max/Min of two inputs, Neg, Abs, Reciprocal, Sqrt, Exp, Log, Erf, Tanh, Sin, Cos, Floor, Ceil,
Round, Relu, LeakyRelu, Sigmoid, Clip, Where (a bool condition from outside the group) and Cast
between float dtypes), when every value is f16, bf16, f32 or f64; inputs broadcast as numpy does.  Each step is rounded to its node's dtype as the
unfused node's store would (f32, f64), so f32/f64 results equal the unfused graph's; f16/bf16
steps stay in f32 until the final store (one rounding instead of one per node).
"""
from __future__ import annotations

from typing import Dict, List

from dsl.lang.expr_tree import Call, Input, Program, Ref
from dsl.opgraph.fusion import fusion_pass
from dsl.opgraph.op import check_and_infer
from dsl.opgraph.spec import VerifyError
from ops import elementwise_table as table
from ops.elementwise import FLOATS
from ops.fused_elementwise import MAX_INPUTS, MAX_STEPS, FusedElementwise
from ops.logic import Where

MAX_NODES = 48  # nodes per group: keeps generated kernels small


def fusion(op_class: type):
    """How a node of ``op_class`` fuses (its row of ops/elementwise_table.py), None when it does not."""
    row = table.row_of(op_class)
    return None if row is None else row.fusion()


def fusable(node) -> bool:
    """An elementwise node of a known class (exactly: a subclass may mean something else) whose
    values are floats (Where's condition: bool)."""
    if fusion(type(node.op)) is None or len(node.outputs) != 1:
        return False
    if node.outputs[0].spec.dtype not in FLOATS:
        return False
    for k, t in enumerate(node.inputs):
        if t is None:
            continue
        if t.spec.dtype not in FLOATS and not (type(node.op) is Where and k == 0):
            return False
    return True


@fusion_pass
def fuse_elementwise(g) -> int:
    """Merge groups of fusable nodes into FusedElementwise nodes; returns how many nodes went."""
    readers = g.readers()
    outputs = {id(t) for t in g.outputs}
    taken: set = set()
    merged = 0
    for root in list(reversed(g.nodes)):
        if id(root) in taken or not fusable(root):
            continue
        group = _grow(root, readers, outputs, taken)
        if len(group) >= 2 and _replace(g, group):
            taken.update(id(n) for n in group)
            merged += len(group) - 1
    return merged


def _grow(root, readers, outputs, taken) -> list:
    members = {id(root): root}
    changed = True
    while changed and len(members) < MAX_NODES:
        changed = False
        for n in list(members.values()):
            for t in n.inputs:
                if t is None or t.kind != "node" or id(t) in outputs:
                    continue
                p = t.producer
                if id(p) in members or id(p) in taken or not fusable(p) or len(members) >= MAX_NODES:
                    continue
                if all(id(r) in members for r in readers.get(id(t), ())):
                    members[id(p)] = p
                    changed = True
    return list(members.values())


def _program(group: list, order: Dict[int, int]):
    """(Program, external input tensors) of a group, or None when a node will not fuse."""
    nodes = sorted(group, key=lambda n: order[id(n)])
    inside = {id(n.outputs[0]) for n in nodes}
    values: Dict[int, object] = {}  # tensor -> Input or Ref
    externals: list = []
    steps: List[Call] = []
    for n in nodes:
        args: List[object] = []
        for t in n.inputs:
            if t is None:
                args.append(None)
                continue
            if id(t) not in values:
                if id(t) in inside:
                    return None  # cannot happen in node order; refuse rather than misread
                values[id(t)] = Input(len(externals))
                externals.append(t)
            args.append(values[id(t)])
        row = table.row_of(type(n.op))
        built = row.fusion().build(n, args)
        if built is None:
            return None
        call_args, attrs = built
        dtype = "f64" if n.outputs[0].spec.dtype.name == "f64" else "f32"
        steps.append(Call(row.onnx, tuple(call_args), dtype, row.since, tuple(attrs.items())))
        values[id(n.outputs[0])] = Ref(len(steps) - 1)
    if len(externals) > MAX_INPUTS or len(steps) > MAX_STEPS:
        return None
    return Program(tuple(steps)), externals


def _replace(g, group: list) -> bool:
    """The group's root node becomes the FusedElementwise node; the others and their outputs go."""
    order = {id(n): k for k, n in enumerate(g.nodes)}
    root = max(group, key=lambda n: order[id(n)])
    found = _program(group, order)
    if found is None:
        return False
    program, externals = found
    op = FusedElementwise(program=program, dtype=root.outputs[0].spec.dtype.name)
    try:
        outs = check_and_infer(op, [t.spec for t in externals], where=f"fusing into node {root.name!r}")
    except VerifyError:
        return False
    if outs[0].shape != root.outputs[0].spec.shape or outs[0].dtype != root.outputs[0].spec.dtype:
        return False
    gone = {id(n) for n in group if n is not root}
    for n in group:
        if n is not root:
            del g.tensors[n.outputs[0].name]
    root.op, root.inputs = op, list(externals)
    g.nodes = [n for n in g.nodes if id(n) not in gone]
    return True
