"""FusedElementwise as standard ONNX: its program read back into the elementwise ops it fused.

A FusedElementwise node (ops/fused_elementwise.py) holds its computation as a checked program,
one ``t<k> = f32(<expression>)`` line per step, over inputs ``x0, x1, ...``.  Export writes it
as ONNX nodes so other runtimes can run a compiled graph: the fusion pass's spellings of Relu,
LeakyRelu, Sigmoid, Max and Min become those ops again (they read better and need no
comparison ops newer than the model's opset); any other expression is written node by node
(``+`` Add, ``a if c else b`` Where, ``dsl.erf`` Erf, ``x != x`` IsNaN, ...).

Values keep the program's types: f16/bf16 inputs are read as f32 (as the kernel loads them),
number literals take the other operand's dtype (NEP 50, as the kernel), ``f32(...)``/``f64(...)``
round only where the value is of another dtype, and the result is cast to the node's dtype.

``lower_fused_elementwise(node, opset, emit) -> bool`` (False: the program needs an op the
opset lacks), called through dsl/onnx/lower.py's registry.  Only ``ast`` is used: the op
library is never imported here; ops/elementwise_table.py registers which call is which ONNX op
and each op's first opset (``register_call``, ``register_op``) when ``ops`` is imported.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Tuple

import numpy as np

# ONNX op -> the first ai.onnx opset where a fused program may write it (float inputs with numpy
# broadcasting).  The elementwise ops fill this and _CALLS through register_op / register_call
# (ops/elementwise_table.py declares them); the structural ops this writer adds are known here.
_SINCE: Dict[str, int] = {"Identity": 1}
_BINARY = {ast.Add: "Add", ast.Sub: "Sub", ast.Mult: "Mul", ast.Div: "Div"}
_COMPARE = {ast.Lt: "Less", ast.Gt: "Greater", ast.LtE: "LessOrEqual", ast.GtE: "GreaterOrEqual",
            ast.Eq: "Equal"}
_CALLS: Dict[str, str] = {}  # a program's call (dsl.<name> or a bare builtin) -> its ONNX op
_STORAGE = {"f16": "f32", "bf16": "f32"}  # loads of these give f32 in the kernel


def register_op(op_type: str, since: Optional[int]) -> None:
    """The first opset where ``op_type`` may be written (None: it may not be any more)."""
    if since is None:
        _SINCE.pop(op_type, None)
    else:
        _SINCE[op_type] = since


def register_call(name: str, op_type: Optional[str]) -> None:
    """A program's call ``name`` (``exp`` for dsl.exp, ``abs``) is written as ``op_type``, of one or
    two inputs as the call has (None: forget it)."""
    if op_type is None:
        _CALLS.pop(name, None)
    else:
        _CALLS[name] = op_type


class _Unsupported(Exception):
    """The program needs something the model's opset (or this lowering) cannot write."""


class _Value:
    """An ONNX tensor name with its dtype name ("f32", "bool", ...)."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype


def lower_fused_elementwise(node, opset: int, emit) -> bool:
    lines = [ln.strip() for ln in node.op.program.strip().splitlines() if ln.strip()]
    try:
        _Writer(node, opset, emit).program([ast.parse(ln).body[0] for ln in lines])
    except _Unsupported:
        return False
    return True


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _number(e: ast.AST) -> Optional[float]:
    if isinstance(e, ast.Constant) and type(e.value) in (int, float):
        return float(e.value)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _number(e.operand)
        return None if v is None else -v
    return None


def _uses(lines: List[ast.Assign]) -> Dict[str, int]:
    """How many times each t<k> is read by later lines."""
    count: Dict[str, int] = {}
    for st in lines:
        for n in ast.walk(st.value):
            if isinstance(n, ast.Name):
                count[n.id] = count.get(n.id, 0) + 1
    return count


def _rounded(e: ast.AST) -> Tuple[ast.AST, Optional[str]]:
    """(expression, "f32"/"f64") of a line's ``f32(e)`` / ``f64(e)`` wrapper, else (e, None)."""
    if (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("f32", "f64")
            and len(e.args) == 1):
        return e.args[0], e.func.id
    return e, None


class _Writer:
    def __init__(self, node, opset: int, emit):
        self.node, self.opset, self.emit = node, opset, emit
        self.values: Dict[str, _Value] = {}
        self.widened: Dict[Tuple[str, str], _Value] = {}
        for k, t in enumerate(node.inputs):
            dtype = t.spec.dtype.name
            self.values[f"x{k}"] = _Value(t.name, "bool" if dtype.startswith("bool") else dtype)

    # ----------------------------------------------------------------- emitting

    def op(self, op_type: str, inputs: List[_Value], dtype: str, **attrs) -> _Value:
        since = _SINCE.get(op_type)
        if since is None or self.opset < since:
            raise _Unsupported(op_type)
        out = self.emit.temp(op_type.lower())
        self.emit(op_type, [v.name for v in inputs], [out], **attrs)
        return _Value(out, dtype)

    def cast(self, v: _Value, dtype: str) -> _Value:
        if v.dtype == dtype:
            return v
        key = (v.name, dtype)
        if key not in self.widened:
            if dtype == "bf16" or v.dtype == "bf16":
                if self.opset < 13:
                    raise _Unsupported("Cast bf16")
            self.widened[key] = self.op("Cast", [v], dtype, to=_onnx_type(dtype))
        return self.widened[key]

    def constant(self, value: float, dtype: str) -> _Value:
        if dtype not in ("f32", "f64"):
            raise _Unsupported(f"literal of {dtype}")
        np_type = np.float32 if dtype == "f32" else np.float64
        return _Value(self.emit.constant(np.array(value, np_type), "literal"), dtype)

    # ----------------------------------------------------------------- program

    def program(self, lines: List[ast.Assign]) -> None:
        uses = _uses(lines)
        k = 0
        last = None
        while k < len(lines):
            taken, value = self.sigmoid(lines, k, uses)
            if not taken:
                e, rounding = _rounded(lines[k].value)
                value = self.expr(e)
                if rounding is not None:
                    value = self.cast(value, rounding)
                taken = 1
            for j in range(k, k + taken):
                self.values[f"t{j}"] = value
            last, k = value, k + taken
        self.store(last)

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

    def sigmoid(self, lines, k: int, uses) -> Tuple[int, Optional[_Value]]:
        """The fusion pass's three-line Sigmoid: exp(-|a|), 1 / (1 + p0), p1 if a >= 0 else p0 * p1."""
        if k + 2 >= len(lines):
            return 0, None
        e0, r0 = _rounded(lines[k].value)
        e1, r1 = _rounded(lines[k + 1].value)
        e2, r2 = _rounded(lines[k + 2].value)
        p0, p1 = f"t{k}", f"t{k + 1}"
        if not (r0 == r1 == r2 and isinstance(e0, ast.Call) and isinstance(e0.func, ast.Attribute)
                and e0.func.attr == "exp" and len(e0.args) == 1):
            return 0, None
        neg = e0.args[0]
        if not (isinstance(neg, ast.UnaryOp) and isinstance(neg.op, ast.USub) and isinstance(neg.operand, ast.Call)
                and isinstance(neg.operand.func, ast.Name) and neg.operand.func.id == "abs"):
            return 0, None
        a = neg.operand.args[0]
        want1 = ast.parse(f"1 / (1 + {p0})", mode="eval").body
        want2 = ast.parse(f"{p1} if A >= 0 else {p0} * {p1}", mode="eval").body
        want2.test.left = a
        if not (_same(e1, want1) and _same(e2, want2) and uses.get(p0) == 2 and uses.get(p1) == 2):
            return 0, None
        x = self.float_operand(self.expr(a))
        out = self.op("Sigmoid", [x], x.dtype)
        return 3, (out if r2 is None else self.cast(out, r2))

    def float_operand(self, v: _Value) -> _Value:
        return self.cast(v, _STORAGE.get(v.dtype, v.dtype)) if v.dtype != "bool" else v

    def expr(self, e: ast.AST) -> _Value:
        if isinstance(e, ast.Name):
            if e.id not in self.values:
                raise _Unsupported(f"name {e.id}")
            return self.float_operand(self.values[e.id])
        if isinstance(e, ast.BinOp) and type(e.op) in _BINARY:
            if _number(e.left) == 1.0 and isinstance(e.op, ast.Div) and _number(e.right) is None:
                x = self.expr(e.right)
                return self.op("Reciprocal", [x], x.dtype)
            return self.binary(_BINARY[type(e.op)], e.left, e.right)
        if isinstance(e, ast.UnaryOp):
            if isinstance(e.op, ast.UAdd):
                return self.expr(e.operand)
            if isinstance(e.op, ast.USub):
                if _number(e.operand) is not None:
                    raise _Unsupported("literal alone")
                x = self.expr(e.operand)
                return self.op("Neg", [x], x.dtype)
            if isinstance(e.op, ast.Not):
                return self.op("Not", [self.boolean(e.operand)], "bool")
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.IfExp):
            return self.if_exp(e)
        if isinstance(e, ast.Compare):
            return self.compare(e)
        if isinstance(e, ast.BoolOp):
            parts = [self.boolean(v) for v in e.values]
            name = "And" if isinstance(e.op, ast.And) else "Or"
            out = parts[0]
            for p in parts[1:]:
                out = self.op(name, [out, p], "bool")
            return out
        raise _Unsupported(ast.dump(e))

    def boolean(self, e: ast.AST) -> _Value:
        v = self.expr(e)
        if v.dtype != "bool":
            raise _Unsupported("a float used as a condition")
        return v

    def pair(self, a: ast.AST, b: ast.AST) -> Tuple[_Value, _Value]:
        """Both operands in one dtype: a literal takes the other's, else the wider float."""
        na, nb = _number(a), _number(b)
        if na is not None and nb is not None:
            raise _Unsupported("two literals")
        if na is not None:
            y = self.expr(b)
            return self.constant(na, y.dtype), y
        x = self.expr(a)
        if nb is not None:
            return x, self.constant(nb, x.dtype)
        y = self.expr(b)
        if x.dtype != y.dtype:
            wide = "f64" if "f64" in (x.dtype, y.dtype) else "f32"
            x, y = self.cast(x, wide), self.cast(y, wide)
        return x, y

    def binary(self, op_type: str, a: ast.AST, b: ast.AST) -> _Value:
        x, y = self.pair(a, b)
        return self.op(op_type, [x, y], x.dtype)

    def call(self, e: ast.Call) -> _Value:
        f = e.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id
        if name in ("f32", "f64") and len(e.args) == 1:
            return self.cast(self.expr(e.args[0]), name)
        if name in _CALLS and len(e.args) == 2:
            return self.binary(_CALLS[name], e.args[0], e.args[1])
        if name in _CALLS and len(e.args) == 1:
            x = self.expr(e.args[0])
            return self.op(_CALLS[name], [x], x.dtype)
        raise _Unsupported(f"call {name}")

    def compare(self, e: ast.Compare) -> _Value:
        if len(e.ops) != 1:
            raise _Unsupported("chained comparison")
        a, b, cmp = e.left, e.comparators[0], type(e.ops[0])
        if _same(a, b) and cmp in (ast.NotEq, ast.Eq):  # the NaN test x != x
            isnan = self.op("IsNaN", [self.expr(a)], "bool")
            return isnan if cmp is ast.NotEq else self.op("Not", [isnan], "bool")
        x, y = self.pair(a, b)
        if cmp is ast.NotEq:
            return self.op("Not", [self.op("Equal", [x, y], "bool")], "bool")
        name = _COMPARE[cmp]
        if self.opset < _SINCE.get(name, 1 << 30) and name in ("LessOrEqual", "GreaterOrEqual"):
            strict = self.op(name.replace("OrEqual", ""), [x, y], "bool")
            return self.op("Or", [strict, self.op("Equal", [x, y], "bool")], "bool")
        return self.op(name, [x, y], "bool")

    def if_exp(self, e: ast.IfExp) -> _Value:
        known = self.activation(e)
        if known is not None:
            return known
        cond = self.boolean(e.test)
        x, y = self.pair(e.body, e.orelse)
        return self.op("Where", [cond, x, y], x.dtype)

    def activation(self, e: ast.IfExp) -> Optional[_Value]:
        """Relu, LeakyRelu, Max and Min as the fusion pass spells them, else None."""
        t, a, b = e.test, e.body, e.orelse
        nan_guard = (isinstance(t, ast.BoolOp) and isinstance(t.op, ast.Or) and len(t.values) == 2
                     and _same(t.values[1], ast.Compare(a, [ast.NotEq()], [a])))
        if nan_guard and isinstance(t.values[0], ast.Compare) and _same(t.values[0].left, a):
            c = t.values[0]
            op, rhs = type(c.ops[0]), c.comparators[0]
            if op is ast.Gt and _number(rhs) == 0.0 and _number(b) == 0.0:
                x = self.expr(a)
                return self.op("Relu", [x], x.dtype)
            if op in (ast.GtE, ast.LtE) and _same(rhs, b):
                x, y = self.pair(a, b)
                return self.op("Max" if op is ast.GtE else "Min", [x, y], x.dtype)
        if (isinstance(t, ast.Compare) and isinstance(t.ops[0], ast.GtE) and _same(t.left, a)
                and _number(t.comparators[0]) == 0.0 and isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mult)
                and _same(b.left, a) and _number(b.right) is not None):
            x = self.expr(a)
            return self.op("LeakyRelu", [x], x.dtype, alpha=_number(b.right))
        return None


def _onnx_type(dtype: str) -> int:
    from onnx import TensorProto
    return {"f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "f32": TensorProto.FLOAT,
            "f64": TensorProto.DOUBLE, "bool": TensorProto.BOOL}[dtype]
