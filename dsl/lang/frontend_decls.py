"""The parser's declarations: ``dsl.scratch`` team buffers, ``dsl.local`` per-thread arrays,
``dsl.simd`` types named in code, and ``lo, hi = dsl.split(n)`` lowered to plain arithmetic.

A mixin of the frontend's visitor (``self`` has ``expr``, ``error``, ``call_args``, ...), kept
apart because these statements declare storage rather than compute values."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, List, Tuple

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError, SourceLoc


@dataclass(frozen=True)
class ScratchDecl:
    """One ``dsl.scratch(...)`` declaration; ``index`` (declaration order) is its identity and
    ``loc`` the position of the call (so two declarations on one line differ by column)."""

    name: str
    shape: Tuple[ir.Expr, ...]
    dtype: Any  # DType | TypeVar
    loc: SourceLoc
    index: int = 0


@dataclass(frozen=True)
class SimdDecl:
    """``dsl.simd(dtype, lanes)`` in a declaration; ``lanes`` may be a dsl.const parameter."""

    elem: Any
    lanes: ir.Expr
    loc: SourceLoc


@dataclass(frozen=True)
class LocalDecl:
    """One ``a = dsl.local(shape, dtype)`` declaration: a per-thread array (dtype a DType,
    TypeVar or SimdType)."""

    name: str
    shape: Tuple[ir.Expr, ...]
    dtype: Any
    loc: SourceLoc


class Declarations:
    """``visit_Assign``'s helpers for declaration calls; mixed into the frontend's visitor."""

    def lower_split(self, names, call: ast.Call, s) -> List[ir.Stmt]:
        """lo, hi = dsl.split(n, align, grid): chunk = ceil(ceil(n / parts) / align) * align,
        where parts are the team's threads, or every thread of every team with grid=True."""
        if len(names) != 2:
            raise self.error(s, "dsl.split(n) returns two values: lo, hi = dsl.split(n)")
        raw = self.call_args(call, ("n", "align", "grid"), required=1, raw=True)
        grid = raw.pop("grid", None)
        if grid is not None and not (isinstance(grid, ast.Constant) and isinstance(grid.value, bool)):
            raise self.error(grid, "dsl.split(..., grid=) takes the literal True or False")
        args = {k: self.expr(v) for k, v in raw.items()}
        loc = self.loc(call)

        def call_(name, axis=0):
            return ir.Call(name, (ir.Const(axis, loc=loc),) if axis else (), loc=loc)

        def mul(a, b):
            return ir.Binary("mul", a, b, loc=loc)

        def ceil_div(a, b):
            return ir.Unary("neg", ir.Binary("floordiv", ir.Unary("neg", a, loc=loc), b, loc=loc), loc=loc)

        parts, index = call_("num_threads"), call_("thread_id")
        if grid is not None and grid.value:  # the flattened grid, axis 0 fastest
            tiles = mul(mul(call_("num_tiles"), call_("num_tiles", 1)), call_("num_tiles", 2))
            tile = ir.Binary("add", call_("tile_id"), mul(call_("num_tiles"), ir.Binary(
                "add", call_("tile_id", 1), mul(call_("num_tiles", 1), call_("tile_id", 2)), loc=loc)), loc=loc)
            parts = mul(tiles, parts)
            index = ir.Binary("add", mul(tile, call_("num_threads")), index, loc=loc)
        n, chunk, lo = self.tmp(), self.tmp(), self.tmp()
        out = [ir.Assign(n, args["n"], loc=loc)]
        c = ceil_div(ir.Name(n, loc=loc), parts)
        if "align" in args:  # checked >= 1: at compile time when known, else at run time (ir.Require)
            align = args["align"]
            if not isinstance(align, (ir.Const, ir.Name)):  # evaluated once, by the check and the chunk
                a = self.tmp()
                out.append(ir.Assign(a, align, loc=loc))
                align = ir.Name(a, loc=loc)
            out.append(ir.Require(align, 1, "split_align", loc=loc))
            c = mul(ceil_div(c, align), align)
        out.append(ir.Assign(chunk, c, loc=loc))
        out.append(ir.Assign(lo, ir.Call("min", (mul(index, ir.Name(chunk, loc=loc)), ir.Name(n, loc=loc)),
                                         loc=loc), loc=loc))
        hi = ir.Call("min", (ir.Binary("add", ir.Name(lo, loc=loc), ir.Name(chunk, loc=loc), loc=loc),
                             ir.Name(n, loc=loc)), loc=loc)
        out.extend(self.assign_to(names[0], ir.Name(lo, loc=loc), s))
        out.extend(self.assign_to(names[1], hi, s))
        return out

    def declare_scratch(self, target: ast.Name, call: ast.Call, s) -> List[ir.Stmt]:
        if not (self.top and self.is_kernel):
            raise self.error(s, "dsl.scratch(...) must be declared at the top level of a kernel body")
        name = target.id
        if self.is_tensor(name) or name in self.params:
            raise self.error(target, f"'{name}' is already a parameter or scratch buffer")
        if assigned_counts(self.fdef).count(name) > 1:
            raise self.error(target, f"scratch buffer '{name}' is assigned more than once")
        args = self.call_args(call, ("shape", "dtype"), required=2, raw=True)
        shape_node = args["shape"]
        elts = shape_node.elts if isinstance(shape_node, (ast.Tuple, ast.List)) else [shape_node]
        shape = tuple(self.expr(e) for e in elts)
        dtype = self.resolve.value(args["dtype"])
        if not isinstance(dtype, (T.DType, T.TypeVar)):
            raise self.error(args["dtype"], "dsl.scratch(shape, dtype): dtype must be a dtype like f32 or a TypeVar")
        self.scratch.append(ScratchDecl(name, shape, dtype, self.loc(call), len(self.scratch)))
        return []

    def declare_local(self, target: ast.Name, call: ast.Call, s) -> List[ir.Stmt]:
        """``a = dsl.local(shape, dtype)``: a per-thread array, zeroed where the statement runs."""
        if not self.is_kernel:
            raise self.error(s, "dsl.local(...) arrays are declared in kernels, not in a @dsl.func")
        name = target.id
        if name in self.params or any(x.name == name for x in self.scratch):
            raise self.error(target, f"'{name}' is already a parameter or scratch buffer")
        if assigned_counts(self.fdef).count(name) > 1:
            raise self.error(target, f"local array '{name}' is assigned more than once; declare each dsl.local "
                                     "array once (the statement re-zeroes it each time it runs)")
        args = self.call_args(call, ("shape", "dtype"), required=2, raw=True)
        shape_node = args["shape"]
        elts = shape_node.elts if isinstance(shape_node, (ast.Tuple, ast.List)) else [shape_node]
        shape = tuple(self.expr(e) for e in elts)
        dtype = self.type_value(args["dtype"])
        if not any(x.name == name for x in self.arrays):
            self.arrays.append(LocalDecl(name, shape, dtype, self.loc(call)))
        return [ir.LocalInit(name, loc=self.loc(s))]

    def type_value(self, node):
        """A dtype, TypeVar or ``dsl.simd(dtype, lanes)`` named in kernel code."""
        if isinstance(node, ast.Call) and is_call_to(self, node, "simd"):
            args = self.call_args(node, ("dtype", "lanes"), required=2, raw=True)
            elem = self.resolve.value(args["dtype"])
            if not isinstance(elem, T.DType):
                raise self.error(args["dtype"], "dsl.simd(dtype, lanes): dtype must be a dtype like f32")
            return SimdDecl(elem, self.expr(args["lanes"]), self.loc(node))  # lanes folded by the checker
        value = self.resolve.value(node)
        if not isinstance(value, (T.DType, T.TypeVar)):
            raise self.error(node, "expected a dtype like f32, a TypeVar or dsl.simd(f32, 16)")
        return value


def is_call_to(v, node, name: str) -> bool:
    """Whether ``node`` calls ``dsl.<name>`` (as the visitor ``v`` resolves names)."""
    if not isinstance(node, ast.Call):
        return False
    try:
        return v.resolve.callee(node.func) == ("dsl", name)
    except CompileError:
        return False


def assigned_counts(fdef: ast.FunctionDef) -> List[str]:
    """Every name ``fdef`` assigns, once per assignment (a declaration must be its name's only one)."""
    out = []
    for node in ast.walk(fdef):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        for t in targets:
            for n in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(n, ast.Name):
                    out.append(n.id)
    return out
