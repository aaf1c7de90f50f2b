"""Type rules of SIMD values (``dsl.simd``), mixed into the checker (dsl/lang/check.py).

Every vector operation is lowered here to the few SIMD nodes of dsl/lang/ir.py, with
operands made uniform first: scalars broadcast (``Splat``), vectors converted to the result's
element type (``VecOp("cast")``).  Element types follow the scalar rules (NEP 50 promotion,
Python literals weak), so ``v * 2.0`` keeps ``v``'s f32 lanes, as numpy does.
"""
from __future__ import annotations

from typing import Optional

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.fold import fold as _fold

_NO_VECTOR_FORM = {
    "floordiv": "'//' on SIMD values is not supported; divide floats and use dsl.floor",
    "mod": "'%' on SIMD values is not supported; compute it per lane with v[k]",
    "pow": "'**' on SIMD values is not supported; multiply, or compute per lane with v[k]",
    "lshift": "shifts of SIMD values are not supported; multiply by a power of two",
    "rshift": "shifts of SIMD values are not supported; compute them per lane with v[k]",
}


def elem(t):
    """The element type of a SIMD type, or ``t`` itself for a scalar type."""
    return t.elem if isinstance(t, T.SimdType) else t


class SimdRules:
    """Checker methods for SIMD values; ``self`` is the checker (``expr``, ``cast``, ``error``)."""

    # ------------------------------------------------------------------ helpers
    def lanes(self, e: ir.Expr, what: str) -> int:
        """The compile-time lane count ``e`` of ``what`` (``dsl.splat``, ``x.vload``)."""
        typed, _ = self.expr(e)
        n = _fold(typed)
        if isinstance(n, bool) or not isinstance(n, int) or n not in T.SIMD_LANES:
            raise self.error(e, f"{what}: the lane count must be one of {', '.join(map(str, T.SIMD_LANES))}, "
                                "known at compile time" + ("" if n is None else f"; got {n}"),
                             "use a literal, a dsl.const parameter or a module-level constant")
        return n

    def to_vector(self, e: ir.Expr, target: T.SimdType) -> ir.Expr:
        """``e`` (typed) as a value of SIMD type ``target``: broadcast a scalar, convert lanes."""
        if isinstance(e.type, T.SimdType):
            if e.type.lanes != target.lanes:
                raise self.error(e, f"SIMD values of {e.type.lanes} and {target.lanes} lanes do not mix")
            if e.type == target:
                return e
            return ir.VecOp("cast", (e,), type=target, loc=e.loc)
        return ir.Splat(self.cast(e, target.elem), type=target, loc=e.loc)

    def vector_lanes(self, node, types) -> int:
        """The common lane count of the SIMD types among ``types``; an error if they differ."""
        counts = {t.lanes for t in types if isinstance(t, T.SimdType)}
        if len(counts) > 1:
            raise self.error(node, f"SIMD values of {' and '.join(map(str, sorted(counts)))} lanes do not mix; "
                                   "every operand needs the same lane count")
        return counts.pop()

    def no_vector(self, node, t, what: str) -> None:
        if isinstance(t, T.SimdType):
            raise self.error(node, f"{what} needs a scalar, got a SIMD value ({t})",
                             "read one lane with v[k] or reduce with dsl.reduce_add/max/min(v)")

    # ------------------------------------------------------------------ operators
    def vector_binary(self, e: ir.Binary, l, lt, r, rt):
        n = self.vector_lanes(e, (lt, rt))
        le, re = elem(lt), elem(rt)
        if e.op in _NO_VECTOR_FORM:
            raise self.error(e, _NO_VECTOR_FORM[e.op])
        if e.op in ("bitand", "bitor", "bitxor"):
            if le.is_float or re.is_float:
                raise self.error(e, f"'{ir._SYMBOLS[e.op]}' needs integer or bool lanes, got {le} and {re}")
        elif le.is_bool and re.is_bool:
            raise self.error(e, f"'{ir._SYMBOLS[e.op]}' on bool lanes; convert them with dsl.i32(v)")
        t = T.promote(le, re)
        if e.op == "truediv" and not t.is_float:
            t = T.f64
        target = T.SimdType(t.strong, n)
        return ir.VecOp(e.op, (self.to_vector(l, target), self.to_vector(r, target)), type=target,
                        loc=e.loc), target

    def vector_compare(self, e: ir.Compare, l, lt, r, rt):
        n = self.vector_lanes(e, (lt, rt))
        t = T.SimdType(T.promote(elem(lt), elem(rt)).strong, n)
        mask = T.SimdType(T.bool_, n)
        return ir.VecOp(e.op, (self.to_vector(l, t), self.to_vector(r, t)), type=mask, loc=e.loc), mask

    def vector_unary(self, e: ir.Unary, v, t: T.SimdType):
        if e.op == "not":
            raise self.error(e, "'not' of a SIMD value: a vector has no single truth value; use ~mask for "
                                "lane-wise not")
        if e.op == "neg":
            if t.is_bool:
                raise self.error(e, "cannot negate bool lanes; use ~mask")
            return ir.VecOp("neg", (v,), type=t, loc=e.loc), t
        if t.is_float:
            raise self.error(e, f"'~' needs integer or bool lanes, got {t}")
        return ir.VecOp("not" if t.is_bool else "invert", (v,), type=t, loc=e.loc), t

    def vector_select(self, e: ir.Select, c, ct, a, at, b, bt):
        n = self.vector_lanes(e, (ct, at, bt))
        if not elem(ct).is_bool:
            raise self.error(e.cond, f"dsl.where on SIMD values needs a bool mask (a comparison), got {ct}")
        t = T.SimdType(T.promote(elem(at), elem(bt)).strong, n)
        mask = self.to_vector(c, T.SimdType(T.bool_, n))
        return ir.VecOp("where", (mask, self.to_vector(a, t), self.to_vector(b, t)), type=t, loc=e.loc), t

    def vector_cast(self, e: ir.Cast, v, t: T.SimdType):
        target = e.type.strong
        if target.is_storage_only:
            raise self.error(e, f"{target.name}(v) on a SIMD value: f16/bf16 are storage types; vstore rounds "
                                "f32 lanes into an f16/bf16 tensor")
        out = T.SimdType(target, t.lanes)
        return self.to_vector(v, out), out

    def vector_call(self, e: ir.Call, spec, typed):
        """A builtin of kind "call" with a SIMD argument: lane by lane, typed by its scalar rule."""
        n = self.vector_lanes(e, [t for _, t in typed])
        if spec.name == "pow":
            raise self.error(e, _NO_VECTOR_FORM["pow"])
        try:
            argt, rest = spec.rule([elem(t) for _, t in typed])
        except B.BuiltinTypeError as err:
            raise self.error(e, f"{e.name}(): {err}") from None
        at, rt = T.SimdType(argt.strong, n), T.SimdType(rest.strong, n)
        args = tuple(self.to_vector(a, at) for a, _ in typed)
        return ir.VecOp(e.name, args, type=rt, loc=e.loc), rt

    # ------------------------------------------------------------------ SIMD nodes
    def visit_Splat(self, e: ir.Splat):
        v, t = self.expr(e.value)
        n = self.lanes(e.lanes, "dsl.splat(value, lanes)")
        if t is None:
            return v, None
        self.no_vector(e.value, t, "dsl.splat(value, lanes)")
        st = T.SimdType(t.strong, n)
        return ir.Splat(self.cast(v, t.strong), type=st, loc=e.loc), st

    def visit_VLoad(self, e: ir.VLoad):
        b = self.simd_buffer(e.tensor, e, "vload")
        n = self.lanes(e.lanes, f"{e.tensor}.vload(i, lanes)")
        index = self.simd_index(e.tensor, e.index)
        t = T.SimdType(b.dtype.compute, n)
        return ir.VLoad(e.tensor, index, type=t, loc=e.loc), t

    def visit_VStore(self, s: ir.VStore):
        b = self.simd_buffer(s.tensor, s, "vstore")
        self.require_writable(s.tensor, s)
        index = self.simd_index(s.tensor, s.index)
        v, t = self.expr(s.value)
        if t is not None and not isinstance(t, T.SimdType):
            raise self.error(s.value, f"{s.tensor}.vstore(i, v) stores a SIMD value, got a scalar {t}; "
                                      "use dsl.splat(v, lanes) or a plain element store")
        if not self.final:
            return None
        value = self.to_vector(v, T.SimdType(b.dtype.compute, t.lanes))
        return ir.VStore(s.tensor, index, value, loc=s.loc)

    def simd_buffer(self, name: str, node, what: str):
        b = self.buffer(name, node)
        if isinstance(b, ir.LocalArray):
            raise self.error(node, f"{name}.{what}: dsl.local arrays hold their elements in registers; read and "
                                   f"write them by element ({name}[i]), or declare an array of dsl.simd values")
        return b

    def simd_index(self, name: str, index: ir.Expr) -> ir.Expr:
        i, t = self.expr(index)
        if t is not None and (isinstance(t, T.SimdType) or not (t.is_int or t.is_bool)):
            raise self.error(index, f"the flat index of '{name}' must be an integer, got {t}")
        return self.cast(i, T.i64) if t is not None else i

    def visit_Lane(self, e: ir.Lane):
        v, t = self.expr(e.value)
        if t is None:
            return v, None
        if not isinstance(t, T.SimdType):
            raise self.error(e, f"only tensors, their .flat, scratch, dsl.local arrays and SIMD values can be "
                                f"indexed; this is a {t}")
        k, _ = self.expr(e.lane)
        lane = _fold(k)
        if isinstance(lane, bool) or not isinstance(lane, int):
            raise self.error(e.lane, "the lane of a SIMD value must be known at compile time: v[k] with k a "
                                     "literal, a dsl.const or a dsl.static_range variable")
        if not -t.lanes <= lane < t.lanes:
            raise self.error(e.lane, f"lane {lane} is out of range for {t} (0..{t.lanes - 1})")
        return ir.Lane(v, ir.Const(lane % t.lanes, type=T.i64, loc=e.loc), type=t.elem, loc=e.loc), t.elem

    def visit_VReduce(self, e: ir.VReduce):
        v, t = self.expr(e.value)
        if t is None:
            return v, None
        if not isinstance(t, T.SimdType):
            raise self.error(e, f"dsl.reduce_{e.op}(v) reduces a SIMD value, got a scalar {t}")
        if t.is_bool:
            raise self.error(e, f"dsl.reduce_{e.op} on bool lanes; convert the mask with dsl.i32(mask) first")
        return ir.VReduce(e.op, v, type=t.elem, loc=e.loc), t.elem

    def join_simd(self, name: str, old, new, node) -> Optional[T.SimdType]:
        """The type of local ``name`` assigned values of types ``old`` then ``new``, one a SIMD type."""
        if old is None:
            return new
        if isinstance(old, T.SimdType) and isinstance(new, T.SimdType) and old.lanes == new.lanes:
            return T.SimdType(T.promote(old.elem, new.elem).strong, old.lanes)
        raise self.error(node, f"local '{name}' is assigned both {old} and {new} values; a local holds one kind "
                               "of value: a scalar, or SIMD values of one lane count")

