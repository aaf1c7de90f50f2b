"""Typed IR written back as kernel Python: how ``dsl.grad`` turns the gradient it builds in IR
into an ordinary kernel, which every backend (the interpreter included), the compile cache and
pickling then handle like any other.

Every value is spelled with its type (``dsl.f32(0.5)``, ``dsl.i64(3)``), so the checker types
the text back exactly as the IR was typed.
"""
from __future__ import annotations

import math
import types as pytypes
from typing import List, Sequence

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.visitor import Visitor

_OPS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
        "bitand": "&", "bitor": "|", "bitxor": "^", "lshift": "<<", "rshift": ">>",
        "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_ACCESS = {"in": "In", "out": "Out", "inout": "InOut"}
_DTYPES = ("bool_", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64")


def namespace() -> pytypes.ModuleType:
    """The ``dsl`` the generated source refers to: the registered builtins, dtypes and annotations."""
    ns = pytypes.ModuleType("dsl")
    for name, b in B.BUILTINS.items():
        setattr(ns, name, b.runtime)
    for name in _DTYPES:
        setattr(ns, name, getattr(T, name))
    ns.In, ns.Out, ns.InOut, ns.Vec = T.In, T.Out, T.InOut, T.Vec
    return ns


def param_text(p: ir.Param) -> str:
    if isinstance(p, ir.TensorParam):
        return f"{p.name}: dsl.{_ACCESS[p.access]}[dsl.{p.dtype.name}, {p.ndim}]"
    if isinstance(p, ir.VecParam):
        return f"{p.name}: dsl.Vec[dsl.{p.dtype.name}, {p.length}]"
    return f"{p.name}: dsl.{p.dtype.name}"


def kernel_source(name: str, params: Sequence[ir.Param], body: Sequence[ir.Stmt], doc: str = "",
                  arrays: Sequence[ir.LocalArray] = ()) -> str:
    """The kernel's Python; ``arrays`` declares the ``dsl.local`` arrays the body's ``LocalInit``s name."""
    lines = [f"def {name}({', '.join(param_text(p) for p in params)}):"]
    if doc:
        lines.append(f"    {doc!r}")
    Writer(lines, arrays).block(body, 1)
    return "\n".join(lines) + "\n"


class Writer(Visitor):
    """Statements as indented kernel Python, appended to ``lines``."""

    def __init__(self, lines: List[str], arrays: Sequence[ir.LocalArray] = ()):
        self.lines = lines
        self.arrays = {a.name: a for a in arrays}

    def block(self, stmts, depth: int) -> None:
        if not stmts:
            self.lines.append("    " * depth + "pass")
        for s in stmts:
            self.visit(s, depth)

    def put(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def visit_Assign(self, s, depth):
        self.put(depth, f"{s.name} = {expr(s.value)}")

    def visit_LocalInit(self, s, depth):
        a = self.arrays[s.name]
        self.put(depth, f"{s.name} = dsl.local(({', '.join(map(str, a.shape))},), dsl.{a.dtype.name})")

    def visit_Store(self, s, depth):
        self.put(depth, f"{target(s.tensor, s.index, s.flat)} = {expr(s.value)}")

    def visit_AtomicAdd(self, s, depth):
        t = f"{s.tensor}.flat" if s.flat else s.tensor
        idx = expr(s.index[0]) if len(s.index) == 1 else f"({', '.join(map(expr, s.index))})"
        self.put(depth, f"dsl.atomic_add({t}, {idx}, {expr(s.value)})")

    def visit_If(self, s, depth):
        self.put(depth, f"if {expr(s.cond)}:")
        self.block(s.body, depth + 1)
        if s.orelse:
            self.put(depth, "else:")
            self.block(s.orelse, depth + 1)

    def visit_For(self, s, depth):
        self.put(depth, f"for {s.var} in range({expr(s.start)}, {expr(s.stop)}, {expr(s.step)}):")
        self.block(s.body, depth + 1)

    def visit_While(self, s, depth):
        self.put(depth, f"while {expr(s.cond)}:")
        self.block(s.body, depth + 1)

    def visit_Break(self, s, depth):
        self.put(depth, "break")

    def visit_Continue(self, s, depth):
        self.put(depth, "continue")

    def visit_Return(self, s, depth):
        self.put(depth, "return")


def target(tensor: str, index, flat: bool) -> str:
    if flat:
        return f"{tensor}.flat[{expr(index[0])}]"
    return f"{tensor}[{', '.join(map(expr, index))}]"


def const(c: ir.Const) -> str:
    v, t = c.value, c.type
    if t.is_bool:
        return repr(bool(v))
    if t.is_float:
        v = float(v)
        text = "(1e999 - 1e999)" if math.isnan(v) else "1e999" if v == math.inf else "-1e999" if v == -math.inf \
            else repr(v)
        return f"dsl.{t.name}({text})"
    return f"dsl.{t.name}({int(v)})"


def expr(e: ir.Expr) -> str:
    if isinstance(e, ir.Const):
        return const(e)
    if isinstance(e, ir.Name):
        return e.name
    if isinstance(e, ir.Load):
        return target(e.tensor, e.index, e.flat)
    if isinstance(e, ir.Shape):
        return f"{e.tensor}.shape[{e.axis}]"
    if isinstance(e, ir.Size):
        return f"{e.tensor}.size"
    if isinstance(e, ir.Unary):
        op = {"neg": "-", "not": "not ", "invert": "~"}[e.op]
        return f"({op}{expr(e.operand)})"
    if isinstance(e, (ir.Binary, ir.Compare)):
        return f"({expr(e.left)} {_OPS[e.op]} {expr(e.right)})"
    if isinstance(e, ir.Logical):
        return f"({expr(e.left)} {e.op} {expr(e.right)})"
    if isinstance(e, ir.Select):
        return f"dsl.where({expr(e.cond)}, {expr(e.if_true)}, {expr(e.if_false)})"
    if isinstance(e, ir.Conditional):
        return f"({expr(e.if_true)} if {expr(e.cond)} else {expr(e.if_false)})"
    if isinstance(e, ir.Cast):
        return f"dsl.{e.type.name}({expr(e.value)})"
    if isinstance(e, ir.Call):
        b = B.BUILTINS[e.name]
        if b.kind == "team":  # a literal grid axis
            return f"dsl.{e.name}({', '.join(repr(a.value) for a in e.args)})"
        return f"dsl.{e.name}({', '.join(map(expr, e.args))})"
    raise NotImplementedError(f"cannot write {type(e).__name__} as kernel Python")
