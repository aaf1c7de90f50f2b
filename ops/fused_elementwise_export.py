"""FusedElementwise as standard ONNX: each step of its program written as the op it calls.

A FusedElementwise node (ops/fused_elementwise.py) holds a ``dsl.lang.expr_tree.Program`` whose
steps call elementwise ops of ops/elementwise_table.py by their ONNX names, so export is a walk
over the steps: ``Add`` becomes an Add node, ``LeakyRelu`` a LeakyRelu with its ``alpha``, and
so on, which other runtimes run and ``dsl.load_onnx`` fuses again.  Two steps are special:
``Clip`` (bounds as attributes before opset 11, as inputs after) and ``Cast`` (a change of dtype
only: a Cast node, or nothing).

Values keep the kernel's types: each argument is cast to its step's dtype where it has another
one (an f16 input is read as f32, as the kernel loads it), literals are constants of the step's
dtype, and the result is cast to the node's dtype.  A step whose op is newer than the model's
opset (``export_since`` of its row) leaves the node as it is (``com.opdsl``).

Registered through ``dsl.onnx.lower.register`` when the op library loads.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from dsl.lang.expr_tree import Call, Const, Input, Program
from dsl.onnx.lower import register
from ops import elementwise_table as table

_STRUCTURAL = {"Identity": 1}  # ops the writer adds besides the program's own


class _Unsupported(Exception):
    """The program needs something the model's opset cannot write."""


class _Value:
    """An ONNX tensor name with its dtype name ("f32", "bool", ...)."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype


@register("com.opdsl", "FusedElementwise", everywhere=True)
def lower_fused_elementwise(node, opset: int, emit) -> bool:
    try:
        _Writer(node, opset, emit).program(node.op.program)
    except _Unsupported:
        return False
    return True


class _Writer:
    def __init__(self, node, opset: int, emit):
        self.node, self.opset, self.emit = node, opset, emit
        self.inputs = [_Value(t.name, "bool" if t.spec.dtype.name.startswith("bool") else t.spec.dtype.name)
                       for t in node.inputs]
        self.steps: List[_Value] = []
        self.casts: Dict[Tuple[str, str], _Value] = {}

    def op(self, op_type: str, inputs: List[Optional[_Value]], dtype: str, **attrs) -> _Value:
        since = _STRUCTURAL.get(op_type) or table.export_since(op_type)
        if since is None or self.opset < since:
            raise _Unsupported(op_type)
        out = self.emit.temp(op_type.lower())
        self.emit(op_type, ["" if v is None else v.name for v in inputs], [out], **attrs)
        return _Value(out, dtype)

    def cast(self, v: _Value, dtype: str) -> _Value:
        if v.dtype == dtype:
            return v
        key = (v.name, dtype)
        if key not in self.casts:
            if "bf16" in (dtype, v.dtype) and self.opset < 13:
                raise _Unsupported("Cast bf16")
            self.casts[key] = self.op("Cast", [v], dtype, to=_onnx_type(dtype))
        return self.casts[key]

    def constant(self, value: float, dtype: str) -> _Value:
        np_type = np.float32 if dtype == "f32" else np.float64
        return _Value(self.emit.constant(np.array(value, np_type), "literal"), dtype)

    def value(self, a, dtype: str) -> Optional[_Value]:
        """Argument ``a`` as a tensor of ``dtype`` (a condition: ``dtype`` "bool", kept as it is)."""
        if a is None:
            return None
        if isinstance(a, Const):
            return self.constant(a.value, dtype)
        v = self.inputs[a.index] if isinstance(a, Input) else self.steps[a.index]
        return v if dtype == "bool" else self.cast(v, dtype)

    def program(self, program: Program) -> None:
        for step in program.steps:
            row = table.fusing_row(step.op, step.since)
            if row is None:
                raise _Unsupported(step.op)
            write = _SPECIAL.get(row.onnx, _generic)
            self.steps.append(write(self, step, row.fusion()))
        self.store(self.steps[-1])

    def store(self, value: _Value) -> None:
        """The last value into the node's output, cast to the node's dtype."""
        y, dtype = self.node.outputs[0].name, self.node.op.dtype
        nodes = self.emit.nodes
        produced = nodes and list(nodes[-1].output) == [value.name]
        read = any(value.name in n.input for n in nodes)
        if value.dtype == dtype and produced and not read:
            nodes[-1].output[0] = y  # the last step writes the output itself
        elif value.dtype == dtype:
            self.emit("Identity", [value.name], [y])
        else:
            if "bf16" in (dtype, value.dtype) and self.opset < 13:
                raise _Unsupported("Cast bf16")
            self.emit("Cast", [value.name], [y], to=_onnx_type(dtype))


def _generic(w: _Writer, step: Call, fusion) -> _Value:
    """The step's op over its arguments, each of the step's dtype (conditions stay bool)."""
    if any(a is None for a in step.args):
        raise _Unsupported(f"{step.op} with an absent input")
    args = [w.value(a, "bool" if j in fusion.conditions else step.dtype) for j, a in enumerate(step.args)]
    return w.op(step.op, args, step.dtype, **dict(step.attrs))


def _cast(w: _Writer, step: Call, fusion) -> _Value:
    """A change of dtype only: the argument as the step's dtype."""
    return w.value(step.args[0], step.dtype)


def _clip(w: _Writer, step: Call, fusion) -> _Value:
    """Bounds as attributes before opset 11 (they must be literals then), as inputs from 11."""
    x, lo, hi = (tuple(step.args) + (None, None))[:3]
    xv = w.value(x, step.dtype)
    if w.opset < 11:
        if not all(b is None or isinstance(b, Const) for b in (lo, hi)):
            raise _Unsupported("Clip with tensor bounds before opset 11")
        attrs = {k: b.value for k, b in (("min", lo), ("max", hi)) if b is not None}
        return w.op("Clip", [xv], step.dtype, **attrs)
    bounds = [w.value(b, step.dtype) for b in (lo, hi)]
    while bounds and bounds[-1] is None:
        bounds.pop()
    return w.op("Clip", [xv] + bounds, step.dtype)


_SPECIAL = {"Cast": _cast, "Clip": _clip}


def _onnx_type(dtype: str) -> int:
    from onnx import TensorProto
    return {"f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "f32": TensorProto.FLOAT,
            "f64": TensorProto.DOUBLE, "bool": TensorProto.BOOL}[dtype]

