"""Types and uniformity: untyped IR + a specialization -> typed ``ir.Kernel``.

Three passes, in order (nothing is emitted before all of them succeed):

1. local type inference — a fixpoint: a local's type is the NumPy-promotion
   join of everything assigned to it (Python literals stay weak, NEP 50);
2. lowering — every node gets its concrete type and explicit ``Cast`` nodes
   are inserted, so backends never reason about promotion;
3. uniformity — which values may differ between the threads of a team;
   ``sync()`` under thread-dependent control flow is rejected, naming the line
   whose condition depends on the thread.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from dsl.lang import assigned
from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import log_format as LF
from dsl.lang import types as T
from dsl.lang.errors import CompileError, SourceLoc, TypeMismatch
from dsl.lang.check_arrays import LocalArrays, check_storage
from dsl.lang.check_funcs import FuncCalls
from dsl.lang.check_simd import SimdRules, elem
from dsl.lang.check_tiles import TileRules
from dsl.lang.check_unroll import MAX_UNROLL, MAX_UNROLL_TOTAL, StaticUnroll  # noqa: F401  (re-exported)
from dsl.lang.fold import convert_const as _convert_const, fold as _fold
from dsl.lang.frontend import Parsed
from dsl.lang.visitor import Visitor

_ARITH = ("add", "sub", "mul", "floordiv", "mod", "pow")
_BITWISE = ("bitand", "bitor", "bitxor")
_SHIFT = ("lshift", "rshift")


@dataclass(frozen=True)
class Binding:
    """What one launch fixes: TypeVar dtypes, tensor ranks, dsl.const values."""

    typevars: Tuple[Tuple[T.TypeVar, T.DType], ...] = ()
    ndims: Tuple[Tuple[str, int], ...] = ()
    consts: Tuple[Tuple[str, Any], ...] = ()

    def dtype(self, d) -> T.DType:
        if isinstance(d, T.TypeVar):
            return dict(self.typevars)[d]
        return d


def check_kernel(parsed: Parsed, binding: Binding, threads: int, func_parser) -> ir.Kernel:
    """Type-check one specialization. ``func_parser(Func) -> Parsed`` parses @dsl.func bodies."""
    params: List[ir.Param] = []
    ndims = dict(binding.ndims)
    consts = dict(binding.consts)
    for p in parsed.params:
        if p.kind == "tensor":
            params.append(ir.TensorParam(p.name, binding.dtype(p.annotation.dtype), ndims[p.name], p.annotation.access))
        elif p.kind == "vec":
            params.append(ir.VecParam(p.name, binding.dtype(p.annotation.dtype), p.annotation.length))
        else:
            ann = p.annotation.dtype if isinstance(p.annotation, T.ConstSpec) else p.annotation
            params.append(ir.ScalarParam(p.name, binding.dtype(ann), consts.get(p.name)))
    c = _Checker(parsed, params, func_parser, is_kernel=True)
    for tensor, count, loc in parsed.shape_unpacks:
        nd = ndims[tensor]
        if nd != count:
            raise CompileError(f"'{tensor}' has {nd} dimension(s) but its shape is unpacked into {count} names", loc)
    scratch = tuple(c.scratch_decl(s, binding) for s in parsed.scratch)
    c.buffers.update({s.name: s for s in scratch})
    c.buffers.update({a.name: c.array_decl(a, binding) for a in parsed.arrays})
    check_storage(scratch, [c.buffers[a.name] for a in parsed.arrays])
    body, local_types = c.run(parsed.body)
    funcs = tuple(c.funcs_done.values())
    varying = _Uniformity(c.buffers, funcs).run(body)
    arrays = tuple(b for b in c.buffers.values() if isinstance(b, ir.LocalArray) and b.name in c.dynamic)
    return ir.Kernel(parsed.name, tuple(params), scratch, body, local_types, funcs,
                     threads, frozenset(varying), parsed.filename, parsed.firstline, arrays)


class _Checker(StaticUnroll, SimdRules, TileRules, LocalArrays, FuncCalls, Visitor):
    """Types one kernel or @dsl.func body: ``visit_<ir class>`` per node; a statement returns
    its typed node (None before the final pass), an expression ``(typed node, semantic type)``
    where the semantic type may be weak and ``node.type`` never is."""

    def __init__(self, parsed: Parsed, params: List[ir.Param], func_parser, is_kernel: bool,
                 funcs_done=None, func_stack=(), func_results=None):
        self.parsed = parsed
        self.params = {p.name: p for p in params}
        self.buffers: Dict[str, Any] = {p.name: p for p in params if not isinstance(p, ir.ScalarParam)}
        self.scalar_types: Dict[str, T.DType] = {p.name: p.dtype for p in params if isinstance(p, ir.ScalarParam)}
        self.func_parser = func_parser
        self.is_kernel = is_kernel
        self.ltypes: Dict[str, Optional[T.DType]] = {}
        # (Func, argument types) -> its specialization, and its semantic (possibly weak) result type
        self.funcs_done: Dict[tuple, ir.Function] = funcs_done if funcs_done is not None else {}
        self.func_results: Dict[tuple, T.DType] = func_results if func_results is not None else {}
        self.func_stack = func_stack
        self.return_types: List[T.DType] = []
        self.final = False
        self.unrolled = 0  # body copies made by dsl.static_range in this pass
        self.static_vars = {n.var: n.loc for n in ir.walk(list(parsed.body)) if isinstance(n, ir.StaticFor)}
        self.dynamic: set = set()  # dsl.local arrays indexed at run time somewhere (the others become locals)
        self.readonly: Dict[str, str] = {}  # @dsl.func tensor parameters given read-only tensors -> why

    # ------------------------------------------------------------------ driver
    def run(self, body) -> Tuple[Tuple[ir.Stmt, ...], Tuple[Tuple[str, T.DType], ...]]:
        for _ in range(50):  # the type lattice is finite; this converges in a few rounds
            before = dict(self.ltypes)
            self.return_types = []
            self.unrolled = 0
            self.stmts(body)
            if self.ltypes == before:
                break
        self.final = True
        self.return_types = []
        self.unrolled = 0
        self.seen: set = set()  # locals assigned earlier in program order (final pass)
        typed = self.stmts(body)
        assigned.check(typed, set(self.ltypes) - set(self.scalar_types),
                       is_func=not self.is_kernel and self.parsed.returns_value,
                       loc=self.parsed.loc)
        local_types = tuple((n, t.strong) for n, t in self.ltypes.items() if t is not None)
        return typed, local_types

    # ------------------------------------------------------------------ helpers
    def error(self, node, msg, note=None, kind=CompileError) -> CompileError:
        """``kind``: the CompileError subclass (``TypeMismatch`` when types do not fit)."""
        return kind(msg, getattr(node, "loc", None), note)

    def cast(self, e: ir.Expr, to: T.DType) -> ir.Expr:
        if isinstance(to, T.SimdType):
            return self.to_vector(e, to)
        self.no_vector(e, e.type, f"a {to} value")
        to = to.strong
        if isinstance(e, ir.Const):
            _check_literal(e, to)
        if e.type == to:
            return e
        if isinstance(e, ir.Const):
            return ir.Const(_convert_const(e.value, to), type=to, loc=e.loc)
        return ir.Cast(e, type=to, loc=e.loc)

    def truth(self, e: ir.Expr, t: T.DType) -> ir.Expr:
        if isinstance(t, T.SimdType):
            raise self.error(e, f"a SIMD value ({t}) has no single truth value",
                             "test one lane (v[k]), reduce (dsl.reduce_max(dsl.i32(mask))) or pick lanes with "
                             "dsl.where(mask, a, b)", kind=TypeMismatch)
        if t.is_bool:
            return self.cast(e, T.bool_)
        zero = ir.Const(_convert_const(0, t.strong), type=t.strong, loc=e.loc)
        return ir.Compare("ne", e, zero, type=T.bool_, loc=e.loc)

    def local_type(self, name: str, node) -> Optional[T.DType]:
        if name in self.scalar_types:
            return self.scalar_types[name]
        t = self.ltypes.get(name)
        if self.final and name in self.static_vars and name not in self.ltypes:
            loop = self.static_vars[name]
            raise self.error(node, f"'{name}' is the variable of the dsl.static_range loop at line {loop.line}; it "
                                   "has a value only inside the loop body",
                             "the loop is unrolled at compile time; save what you need in another local")
        if self.final and (t is None or name not in self.seen):
            raise self.error(node, f"local '{name}' is used before it is assigned")
        return t

    def assign_type(self, name: str, t: Optional[T.DType], node) -> T.DType:
        if name in self.scalar_types:
            p = self.params[name]
            if p.const_value is not None:
                raise self.error(node, f"'{name}' is a dsl.const parameter and cannot be assigned")
            return self.scalar_types[name]
        if t is not None and not self.final:
            old = self.ltypes.get(name)
            simd = isinstance(t, T.SimdType) or isinstance(old, T.SimdType)
            self.ltypes[name] = self.join_simd(name, old, t, node) if simd else T.join(old, t)
        elif name not in self.ltypes:
            self.ltypes[name] = None
        return self.ltypes.get(name)

    def buffer(self, name: str, node):
        b = self.buffers.get(name)
        if b is None:
            raise self.error(node, f"'{name}' is not a tensor")
        return b

    # ------------------------------------------------------------------ statements
    def stmts(self, body) -> Tuple[ir.Stmt, ...]:
        out = []
        for s in body:
            r = self.visit(s)
            if isinstance(r, list):  # an unrolled dsl.static_range loop
                out.extend(r)
            elif r is not None:
                out.append(r)
        return tuple(out)

    def visit_Assign(self, s: ir.Assign):
        value, t = self.expr(s.value)
        lt = self.assign_type(s.name, t, s)
        if not self.final:
            return None
        self.seen.add(s.name)
        return ir.Assign(s.name, self.cast(value, lt), loc=s.loc)

    def index(self, name: str, index, flat: bool, node) -> Tuple[ir.Expr, ...]:
        b = self.buffer(name, node)
        ndim = 1 if flat or isinstance(b, ir.VecParam) else (len(b.shape) if isinstance(b, _SHAPED) else b.ndim)
        if len(index) != ndim:
            raise self.error(node, f"'{name}' has {ndim} dimension(s) but is indexed with {len(index)}; use one index "
                                   f"per dimension or {name}.flat[i]")
        out = []
        for ix in index:
            e, t = self.expr(ix)
            if t is not None and (isinstance(t, T.SimdType) or not (t.is_int or t.is_bool)):
                raise self.error(ix, f"index of '{name}' must be an integer, got {t}; convert with int(...)",
                                 kind=TypeMismatch)
            out.append(self.cast(e, T.i64) if t is not None else e)
        return tuple(out)

    def require_writable(self, name: str, node) -> None:
        """Writes go only through Out/InOut tensors and scratch (a func's parameter: as it was given)."""
        b = self.buffer(name, node)
        why = self.readonly.get(name)
        if why is None and (isinstance(b, ir.VecParam) or (isinstance(b, ir.TensorParam) and b.access == "in")):
            why = "read-only"
        if why is not None:
            raise self.error(node, f"writing to '{name}', which is {why}: only Out and InOut tensors (and scratch) "
                                   "are writable")

    def visit_Store(self, s: ir.Store):
        b = self.buffer(s.tensor, s)
        self.require_writable(s.tensor, s)
        index = self.index(s.tensor, s.index, s.flat, s)
        value, t = self.expr(s.value)
        element = self.array_element(b, index, s)
        if not self.final:
            return None
        if element is not None:
            self.seen.add(element)
            return ir.Assign(element, self.cast(value, b.dtype.compute), loc=s.loc)
        return ir.Store(s.tensor, index, self.cast(value, b.dtype.compute), s.flat, loc=s.loc)

    def atomic_operands(self, s):
        """Checked (dtype, index, value) of an atomic add; the element must be one the targets can add."""
        b = self.buffer(s.tensor, s)
        self.require_writable(s.tensor, s)
        if isinstance(b, ir.LocalArray):
            raise self.error(s, f"dsl.atomic_add on '{s.tensor}', a dsl.local array: it belongs to one thread; "
                                f"write {s.tensor}[i] += v")
        if b.dtype not in (T.i32, T.i64, T.u32, T.u64, T.f32, T.f64):
            raise self.error(s, f"dsl.atomic_add on '{s.tensor}' of {b.dtype}: supported for i32, i64, u32, u64, "
                                "f32 and f64 tensors")
        index = self.index(s.tensor, s.index, s.flat, s)
        value, t = self.expr(s.value)
        if isinstance(t, T.SimdType):
            raise self.error(s, f"dsl.atomic_add on '{s.tensor}' adds a scalar; {t} is a SIMD value "
                                "(reduce it first: dsl.reduce_add(v))", kind=TypeMismatch)
        return b.dtype, index, self.cast(value, b.dtype)

    def visit_AtomicAdd(self, s: ir.AtomicAdd):
        dtype, index, value = self.atomic_operands(s)
        if not self.final:
            return None
        return ir.AtomicAdd(s.tensor, index, value, s.flat, loc=s.loc)

    def visit_AtomicFetchAdd(self, e: ir.AtomicFetchAdd):
        dtype, index, value = self.atomic_operands(e)
        return ir.AtomicFetchAdd(e.tensor, index, value, e.flat, type=dtype, loc=e.loc), dtype

    def visit_If(self, s: ir.If):
        cond, t = self.expr(s.cond)
        body, orelse = self.stmts(s.body), self.stmts(s.orelse)
        if not self.final:
            return None
        cond = self.truth(cond, t)
        known = _fold(cond)
        if known is not None:  # a test of dsl.const params or static_range variables: one branch is code
            return list(body if known else orelse)
        return ir.If(cond, body, orelse, loc=s.loc)

    def visit_For(self, s: ir.For):
        bounds = []
        for b in (s.start, s.stop, s.step):
            e, t = self.expr(b)
            if t is not None and not (t.is_int or t.is_bool):
                raise self.error(b, f"range() takes integers, got {t}; convert with int(...)", kind=TypeMismatch)
            bounds.append(self.cast(e, T.i64) if t is not None else e)
        if self.final and _fold(bounds[2]) == 0:  # a dsl.const or module constant: refused here, not at run time
            raise self.error(s.step, "range() step must not be zero (it is 0 at compile time)")
        vt = self.assign_type(s.var, T.WEAK_INT, s)
        if vt is not None and not vt.is_int:
            raise self.error(s, f"loop variable '{s.var}' is also assigned a {vt} value; use another name",
                             kind=TypeMismatch)
        if self.final:
            self.seen.add(s.var)
        body = self.stmts(s.body)
        if not self.final:
            return None
        return ir.For(s.var, bounds[0], bounds[1], bounds[2], body, loc=s.loc)

    def visit_While(self, s: ir.While):
        cond, t = self.expr(s.cond)
        body = self.stmts(s.body)
        if not self.final:
            return None
        return ir.While(self.truth(cond, t), body, loc=s.loc)

    def visit_Break(self, s):
        return s

    def visit_Continue(self, s):
        return s

    def visit_Sync(self, s):
        return s

    def visit_Return(self, s: ir.Return):
        if s.value is None:
            return s
        value, t = self.expr(s.value)
        if t is not None:
            counts = {r.lanes for r in self.return_types + [t] if isinstance(r, T.SimdType)}
            if len(counts) > 1:
                raise self.error(s, f"this @dsl.func returns SIMD values of {' and '.join(map(str, sorted(counts)))} "
                                    "lanes; every SIMD result of one function needs the same lane count")
            self.return_types.append(t)
        if not self.final:
            return None
        ret = self.func_return_type()
        return ir.Return(self.cast(value, ret), loc=s.loc)

    def func_return_type(self) -> T.DType:
        """The join of the results; if one is a SIMD value, scalar results broadcast to its lanes."""
        t = None
        for r in self.return_types:
            t = T.join(t, elem(r))
        lanes = [r.lanes for r in self.return_types if isinstance(r, T.SimdType)]
        return T.SimdType(t.strong, lanes[0]) if lanes else t

    def visit_ExprStmt(self, s: ir.ExprStmt):
        value, _ = self.func_call(s.value, statement=True) if isinstance(s.value, ir.FuncCall) else self.expr(s.value)
        return ir.ExprStmt(value, loc=s.loc) if self.final else None

    def visit_Require(self, s: ir.Require):
        """``dsl.split``'s align: dropped when known and accepted, a CompileError when known and refused."""
        value, t = self.expr(s.value)
        if t is not None and (isinstance(t, T.SimdType) or not t.is_int):
            raise self.error(s.value, f"dsl.split(n, align): align must be an integer, got {t}", kind=TypeMismatch)
        known = _fold(self.cast(value, T.i64)) if t is not None else None
        if known is not None and known < s.least:
            raise self.error(s.value, f"dsl.split(n, align): align is {known}; it must be an integer >= {s.least} "
                                      "(the share of each thread is a multiple of it)")
        if not self.final or known is not None:
            return None
        return ir.Require(self.cast(value, T.i64), s.least, s.what, loc=s.loc)

    def visit_Log(self, s: ir.Log):
        typed = [self.expr(a) for a in s.args]
        for a, t in typed:
            self.no_vector(a, t, "a logged value")
        for spec, (a, t) in zip(LF.specs(s.pieces), typed):
            if t is not None and spec.conv in LF.NEEDS_INTEGER and t.is_float:
                raise self.error(a, f"log conversion %{spec.conv} needs an integer, got {t} (Python raises "
                                    f"TypeError here); use %d, %f or %s, or convert with int(...)")
        return dataclasses.replace(s, args=tuple(a for a, _ in typed)) if self.final else None

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ir.Expr) -> Tuple[ir.Expr, Optional[T.DType]]:
        """(typed node, semantic type); the semantic type may be weak, node.type never is."""
        return self.visit(e)

    def unsupported(self, node):
        raise CompileError(f"the type checker has no rule for {type(node).__name__} nodes (a compiler bug)",
                           getattr(node, "loc", None))

    def visit_Const(self, e: ir.Const):
        v = e.value
        t = T.WEAK_BOOL if isinstance(v, bool) else T.WEAK_INT if isinstance(v, int) else T.WEAK_FLOAT
        if e.type is not None:
            t = e.type
        return ir.Const(v, type=t.strong, loc=e.loc), t

    def visit_Name(self, e: ir.Name):
        p = self.params.get(e.name)
        if isinstance(p, ir.ScalarParam) and p.const_value is not None:
            return ir.Const(_convert_const(p.const_value, p.dtype), type=p.dtype, loc=e.loc), p.dtype
        t = self.local_type(e.name, e)
        return ir.Name(e.name, type=t.strong if t is not None else None, loc=e.loc), t

    def visit_Load(self, e: ir.Load):
        b = self.buffer(e.tensor, e)
        index = self.index(e.tensor, e.index, e.flat, e)
        t = b.dtype.compute
        element = self.array_element(b, index, e)
        if element is not None and self.final:
            return ir.Name(element, type=t, loc=e.loc), t
        return ir.Load(e.tensor, index, e.flat, type=t, loc=e.loc), t

    def visit_Shape(self, e: ir.Shape):
        b = self.buffer(e.tensor, e)
        shape = b.shape if isinstance(b, _SHAPED) else (b.length,) if isinstance(b, ir.VecParam) else None
        ndim = len(shape) if shape is not None else b.ndim
        axis = e.axis + ndim if e.axis < 0 else e.axis
        if not 0 <= axis < ndim:
            raise self.error(e, f"'{e.tensor}' has {ndim} dimension(s); shape[{e.axis}] is out of range")
        if shape is not None:
            return ir.Const(shape[axis], type=T.i64, loc=e.loc), T.WEAK_INT
        return ir.Shape(e.tensor, axis, type=T.i64, loc=e.loc), T.WEAK_INT

    def visit_Size(self, e: ir.Size):
        b = self.buffer(e.tensor, e)
        if isinstance(b, _SHAPED):
            n = 1
            for d in b.shape:
                n *= d
            return ir.Const(n, type=T.i64, loc=e.loc), T.WEAK_INT
        if isinstance(b, ir.VecParam):
            return ir.Const(b.length, type=T.i64, loc=e.loc), T.WEAK_INT
        return ir.Size(e.tensor, type=T.i64, loc=e.loc), T.WEAK_INT

    def visit_Unary(self, e: ir.Unary):
        v, t = self.expr(e.operand)
        if t is None:
            return v, None
        if isinstance(t, T.SimdType):
            return self.vector_unary(e, v, t)
        if e.op == "not":
            return ir.Unary("not", self.truth(v, t), type=T.bool_, loc=e.loc), T.bool_
        if e.op == "neg":
            if t.is_bool:
                raise self.error(e, "cannot negate a bool; use 'not'", kind=TypeMismatch)
            return ir.Unary("neg", v, type=t.strong, loc=e.loc), t
        # invert
        if t.is_float:
            raise self.error(e, f"'~' needs an integer or bool, got {t}", kind=TypeMismatch)
        if t.is_bool:
            return ir.Unary("not", self.cast(v, T.bool_), type=T.bool_, loc=e.loc), t
        return ir.Unary("invert", v, type=t.strong, loc=e.loc), t

    def visit_Binary(self, e: ir.Binary):
        l, lt = self.expr(e.left)
        r, rt = self.expr(e.right)
        if lt is None or rt is None:
            return l, None
        if isinstance(lt, T.SimdType) or isinstance(rt, T.SimdType):
            return self.vector_binary(e, l, lt, r, rt)
        op = e.op
        sym = ir._SYMBOLS[op]
        if op in _ARITH or op == "truediv":
            if lt.is_bool and rt.is_bool:
                raise self.error(e, f"'{sym}' on two bools; convert one with int(...)", kind=TypeMismatch)
            t = T.promote(lt, rt)
            if op == "truediv" and not t.is_float:
                t = T.WEAK_FLOAT if t.weak else T.f64
        elif op in _BITWISE:
            if lt.is_float or rt.is_float:
                raise self.error(e, f"'{sym}' needs integers or bools, got {lt} and {rt}", kind=TypeMismatch)
            t = T.promote(lt, rt)
        else:  # shifts
            if not (lt.is_int and rt.is_int):
                raise self.error(e, f"'{sym}' needs integers, got {lt} and {rt}", kind=TypeMismatch)
            t = T.promote(lt, rt)
        if op == "pow":
            _check_exponent(t, r, e)
        return ir.Binary(op, self.cast(l, t), self.cast(r, t), type=t.strong, loc=e.loc), t

    def visit_Compare(self, e: ir.Compare):
        l, lt = self.expr(e.left)
        r, rt = self.expr(e.right)
        if lt is None or rt is None:
            return l, T.bool_
        if isinstance(lt, T.SimdType) or isinstance(rt, T.SimdType):
            return self.vector_compare(e, l, lt, r, rt)
        t = T.promote(lt, rt)
        rtype = T.WEAK_BOOL if lt.weak and rt.weak else T.bool_
        return ir.Compare(e.op, self.cast(l, t), self.cast(r, t), type=T.bool_, loc=e.loc), rtype

    def visit_Logical(self, e: ir.Logical):
        l, lt = self.expr(e.left)
        r, rt = self.expr(e.right)
        if lt is None or rt is None:
            return l, T.bool_
        return ir.Logical(e.op, self.truth(l, lt), self.truth(r, rt), type=T.bool_, loc=e.loc), T.bool_

    def _choice(self, e):
        """The operands of a Select or Conditional: a bool condition, both sides of the promoted type."""
        c, ct = self.expr(e.cond)
        a, at = self.expr(e.if_true)
        b, bt = self.expr(e.if_false)
        if at is None or bt is None or ct is None:
            return a if at is not None else b, at or bt
        if any(isinstance(x, T.SimdType) for x in (ct, at, bt)):
            if isinstance(e, ir.Conditional):
                raise self.error(e, "'a if c else b' on SIMD values: use dsl.where(mask, a, b), which picks per lane")
            return self.vector_select(e, c, ct, a, at, b, bt)
        t = T.promote(at, bt)
        return type(e)(self.truth(c, ct), self.cast(a, t), self.cast(b, t), type=t.strong, loc=e.loc), t

    def visit_Select(self, e: ir.Select):
        return self._choice(e)

    def visit_Conditional(self, e: ir.Conditional):
        return self._choice(e)

    def visit_Cast(self, e: ir.Cast):
        v, t = self.expr(e.value)
        target = e.type
        if t is None:
            return v, target
        if isinstance(t, T.SimdType):
            return self.vector_cast(e, v, t)
        if target.is_storage_only:  # f16(v) rounds through f16; values compute as f32
            return ir.Cast(ir.Cast(v, type=target, loc=e.loc), type=T.f32, loc=e.loc), T.f32
        return self.cast(v, target), target

    def visit_TensorRef(self, e: ir.TensorRef):
        raise self.error(e, f"tensor '{e.tensor}' used as a value; read an element: {e.tensor}[i]",
                         kind=TypeMismatch)

    def visit_NDim(self, e: ir.NDim):
        b = self.buffer(e.tensor, e)
        nd = len(b.shape) if isinstance(b, _SHAPED) else 1 if isinstance(b, ir.VecParam) else b.ndim
        return ir.Const(nd, type=T.i64, loc=e.loc), T.WEAK_INT

    def visit_Call(self, e: ir.Call):
        spec = B.BUILTINS.get(e.name)
        if spec is None or spec.kind == "lowered":
            raise self.error(e, f"{e.name}() is not a builtin that can be called here")
        if spec.kind == "tile":
            return self.tile_call(e)
        if spec.kind == "hint":
            return self.hint_call(e)
        typed = [self.expr(a) for a in e.args]
        if any(t is None for _, t in typed):
            return ir.Const(0, type=None, loc=e.loc), None
        if any(isinstance(t, T.SimdType) for _, t in typed):
            if spec.kind != "call":
                raise self.error(e, f"{e.name}() takes no SIMD values", kind=TypeMismatch)
            return self.vector_call(e, spec, typed)
        try:
            argt, rest = spec.rule([t for _, t in typed])
        except B.BuiltinTypeError as err:
            raise self.error(e, f"{e.name}(): {err}", kind=TypeMismatch) from None
        args = tuple(self.cast(a, argt) for a, _ in typed)
        if e.name == "pow":
            _check_exponent(argt, args[1], e)
        if spec.literal_arg and args:
            args = _literal_arg(spec, *typed[0])
        return ir.Call(e.name, args, type=rest.strong, loc=e.loc), rest

    def hint_call(self, e: ir.Call):
        """``dsl.prefetch(a, index)``: a tensor of this kernel and an integer element offset (i64)."""
        tensor, index = e.args
        if isinstance(self.buffer(tensor.tensor, tensor), ir.VecParam):
            raise self.error(tensor, f"dsl.{e.name}(a, index): '{tensor.tensor}' is a dsl.Vec, passed by value; "
                                     "a prefetch takes a tensor in memory", kind=TypeMismatch)
        v, t = self.expr(index)
        if t is not None and (isinstance(t, T.SimdType) or not t.is_int):
            raise self.error(index, f"dsl.{e.name}(a, index): index must be an integer element offset, got {t}",
                             kind=TypeMismatch)
        return ir.Call(e.name, (tensor, self.cast(v, T.i64) if t is not None else v), type=T.i32, loc=e.loc), T.i32

    # ------------------------------------------------------------------ scratch
    def scratch_decl(self, s, binding: Binding) -> ir.Scratch:
        dims = []
        for d in s.shape:
            e, t = self.expr(d)
            v = _fold(e)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise CompileError(f"scratch '{s.name}': every dimension must be a positive integer known at compile "
                                   "time (a literal, a module-level constant or a dsl.const parameter)", d.loc)
            dims.append(v)
        return ir.Scratch(s.name, binding.dtype(s.dtype), tuple(dims), loc=s.loc, index=s.index)


# ---------------------------------------------------------------------- uniformity

class _Uniformity(Visitor):
    """Which locals may differ between the threads of a team; where sync() is legal.

    A ``@dsl.func`` call is thread-dependent when an argument is, or when the function (or one
    it calls) reads a thread-dependent builtin (``Builtin.varying``: ``dsl.thread_id()``), does a
    fetch-and-add, or reads a tensor parameter other threads may write (scratch, Out, InOut),
    as the same reads in a kernel body are.

    ``visit_<stmt class>`` per statement; ``self.div`` is the location of the innermost
    enclosing thread-dependent condition (None in uniform code), ``self.check`` whether this
    is the final pass that reports a sync() under it."""

    def __init__(self, buffers, funcs=()):
        self.buffers = buffers
        self.varying: set = set()
        self.thread_funcs = _thread_dependent_funcs(funcs)
        self.div: Optional[SourceLoc] = None
        self.check = False

    def run(self, body) -> set:
        for _ in range(50):
            before = set(self.varying)
            self.returned = None
            self.block(body, None, check=False)
            if self.varying == before:
                break
        self.returned = None
        self.block(body, None, check=True)
        return self.varying

    def is_varying(self, e: ir.Expr) -> bool:
        for n in ir.walk(e):
            if isinstance(n, ir.Call) and _varying_builtin(n.name):
                return True
            if isinstance(n, ir.FuncCall) and n.func in self.thread_funcs:
                return True
            if isinstance(n, ir.Name) and n.name in self.varying:
                return True
            if isinstance(n, ir.AtomicFetchAdd):
                return True  # each thread gets its own old value
            if isinstance(n, ir.Load):
                b = self.buffers.get(n.tensor)
                if isinstance(b, _SHAPED) or (isinstance(b, ir.TensorParam) and b.access != "in"):
                    return True  # other threads may write it (local arrays: conservatively)
        return False

    def block(self, stmts, div: Optional[SourceLoc], check: bool) -> None:
        outer = self.div, self.check
        self.check = check
        try:
            for s in stmts:
                self.div = div
                self.visit(s)
        finally:
            self.div, self.check = outer

    def unsupported(self, s) -> None:
        pass  # statements that neither assign, branch nor synchronize

    def visit_Assign(self, s: ir.Assign) -> None:
        if self.div or self.returned or self.is_varying(s.value):
            self.varying.add(s.name)

    def visit_If(self, s: ir.If) -> None:
        inner = self.div or self.returned or (s.loc if self.is_varying(s.cond) else None)
        self.block(s.body, inner, self.check)
        self.block(s.orelse, inner, self.check)

    def _loop(self, s, heads) -> None:
        inner = self.div or self.returned or (s.loc if any(self.is_varying(h) for h in heads) else None) \
            or self.divergent_exit(s.body, None)
        if isinstance(s, ir.For) and inner:
            self.varying.add(s.var)
        self.block(s.body, inner, self.check)

    def visit_For(self, s: ir.For) -> None:
        self._loop(s, (s.start, s.stop, s.step))

    def visit_While(self, s: ir.While) -> None:
        self._loop(s, (s.cond,))

    def visit_Return(self, s: ir.Return) -> None:
        d = self.div or self.returned
        if d and self.returned is None:
            self.returned = s.loc

    def visit_Sync(self, s: ir.Sync) -> None:
        d = self.div or self.returned
        if self.check and d:
            why = "returns early" if d is self.returned and self.div is None else "depends on the thread"
            line = d.source_line().strip()
            raise CompileError(
                "dsl.sync() under thread-dependent control flow: every thread of the team must reach the same "
                "sync() calls", s.loc,
                f"line {d.line} ({line!r}) {why}; move sync() out of it or make the condition the same for "
                "every thread")

    def divergent_exit(self, stmts, div) -> Optional[SourceLoc]:
        """A break/continue under thread-dependent control (not inside a nested loop)."""
        for s in stmts:
            if isinstance(s, (ir.Break, ir.Continue)) and div:
                return div
            if isinstance(s, ir.If):
                inner = div or (s.loc if self.is_varying(s.cond) else None)
                r = self.divergent_exit(s.body, inner) or self.divergent_exit(s.orelse, inner)
                if r:
                    return r
        return None


def _varying_builtin(name: str) -> bool:
    b = B.BUILTINS.get(name)
    return b is not None and b.varying


def _varying_read(n: ir.Node, f: ir.Function) -> bool:
    """Whether node ``n`` of function ``f`` may give each thread its own value."""
    if isinstance(n, ir.Call):
        return _varying_builtin(n.name)
    if isinstance(n, ir.AtomicFetchAdd):
        return True
    if isinstance(n, (ir.Load, ir.VLoad)):
        b = f.buffer(n.tensor)
        return isinstance(b, ir.Scratch) or b.access != "in"
    return False


def _thread_dependent_funcs(funcs) -> set:
    """Names of the functions whose result may read ``thread_id()``, directly or through a callee."""
    calls = {f.name: {n.func for n in ir.walk(list(f.body)) if isinstance(n, ir.FuncCall)} for f in funcs}
    out = {f.name for f in funcs if any(_varying_read(n, f) for n in ir.walk(list(f.body)))}
    changed = True
    while changed:
        changed = False
        for name, callees in calls.items():
            if name not in out and callees & out:
                out.add(name)
                changed = True
    return out


# ---------------------------------------------------------------------- constants

_SHAPED = (ir.Scratch, ir.LocalArray)  # buffers whose shape is known at compile time


def _check_literal(e: ir.Const, to: T.DType) -> None:
    """An integer literal must fit the type it takes (numpy 2 raises OverflowError there too)."""
    v = e.value
    if not isinstance(v, int) or isinstance(v, bool) or to.is_bool:
        return
    if to.is_int:
        lo, hi = (0, (1 << to.bits) - 1) if to.kind == "u" else (-(1 << to.bits - 1), (1 << to.bits - 1) - 1)
        if not lo <= v <= hi:
            raise CompileError(f"integer literal {v} does not fit {to}: accepted {lo}..{hi}", e.loc,
                               "write a value in range, or compute in a wider type (i64(...), u64(...))")
    elif abs(v) >= 1 << 1024:
        raise CompileError(f"integer literal {v} is too large for {to}", e.loc)


def _check_exponent(t: T.DType, exponent: ir.Expr, node) -> None:
    """``int ** negative constant`` is a compile error: the exact result is not an integer."""
    k = _fold(exponent)
    if t.is_int and isinstance(k, int) and k < 0:
        raise CompileError(f"integer ** {k}: a negative exponent of an integer is not an integer "
                           "(numpy raises here)", node.loc,
                           "use a float base (2.0 ** -1) or float(x) ** -1; at run time a negative integer "
                           "exponent gives the power truncated toward zero")


def _literal_arg(spec: B.Builtin, arg: ir.Expr, t: T.DType) -> Tuple[ir.Expr, ...]:
    """The argument of a builtin whose one optional argument is a compile-time choice
    (``dsl.tile_id(axis)``): () for the first choice (the default), else the folded value as an
    i64 literal, so backends read it from the call."""
    v = _fold(arg)
    choices = spec.literal_arg
    if t.is_int and isinstance(v, int) and v in choices:
        return () if v == choices[0] else (ir.Const(v, type=T.i64, loc=arg.loc),)
    accepted = ", ".join(map(str, choices[:-1])) + f" or {choices[-1]}"
    got = repr(v) if v is not None else f"a value known only at run time ({t.strong})"
    raise CompileError(f"dsl.{spec.name}() takes an integer literal {accepted} (a grid axis), got {got}", arg.loc,
                       "the axis must be known at compile time: a literal, a dsl.const parameter, a module-level "
                       "int constant or a dsl.static_range variable")
