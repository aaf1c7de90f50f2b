"""Compile-time values of typed expressions: what the checker folds (static_range bounds,
shapes of scratch and local arrays, lane counts and indexes) and how a constant converts."""
from __future__ import annotations

from dsl.lang import ir
from dsl.lang import types as T


def convert_const(value, t: T.DType):
    if t.is_bool:
        return bool(value)
    if t.is_int and isinstance(value, float):
        return T.saturated_int(value, t)
    if t.is_int:
        v = int(value)
        bits = t.bits
        if t.kind == "u":
            return v % (1 << bits)
        v = v % (1 << bits)
        return v - (1 << bits) if v >= 1 << (bits - 1) else v
    return float(value)


def fold(e: ir.Expr):
    """The Python value of a constant expression, or None."""
    if isinstance(e, ir.Const):
        return e.value
    if isinstance(e, ir.Cast):
        v = fold(e.value)
        return None if v is None else convert_const(v, e.type)
    if isinstance(e, ir.Binary):
        a, b = fold(e.left), fold(e.right)
        if a is None or b is None:
            return None
        ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
               "floordiv": lambda: a // b if b else None, "mod": lambda: a % b if b else None,
               "lshift": lambda: a << b, "rshift": lambda: a >> b, "pow": lambda: a ** b}
        f = ops.get(e.op)
        return f() if f else None
    if isinstance(e, ir.Unary) and e.op in ("neg", "not"):
        v = fold(e.operand)
        return None if v is None else -v if e.op == "neg" else not v
    if isinstance(e, ir.Compare):
        a, b = fold(e.left), fold(e.right)
        if a is None or b is None:
            return None
        return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[e.op]
    if isinstance(e, ir.Logical):
        a, b = fold(e.left), fold(e.right)
        if a is None or b is None:
            return None
        return (a and b) if e.op == "and" else (a or b)
    return None
