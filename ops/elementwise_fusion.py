"""The elementwise fusion pass: DAGs of elementwise float nodes become one FusedElementwise node
(ops/fused_elementwise.py), one launch and one pass over memory instead of one per node.

Runs at compile after the pairwise rewrites (dsl/opgraph/fusion.py ``fusion_pass``), so a Conv
or MatMul first takes what it can do in its own epilogue (activation, bias) and the rest of a
chain fuses here.  Starting from the last node, a group takes a producer when the producer is
fusable and every reader of its output is already in the group (and that output is not a graph
output): intermediates nobody else needs are never stored.  GELU spelled out (Div, Erf, Add,
Mul, Mul) is one group; a value read outside the chain ends it there.

Fusable: Add, Sub, Mul, Div, Pow, Max/Min of two inputs, Neg, Abs, Reciprocal, Sqrt, Exp, Log,
Erf, Tanh, Sin, Cos, Floor, Ceil, Round, Relu, LeakyRelu, Sigmoid, Clip, Where (a bool
condition from outside the group) and Cast between float dtypes, when every value is f16, bf16,
f32 or f64; inputs broadcast as numpy does.  Each step is rounded to its node's dtype as the
unfused node's store would (f32, f64), so f32/f64 results equal the unfused graph's; f16/bf16
steps stay in f32 until the final store (one rounding instead of one per node).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import numpy as np

from dsl.opgraph.fusion import fusion_pass
from dsl.opgraph.op import check_and_infer
from dsl.opgraph.spec import VerifyError
from ops.binary import Div, Max, Min, Pow
from ops.cast import Cast, CastV6
from ops.elementwise import FLOATS, Add, Clip, ClipV6, LeakyRelu, Mul, Relu, Sigmoid, Sub, Tanh
from ops.fused_elementwise import MAX_INPUTS, MAX_STEPS, FusedElementwise
from ops.logic import Where
from ops.unary import Abs, Ceil, Cos, Erf, Exp, Floor, Log, Neg, Reciprocal, Round, Sin, Sqrt

MAX_NODES = 48  # nodes per group: keeps generated kernels small

# An emitter gets the node and its argument names (None for an absent optional input) and
# returns the expressions of its steps; "{p<k>}" names the node's own k-th step.  None: the
# node cannot be fused (e.g. a bound that is not finite).
Emitter = Callable[[object, List[Optional[str]]], Optional[List[str]]]


def _literal(value: float, dtype) -> Optional[str]:
    """A number literal with the value ``value`` has in ``dtype`` (as the unfused op's f32
    param or dtype-typed bound holds it), None when it is not finite."""
    v = float(np.asarray(value, dtype=np.float64).astype(dtype.np if hasattr(dtype, "np") else dtype))
    return repr(v) if np.isfinite(v) else None


def _binary(sym: str) -> Emitter:
    return lambda node, a: [f"{a[0]} {sym} {a[1]}"]


def _call(fn: str) -> Emitter:
    return lambda node, a: [f"{fn}({a[0]})"]


def _max_min(cmp: str) -> Emitter:
    def emit(node, a):  # NaN in either input gives NaN (np.maximum / np.minimum), as the op's kernel
        if len(a) != 2:
            return None
        return [f"{a[0]} if {a[0]} {cmp} {a[1]} or {a[0]} != {a[0]} else {a[1]}"]
    return emit


def _leaky_relu(node, a):
    alpha = _literal(node.op.alpha, np.float32)  # the kernel's alpha param is f32
    return None if alpha is None else [f"{a[0]} if {a[0]} >= 0 else {a[0]} * {alpha}"]


def _sigmoid(node, a):  # the op's own formula: exp(-|v|) never overflows
    return [f"dsl.exp(-abs({a[0]}))", "1 / (1 + {p0})", f"{{p1}} if {a[0]} >= 0 else {{p0}} * {{p1}}"]


def _clip_steps(x: str, lo: Optional[str], hi: Optional[str]) -> List[str]:
    steps = [f"{lo} if {x} < {lo} else {x}"] if lo is not None else []
    if hi is not None:
        last = "{p0}" if steps else x
        steps.append(f"{hi} if {last} > {hi} else {last}")
    return steps or [x]


def _clip_v6(node, a):
    dt = node.inputs[0].spec.dtype
    lo, hi = _literal(node.op.min, dt), _literal(node.op.max, dt)
    return None if lo is None or hi is None else _clip_steps(a[0], lo, hi)


def _clip(node, a):
    a = list(a) + [None, None]
    return _clip_steps(a[0], a[1], a[2])


def _cast(node, a):
    return [a[0]] if node.op.to in FLOATS else None


EMITTERS: Dict[type, Emitter] = {
    Add: _binary("+"), Sub: _binary("-"), Mul: _binary("*"), Div: _binary("/"),
    Pow: lambda node, a: [f"dsl.pow({a[0]}, {a[1]})"],
    Max: _max_min(">="), Min: _max_min("<="),
    Neg: lambda node, a: [f"-{a[0]}"], Abs: _call("abs"), Reciprocal: lambda node, a: [f"1 / {a[0]}"],
    Sqrt: _call("dsl.sqrt"), Exp: _call("dsl.exp"), Log: _call("dsl.log"), Erf: _call("dsl.erf"),
    Tanh: _call("dsl.tanh"), Sin: _call("dsl.sin"), Cos: _call("dsl.cos"), Floor: _call("dsl.floor"),
    Ceil: _call("dsl.ceil"), Round: _call("dsl.rint"),
    Relu: lambda node, a: [f"{a[0]} if {a[0]} > 0 or {a[0]} != {a[0]} else 0"],
    LeakyRelu: _leaky_relu, Sigmoid: _sigmoid, ClipV6: _clip_v6, Clip: _clip,
    Where: lambda node, a: [f"{a[1]} if {a[0]} else {a[2]}"],
    Cast: _cast, CastV6: _cast,
}


def fusable(node) -> bool:
    """An elementwise node of a known class (exactly: a subclass may mean something else) whose
    values are floats (Where's condition: bool)."""
    if type(node.op) not in EMITTERS or len(node.outputs) != 1:
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
    """(program text, external input tensors) of a group, or None when a node will not emit."""
    nodes = sorted(group, key=lambda n: order[id(n)])
    inside = {id(n.outputs[0]) for n in nodes}
    names: Dict[int, str] = {}
    externals: list = []
    lines: List[str] = []
    for n in nodes:
        args: List[Optional[str]] = []
        for t in n.inputs:
            if t is None:
                args.append(None)
                continue
            if id(t) not in names:
                if id(t) in inside:
                    return None  # cannot happen in node order; refuse rather than misread
                names[id(t)] = f"x{len(externals)}"
                externals.append(t)
            args.append(names[id(t)])
        exprs = EMITTERS[type(n.op)](n, args)
        if exprs is None:
            return None
        first = len(lines)
        cast = "f64" if n.outputs[0].spec.dtype.name == "f64" else "f32"
        for k, e in enumerate(exprs):
            e = e.format(**{f"p{j}": f"t{first + j}" for j in range(k)})
            lines.append(f"t{len(lines)} = {cast}({e})")
        names[id(n.outputs[0])] = f"t{len(lines) - 1}"
    if len(externals) > MAX_INPUTS or len(lines) > MAX_STEPS:
        return None
    return "\n".join(lines), externals


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
