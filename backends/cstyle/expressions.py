"""IR expressions in C, with numpy's and Python's meaning where C's differs: narrow integer
results wrapped back to their type, ``//`` and ``%`` rounding toward -inf (shifts and masks for
powers of two), shifts by counts outside [0, bits), float-to-int casts that saturate, literals
that round back to their value, and no parentheses beyond those C's precedence needs.

A mixin of ``CStyleRenderer`` (``self`` has ``k``, ``names``, ``shape_names``, ``size_names``,
``helper``, ``ctype``/``stype``, ``_note_type`` and the target's hooks)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from backends.spelling import row_major, row_major_static, special_float


def _float_text(value: float, single: bool) -> str:
    """Shortest decimal that rounds back to the value in the target precision."""
    v = np.float32(value) if single else np.float64(value)
    special = special_float(float(v))
    if special == "nan":
        return "NAN" if single else "(double)NAN"
    if special is not None:
        s = "INFINITY" if single else "(double)INFINITY"
        return s if special == "inf" else f"(-{s})"
    a = abs(float(v))
    if a != 0 and (a < 1e-4 or a >= 1e16):
        text = np.format_float_scientific(v, unique=True, trim="0")
    else:
        text = np.format_float_positional(v, unique=True, trim="0")
    if text.endswith("."):
        text += "0"
    text += "f" if single else ""
    return f"({text})" if text.startswith("-") else text  # never '--' after a unary minus


_BINARY_C = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "bitand": "&", "bitor": "|", "bitxor": "^",
             "lshift": "<<", "rshift": ">>"}
_COMPARE_C = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_WRAPPING = ("add", "sub", "mul", "lshift", "neg", "invert")
PRECEDENCE = {"mul": 10, "truediv": 10, "add": 9, "sub": 9, "lt": 7, "le": 7, "gt": 7, "ge": 7, "eq": 6, "ne": 6,
         "and": 2, "or": 1}  # C precedence of the operators printed without redundant parentheses


class CExpressions:
    """``expr``/``bare`` and a ``visit_<Node>`` per expression node (calls: builtin_calls.py)."""

    def bare(self, e: ir.Expr) -> str:
        """An expression without its outer parentheses (for conditions and initializers)."""
        text = self.expr(e)
        if text.startswith("(") and text.endswith(")") and self._balanced(text[1:-1]):
            return text[1:-1]
        return text

    @staticmethod
    def _balanced(text: str) -> bool:
        depth = 0
        for ch in text:
            depth += ch == "("
            depth -= ch == ")"
            if depth < 0:
                return False
        return depth == 0

    def expr(self, e: ir.Expr) -> str:
        self._note_type(e.type)
        return self.visit(e)

    def const(self, value, t: T.DType) -> str:
        t = t.strong
        if t.is_bool:
            return "true" if value else "false"
        if t.is_float:
            return _float_text(float(value), single=t.bits < 64)
        v = int(value)
        ct = self.ctype(t)
        if t.bits == 64:
            if t.kind == "i" and v == -(1 << 63):
                return "(-9223372036854775807L - 1L)"
            return f"{v}{'UL' if t.kind == 'u' else 'L'}" if v >= 0 else f"({v}L)"
        if t.bits == 32:
            if t.kind == "u":
                return f"{v}U"
            return str(v) if v >= 0 else ("(-2147483647 - 1)" if v == -(1 << 31) else f"({v})")
        return f"(({ct}){v})"

    def visit_Const(self, e: ir.Const) -> str:
        return self.const(e.value, e.type)

    def visit_Name(self, e: ir.Name) -> str:
        return self.names.user(e.name)

    def offset(self, tensor: str, index: Sequence[ir.Expr], flat: bool) -> str:
        if flat:
            return self.bare(index[0])
        buf = self.k.buffer(tensor)
        if isinstance(buf, (ir.Scratch, ir.LocalArray)):
            return row_major_static([self.expr(i) for i in index], buf.shape)
        return row_major([self.expr(i) for i in index], self.shape_names[tensor])

    def pointer(self, name: str) -> str:
        """The C expression addressing buffer ``name`` (scratch kept as raw bits is cast back)."""
        buf = self.k.buffer(name)
        cname = self.names.user(name)
        if isinstance(buf, ir.Scratch) and buf.dtype.name in self.scratch_storage:
            return f"(({self.local_prefix}{self.stype(buf.dtype)}*){cname})"
        return cname

    def visit_Load(self, e: ir.Load) -> str:
        buf = self.k.buffer(e.tensor)
        ptr = self.pointer(e.tensor)
        if self.debug:
            return self.checked_load(e, buf, ptr)
        off = self.offset(e.tensor, e.index, e.flat)
        name = buf.dtype.name
        if name == "f16" and not isinstance(buf, ir.VecParam):
            return self.load_f16(ptr, off)
        if name == "bf16" and not isinstance(buf, ir.VecParam):
            return f"{self.helper('bf16_to_f32')}({ptr}[{off}])"
        if name == "bool_" and not isinstance(buf, ir.VecParam):
            return f"({ptr}[{off}] != 0)"
        return f"{ptr}[{off}]"

    def vec_is_buffer(self, p) -> bool:
        """A dsl.Vec param long enough to travel as one read-only buffer (``vec_buffer_min``)."""
        return isinstance(p, ir.VecParam) and bool(self.vec_buffer_min) and p.length >= self.vec_buffer_min

    def visit_AtomicFetchAdd(self, e: ir.AtomicFetchAdd) -> str:
        buf = self.k.buffer(e.tensor)
        space = "scratch" if isinstance(buf, ir.Scratch) else "tensor"
        ptr, value = self.names.user(e.tensor), self.bare(e.value)
        if self.debug:  # a failed check adds 0 to element 0 (every buffer has one) and the launch raises
            fn = self.helper("fetch_add_checked", buf.dtype, space)
            return f"{fn}({ptr}, {self.checked_offset(e, 'atomic_add')}, {value})"
        return self.atomic_fetch_add(f"&{ptr}[{self.offset(e.tensor, e.index, e.flat)}]", buf.dtype, value, space)

    def helper_fetch_add_checked(self, name, t, dtype, space):
        qual = self.address_space(space)
        add = self.atomic_fetch_add("&p[o < 0 ? 0 : o]", dtype, f"o < 0 ? ({t})0 : v", space)
        return (f"{self.func_prefix}{t} {name}({qual}{t}* p, long o, {t} v) {{\n"
                f"  // debug mode: o < 0 is an index that failed its check (recorded); add 0 to element 0\n"
                f"  return {add};\n}}")

    def address_space(self, space: str) -> str:
        """The pointer qualifier of a tensor ('tensor') or scratch ('scratch') element in helpers."""
        return ""

    def visit_Shape(self, e: ir.Shape) -> str:
        return self.shape_names[e.tensor][e.axis]

    def visit_Size(self, e: ir.Size) -> str:
        return self.size_names[e.tensor]

    def _wrap(self, t: T.DType, text: str) -> str:
        """Results of narrow integer arithmetic wrap like numpy (C computes them in int)."""
        if self._narrow(t):
            return f"(({self.ctype(t)}){text})"
        return text

    def visit_Unary(self, e: ir.Unary) -> str:
        x = self.expr(e.operand)
        t = e.type
        if e.op == "not":
            return f"(!{x})"
        if e.op == "invert":
            return f"(!{x})" if t.is_bool else self._wrap(t, f"(~{x})")
        return self._wrap(t, f"(-{x})" if not x.startswith("-") else f"(- {x})")

    def visit_Binary(self, e: ir.Binary) -> str:
        t = e.type
        infix = self._infix(e)
        if infix is not None:
            return f"({infix[0]})"
        shift = self._pow2(e.right) if t.kind == "i" else None
        if shift is not None and e.op == "floordiv":
            return f"({self.expr(e.left)} >> {shift})"  # an arithmetic shift rounds toward -inf, like //
        if shift is not None and e.op == "mod":  # two's complement masking keeps Python's sign rule
            return f"({self.expr(e.left)} & {self.const((1 << shift) - 1, t)})"
        k = e.right.value if isinstance(e.right, ir.Const) and t.is_int else None
        if e.op in ("floordiv", "mod"):
            if t.is_bool or (t.kind == "u" and k not in (None, 0)):
                return f"({self.expr(e.left)} {'/' if e.op == 'floordiv' else '%'} {self.expr(e.right)})"
            return f"{self.helper(e.op, t)}({self.bare(e.left)}, {self.bare(e.right)})"
        if e.op in ("lshift", "rshift") and not (k is not None and 0 <= k < t.bits):
            fn = self.helper("shl" if e.op == "lshift" else "shr", t)  # count may leave [0, bits)
            return f"{fn}({self.bare(e.left)}, {self.bare(e.right)})"
        if e.op == "pow":
            return self._pow(t, e.left, e.right)
        if e.op == "truediv" and not t.is_float:
            raise CompileError(f"'/' on {t} operands reached the C emitter uncast", e.loc)
        text = f"({self.expr(e.left)} {_BINARY_C[e.op]} {self.expr(e.right)})"
        return self._wrap(t, text) if e.op in _WRAPPING else text

    def _infix(self, e: ir.Expr):
        """(text without outer parentheses, C precedence) for arithmetic, comparisons and logic.

        Parentheses are kept only where C would group differently from the IR, so
        ``((a + b) * c + d)`` reads ``(a + b) * c + d``; evaluation order is unchanged.
        """
        if isinstance(e, ir.Binary) and e.op in PRECEDENCE and not self._narrow(e.type) \
                and (e.op != "truediv" or e.type.is_float):
            sym = _BINARY_C[e.op]
        elif isinstance(e, ir.Compare):
            sym = _COMPARE_C[e.op]
        elif isinstance(e, ir.Logical):
            sym = "&&" if e.op == "and" else "||"
        else:
            return None
        self._note_type(e.type)
        prec = PRECEDENCE[e.op]
        return f"{self._operand(e.left, e, prec, False)} {sym} {self._operand(e.right, e, prec, True)}", prec

    def _operand(self, child: ir.Expr, parent: ir.Expr, prec: int, right: bool) -> str:
        inner = self._infix(child)
        if inner is None:
            return self.expr(child)
        text, cprec = inner
        if isinstance(parent, ir.Logical) and isinstance(child, ir.Logical) and child.op != parent.op:
            return f"({text})"  # 'a && b || c' is legal C, but nobody should have to remember why
        if cprec > prec or (cprec == prec and not right):
            return text
        return f"({text})"

    def operand_text(self, e: ir.Expr, prec: int) -> str:
        """``e`` as the right operand of an operator of C precedence ``prec``."""
        inner = self._infix(e)
        if inner is None:
            return self.expr(e)
        return inner[0] if inner[1] > prec else f"({inner[0]})"

    def _narrow(self, t: T.DType) -> bool:
        return t.is_bool or (t.is_int and t.bits < 32)

    @staticmethod
    def _pow2(e: ir.Expr):
        """k when ``e`` is the constant 2**k (k >= 1)."""
        if isinstance(e, ir.Const) and not isinstance(e.value, bool) and isinstance(e.value, int) \
                and e.value > 1 and e.value & (e.value - 1) == 0:
            return e.value.bit_length() - 1
        return None

    def visit_Compare(self, e: ir.Compare) -> str:
        return f"({self._infix(e)[0]})"

    def visit_Logical(self, e: ir.Logical) -> str:
        return f"({self._infix(e)[0]})"

    def visit_Select(self, e: ir.Select) -> str:
        """dsl.where: a call, so every operand is evaluated."""
        fn = self.helper("where", e.type)
        return f"{fn}({', '.join(self.bare(x) for x in (e.cond, e.if_true, e.if_false))})"

    def visit_Conditional(self, e: ir.Conditional) -> str:
        """a if c else b: only the taken side is evaluated."""
        parts = [self._operand(x, e, 0, False) for x in (e.cond, e.if_true, e.if_false)]
        return f"({parts[0]} ? {parts[1]} : {parts[2]})"

    def visit_Cast(self, e: ir.Cast) -> str:
        return self.cast(e.value, e.type)

    def cast(self, value: ir.Expr, dst: T.DType) -> str:
        src = value.type.strong
        dst = dst.strong
        x = self.expr(value)
        if dst.name == "f16":
            return f"{self.helper('round_f16')}({self._as_f32(src, x)})"
        if dst.name == "bf16":
            return f"{self.helper('round_bf16')}({self._as_f32(src, x)})"
        if src.compute == dst:
            return x
        if dst.is_bool:
            return f"({x} != 0)"
        if dst.is_int and src.is_float:  # truncate, saturate, NaN -> 0
            return f"{self.helper('f2i', dst, self.ctype(src))}({self.bare(value)})"
        return f"(({self.ctype(dst)}){x})"

    def float_literal(self, value: float, single: bool) -> str:
        return _float_text(value, single)

    def int_literal(self, value: int, t: T.DType) -> str:
        return self.const(value, t)

    def _as_f32(self, src: T.DType, x: str) -> str:
        return x if src.compute.name == "f32" else f"((float){x})"
