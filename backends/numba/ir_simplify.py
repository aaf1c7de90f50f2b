"""The kernel IR made smaller before it becomes numba source.

numba's front end (bytecode analysis, typing, lowering, liveness) costs time per statement and per
temporary, and a register tile unrolled by ``dsl.static_range`` leaves many that compile-time facts
already settle: conv_pointwise's ``thread`` was 1,225 generated lines, its front end most of the
10 s critical path of a cold light_resnet50 (benchmarks/RESULTS.md, issue 28).  LLVM would fold
all of this too, but only after numba has typed and lowered every piece.  So, on the typed IR:

* integer and bool arithmetic on constants is folded (``0 * 8``, ``(2 + 1) < n``, ``(x + 8) + 16``),
  ``x + 0``, ``x - 0``, ``x * 1`` become ``x`` and ``x * 0`` becomes 0; floats are never folded (f32
  rounds differently from Python);
* a local assigned exactly once, with a constant (``OCT = V * NV``), is replaced by the constant
  (so ``q // OCT`` is a plain division by a literal, not the helper for divisors -1 and 0);
* ``and``/``or`` with a known side collapse when the other side has no side effect, and an ``if``
  whose condition is then known keeps only its taken branch (an epilogue under ``V == BLOCK``
  on a target where V is 8);
* an assignment overwritten in the same straight-line block before anything reads it is dropped
  (a ``dsl.local`` array's zero fill followed by the kernel's own initialization).

Nothing that has a side effect, a bounds check (debug builds check loads) or a run-time error is
dropped or reordered.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Dict, FrozenSet, List, Sequence, Set, Tuple

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.fold import convert_const

_INT_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "floordiv": lambda a, b: a // b if b else None, "mod": lambda a, b: a % b if b else None,
            "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b, "bitxor": lambda a, b: a ^ b}
_COMPARE = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
# expressions without side effects or run-time errors (a load only when it is not bounds-checked)
_PURE = (ir.Const, ir.Name, ir.Binary, ir.Unary, ir.Compare, ir.Logical, ir.Cast, ir.Shape, ir.Size, ir.NDim,
         ir.Conditional, ir.Splat)


def kernel(k: ir.Kernel, debug: bool = False) -> ir.Kernel:
    """``k`` with its body and its functions' bodies simplified (the same kernel when nothing changes)."""
    consts = _constant_locals(k.body, {p.name for p in k.params})
    body = _Simplifier(consts, debug).stmts(k.body)
    funcs = tuple(replace(f, body=_Simplifier({}, debug).stmts(f.body)) for f in k.funcs)
    if body == tuple(k.body) and funcs == tuple(k.funcs):
        return k
    return replace(k, body=body, funcs=funcs)


def _int_or_bool(t) -> bool:
    return isinstance(t, T.DType) and not isinstance(t, T.SimdType) and (t.is_int or t.is_bool)


def _const(e: ir.Expr):
    """The value of an int or bool literal, else None."""
    return e.value if isinstance(e, ir.Const) and _int_or_bool(e.type) else None


def _constant_locals(body: Sequence[ir.Stmt], params: Set[str]) -> Dict[str, ir.Expr]:
    """Locals assigned exactly once in the whole body, with an int or bool value known at compile
    time (after the constants before them), and never a loop variable."""
    counts: Dict[str, int] = {}
    for n in ir.walk(list(body)):
        if isinstance(n, ir.Assign):
            counts[n.name] = counts.get(n.name, 0) + 1
        elif isinstance(n, ir.For):
            counts[n.var] = counts.get(n.var, 0) + 2
    consts: Dict[str, ir.Expr] = {}
    for n in ir.walk(list(body)):
        if isinstance(n, ir.Assign) and counts[n.name] == 1 and n.name not in params:
            value = _Simplifier(consts, True).expr(n.value)
            if _const(value) is not None:
                consts[n.name] = value
    return consts


class _Simplifier:
    def __init__(self, consts: Dict[str, ir.Expr], debug: bool):
        self.consts = consts  # local name -> its constant value (an ir.Const)
        self.debug = debug

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ir.Expr) -> ir.Expr:
        changes = {}
        for f in fields(e):
            v = getattr(e, f.name)
            if isinstance(v, ir.Expr):
                w = self.expr(v)
            elif isinstance(v, tuple) and any(isinstance(x, ir.Expr) for x in v):
                w = tuple(self.expr(x) if isinstance(x, ir.Expr) else x for x in v)
            else:
                continue
            if w is not v:
                changes[f.name] = w
        if changes:
            e = replace(e, **changes)
        return self.fold(e)

    def fold(self, e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Name) and e.name in self.consts:
            c = self.consts[e.name]
            return ir.Const(convert_const(c.value, e.type), type=e.type, loc=e.loc) if _int_or_bool(e.type) else e
        if isinstance(e, ir.Binary) and _int_or_bool(e.type):
            return self.binary(e)
        if isinstance(e, ir.Compare):
            a, b = _const(e.left), _const(e.right)
            if a is not None and b is not None:
                return ir.Const(_COMPARE[e.op](a, b), type=e.type, loc=e.loc)
        if isinstance(e, ir.Logical):
            return self.logical(e)
        if isinstance(e, ir.Unary) and e.op == "not" and _const(e.operand) is not None:
            return ir.Const(not e.operand.value, type=e.type, loc=e.loc)
        if isinstance(e, ir.Cast) and _int_or_bool(e.type) and _const(e.value) is not None:
            return ir.Const(convert_const(e.value.value, e.type), type=e.type, loc=e.loc)
        if isinstance(e, ir.Conditional) and _const(e.cond) is not None:
            return e.if_true if e.cond.value else e.if_false
        return e

    def binary(self, e: ir.Binary) -> ir.Expr:
        a, b = _const(e.left), _const(e.right)
        if a is not None and b is not None and e.op in _INT_OPS:
            v = _INT_OPS[e.op](a, b)
            if v is not None:
                return ir.Const(convert_const(v, e.type), type=e.type, loc=e.loc)
        if e.op in ("add", "sub") and b is not None and e.type == T.i64 and isinstance(e.left, ir.Binary) \
                and e.left.op in ("add", "sub") and e.left.type == T.i64 and _const(e.left.right) is not None:
            # (x + c1) + c2 -> x + (c1 + c2): i64 wraps, so the order does not change the result
            sign = (1 if e.left.op == "add" else -1) * e.left.right.value + (1 if e.op == "add" else -1) * b
            total = ir.Const(convert_const(abs(sign), T.i64), type=T.i64, loc=e.loc)
            return self.binary(replace(e, op="add" if sign >= 0 else "sub", left=e.left.left, right=total))
        if e.op == "mul" and 0 in (a, b) and self.pure(e.right if a == 0 else e.left):
            return ir.Const(convert_const(0, e.type), type=e.type, loc=e.loc)
        if e.op in ("add", "sub", "mul"):
            unit = 1 if e.op == "mul" else 0
            if b == unit and e.left.type == e.type:
                return e.left
            if a == unit and e.op != "sub" and e.right.type == e.type:
                return e.right
        return e

    def logical(self, e: ir.Logical) -> ir.Expr:
        a, b = _const(e.left), _const(e.right)
        absorbing = e.op == "or"  # the value that decides: True for or, False for and
        if a is not None:  # the left side decides, or leaves the right one
            return ir.Const(absorbing, type=e.type, loc=e.loc) if bool(a) == absorbing else self.as_bool(e.right, e)
        if b is not None and self.pure(e.left):
            return ir.Const(absorbing, type=e.type, loc=e.loc) if bool(b) == absorbing else self.as_bool(e.left, e)
        return e

    @staticmethod
    def as_bool(side: ir.Expr, whole: ir.Logical) -> ir.Expr:
        """``side`` standing for ``whole`` when it is a bool already (else the Logical stays)."""
        return side if side.type == whole.type else whole

    def pure(self, e: ir.Expr) -> bool:
        allowed = _PURE if self.debug else _PURE + (ir.Load, ir.VLoad)
        return all(isinstance(n, allowed) for n in ir.walk(e))

    # ------------------------------------------------------------------ statements
    def stmts(self, stmts: Sequence[ir.Stmt]) -> Tuple[ir.Stmt, ...]:
        out: List[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return tuple(_drop_overwritten(out))

    def stmt(self, s: ir.Stmt) -> List[ir.Stmt]:
        if isinstance(s, ir.If):
            cond = self.expr(s.cond)
            if _const(cond) is not None:
                return list(self.stmts(s.body if cond.value else s.orelse))
            return [replace(s, cond=cond, body=self.stmts(s.body), orelse=self.stmts(s.orelse))]
        changes = {}
        for f in fields(s):
            v = getattr(s, f.name)
            if isinstance(v, ir.Expr):
                changes[f.name] = self.expr(v)
            elif isinstance(v, tuple) and v and all(isinstance(x, ir.Stmt) for x in v):
                changes[f.name] = self.stmts(v)
            elif isinstance(v, tuple) and any(isinstance(x, ir.Expr) for x in v):
                changes[f.name] = tuple(self.expr(x) if isinstance(x, ir.Expr) else x for x in v)
        if isinstance(s, ir.While) and _const(changes["cond"]) is False:
            return []
        return [replace(s, **changes) if changes else s]


class _Facts:
    """What one statement reads and assigns, and whether control may leave it sideways."""

    __slots__ = ("reads", "assigns", "escapes")

    def __init__(self, s: ir.Stmt):
        nodes = list(ir.walk(s))
        self.reads: FrozenSet[str] = frozenset(n.name for n in nodes if isinstance(n, ir.Name))
        self.assigns: FrozenSet[str] = frozenset(n.name for n in nodes if isinstance(n, ir.Assign)) | frozenset(
            n.var for n in nodes if isinstance(n, ir.For))
        # a break/continue may carry the current values past the rest of the block; a barrier splits regions
        self.escapes = any(isinstance(n, (ir.Break, ir.Continue, ir.Sync)) for n in nodes)


def _drop_overwritten(stmts: List[ir.Stmt]) -> List[ir.Stmt]:
    """``stmts`` without the assignments of a pure value that a later plain assignment in the same
    list overwrites before any statement reads the name or may leave the block sideways."""
    facts = [_Facts(s) for s in stmts]
    keep = [True] * len(stmts)
    for i, s in enumerate(stmts):
        if not isinstance(s, ir.Assign) or not _Simplifier({}, True).pure(s.value):
            continue
        for j in range(i + 1, len(stmts)):
            t, f = stmts[j], facts[j]
            if s.name in f.reads:
                break
            if isinstance(t, ir.Assign) and t.name == s.name:
                keep[i] = False
                break
            if s.name in f.assigns or f.escapes:
                break
    return [s for s, k in zip(stmts, keep) if k]
