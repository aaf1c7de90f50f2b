"""The partial derivatives of a float builtin call, read from its registry entry.

Each builtin declares its derivative once, as formulas in ``Builtin.derivative`` (the grammar is
``builtins.DERIVATIVES``).  ``partials(call)`` turns them into typed IR over the call's own
argument expressions, so ``dsl.grad`` (dsl/lang/adjoint.py) never needs a table of its own and a
new builtin is differentiable as soon as its entry says how.
"""
from __future__ import annotations

import ast
import functools
from typing import Dict, List, Optional, Tuple

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T

PICK = "pick"

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.Pow: "pow"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


class NoDerivative(Exception):
    """The builtin declares no derivative (the caller turns this into a located CompileError)."""


@functools.lru_cache(maxsize=None)
def _parsed(formula: str) -> ast.expr:
    return ast.parse(formula, mode="eval").body


def formulas(name: str) -> Tuple[str, ...] | str:
    b = B.BUILTINS.get(name)
    if b is None or not b.derivative:
        raise NoDerivative(name)
    return b.derivative


def formulas_or_none(name: str):
    b = B.BUILTINS.get(name)
    return b.derivative if b is not None and b.derivative else None


def partials(call: ir.Call, result: Optional[ir.Expr] = None) -> List[Optional[ir.Expr]]:
    """d(call)/d(arg k) as typed IR for each argument (None: no gradient flows to it);
    ``result`` is an expression holding the call's value (the call itself by default).
    Raises NoDerivative for a builtin whose entry declares none, ValueError for ``"pick"``
    builtins (the adjoint routes those itself)."""
    spec = formulas(call.name)
    if spec == PICK:
        raise ValueError(f"{call.name} picks an argument; route its gradient instead")
    t = call.type
    names: Dict[str, ir.Expr] = {"y": call if result is None else result}
    for k, a in enumerate(call.args):
        names["abc"[k] if k < 3 else f"a{k}"] = a
    if call.args:
        names["x"] = call.args[0]
    out: List[Optional[ir.Expr]] = []
    for k, a in enumerate(call.args):
        formula = spec[min(k, len(spec) - 1)]
        out.append(_build(_parsed(formula), names, t) if a.type is not None and a.type.is_float else None)
    return out


def _build(node: ast.expr, names: Dict[str, ir.Expr], t: T.DType) -> ir.Expr:
    """Typed IR for one formula node; every number is a float of the call's type ``t``."""
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.Constant):
        return ir.Const(float(node.value), type=t)
    if isinstance(node, ast.BinOp):
        return ir.Binary(_BINOPS[type(node.op)], _build(node.left, names, t), _build(node.right, names, t), type=t)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return ir.Unary("neg", _build(node.operand, names, t), type=t)
    if isinstance(node, ast.Compare):
        return ir.Compare(_CMPOPS[type(node.ops[0])], _build(node.left, names, t),
                          _build(node.comparators[0], names, t), type=T.bool_)
    if isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        e = _build(node.values[0], names, t)
        for v in node.values[1:]:
            e = ir.Logical(op, e, _build(v, names, t), type=T.bool_)
        return e
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = tuple(_build(a, names, t) for a in node.args)
        if node.func.id == "where":
            return ir.Select(args[0], args[1], args[2], type=t)
        return ir.Call(node.func.id, args, type=t)
    raise ValueError(f"unsupported derivative formula element: {ast.unparse(node)}")
