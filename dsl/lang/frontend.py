"""Python AST -> untyped IR.

The supported Python subset is the table ``SUPPORTED`` below (it is also the
documentation in docs/language.md); any other construct is a CompileError that
names it.  Names are resolved against the function's globals and closure at
parse time: dsl builtins, dtypes (casts), ``@dsl.func`` functions and numeric
constants are accepted; everything the kernel reads from outside is recorded in
``Parsed.captured`` so the compile cache key changes when it does.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import linecache
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

import numpy as np

from dsl.lang import ir
from dsl.lang import nesting
from dsl.lang import types as T
from dsl.lang.errors import CompileError, SourceLoc, UnsupportedSyntax
from dsl.lang.resolve import Resolver
from dsl.lang.signature import ParamDecl, param_decls
from dsl.lang.frontend_calls import Calls
from dsl.lang.frontend_decls import Declarations, LocalDecl, ScratchDecl, is_call_to
from dsl.lang.visitor import Visitor

# Construct -> how kernels may use it.  Rendered into docs/language.md.
SUPPORTED: Dict[str, str] = {
    "def": "the kernel / @dsl.func itself; no nested functions, no *args/**kwargs",
    "x = e": "locals; the type is the NumPy-promotion join of every assignment (x = f32(0) fixes it)",
    "a, b = e1, e2": "tuple unpacking of scalars, x.shape and dsl.split(n)",
    "x op= e": "augmented assignment to locals and tensor elements",
    "t[i, j], t.flat[i]": "tensor element read/write; one index per dimension, or a flat index",
    "t.shape[k], t.size, t.ndim, len(t)": "tensor metadata",
    "if / elif / else": "any condition",
    "for v in range(...)": "1-3 arguments, runtime bounds and step",
    "for v in dsl.static_range(...)": "unrolled at compile time: bounds known at compile time (see Unrolled loops)",
    "while": "any condition",
    "break, continue, return": "return ends this thread (a kernel) or returns a scalar (@dsl.func)",
    "a if c else b": "evaluates one side",
    "+ - * / // % ** & | ^ << >> ~": "Python semantics: / is true division, // and % floor",
    "== != < <= > >= (chained)": "comparisons, result bool",
    "and, or, not": "short-circuit, on truth values",
    "f32(v), int(v), float(v), bool(v)": "casts; int() truncates toward zero",
    "min max abs": "Python builtins, promoted like arithmetic",
    "dsl.exp log sqrt rsqrt tanh erf erfc sin cos floor ceil rint pow clamp where ...": "math builtins",
    "dsl.thread_id num_threads tile_id num_tiles split sync scratch atomic_add": "team builtins",
    "dsl.log.debug/info/warn/error(fmt, *args)": "printf-style logging, filtered at compile time",
    "print(...)": "prints its arguments (always compiled in)",
    "breakpoint()": "stops in pdb under the interpreter; ignored by compiled backends",
    "module-level int/float/bool constants": "folded into the code (and into the cache key)",
}

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "bitand", ast.BitOr: "bitor", ast.BitXor: "bitxor",
           ast.LShift: "lshift", ast.RShift: "rshift"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


# --------------------------------------------------------------------------- parsed forms

@dataclass
class Parsed:
    """A kernel or @dsl.func after parsing, before types are known."""

    name: str
    params: List[ParamDecl]
    body: Tuple[ir.Stmt, ...]
    scratch: List[ScratchDecl]
    funcs: Dict[str, Any]  # key in the untyped ir.FuncCall.func -> dsl Func object called
    captured: Dict[str, Any]  # global/closure names read -> value (for the cache key)
    shape_unpacks: List[Tuple[str, int, SourceLoc]]  # `a, b = t.shape` sites: t must have that rank
    filename: str
    firstline: int
    source: str
    log_level: str
    loc: SourceLoc = None
    arrays: List[LocalDecl] = field(default_factory=list)  # dsl.local declarations
    returns_value: bool = True  # a @dsl.func with no 'return value' is a statement function


# --------------------------------------------------------------------------- entry point

def source_of(fn) -> Tuple[str, List[str], int, str]:
    """(dedented source, original lines, first line, filename) of ``fn``; works in Jupyter."""
    filename = fn.__code__.co_filename
    try:
        lines, firstline = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise CompileError(f"cannot read the source of {fn.__name__}: kernels must be defined in a file, a "
                           "Jupyter cell or code registered with linecache", SourceLoc(filename, fn.__code__.co_firstlineno)) from None
    return textwrap.dedent("".join(lines)), lines, firstline, filename


def header_of(fn) -> Tuple[List[str], int, str]:
    """(lines from the first decorator line on, first line, filename) of ``fn``: enough to place its
    parameters (signature.param_decls) without finding where its body ends, which tokenizes the
    whole function (a few ms per kernel: the op library defines about a hundred at import)."""
    code = fn.__code__
    lines = linecache.getlines(code.co_filename, getattr(fn, "__globals__", None))
    first = code.co_firstlineno
    if not lines or first > len(lines) or not lines[first - 1].strip():
        _, lines, first, filename = source_of(fn)  # what getsource finds, or its error
        return lines, first, filename
    return lines[first - 1:], first, code.co_filename


def parse_func(f, log_level: str, tensors: FrozenSet[int] = frozenset()) -> "Parsed":
    """The parsed body of ``@dsl.func`` ``f`` (a dsl.lang.func.Func) at ``log_level``, parsed once
    per set of ``tensors`` (positions of the parameters given whole tensors: an unannotated one
    is a tensor there, which decides what ``x[i]`` and ``x.shape[k]`` mean in the body)."""
    key = (log_level, frozenset(tensors))
    with f.lock:
        parsed = f.parsed_bodies.get(key)
        if parsed is None:
            parsed = f.parsed_bodies[key] = parse(f.fn, is_kernel=False, log_level=log_level, tensors=tensors)
        return parsed


def _used_as_tensors(fdef, params) -> FrozenSet[int]:
    """Positions of parameters the body indexes or asks tensor attributes of: the tensor
    parameters of a @dsl.func parsed without a call (for the globals it reads, the cache key)."""
    used = set()
    for n in ast.walk(fdef):
        base = n.value if isinstance(n, (ast.Subscript, ast.Attribute)) else None
        if isinstance(base, ast.Attribute) and base.attr in ("flat", "shape"):
            base = base.value
        if isinstance(base, ast.Name) and (isinstance(n, ast.Subscript) or n.attr in _TENSOR_ATTRS):
            used.add(base.id)
        if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Name) and (
                isinstance(n.func, ast.Attribute) and n.func.attr == "atomic_add"
                or isinstance(n.func, ast.Name) and n.func.id == "len"):
            used.add(n.args[0].id)
    return frozenset(k for k, p in enumerate(params) if p.name in used)


_TENSOR_ATTRS = ("flat", "shape", "size", "ndim", "vload", "vstore")


def parse(fn, *, is_kernel: bool, log_level: str, tensors: Optional[FrozenSet[int]] = frozenset()) -> Parsed:
    """``tensors``: positions of @dsl.func parameters given tensors (None: those used as tensors)."""
    src, lines, firstline, filename = source_of(fn)
    indent = len(lines[0]) - len(lines[0].lstrip())
    tree = nesting.parse_source(src, filename, firstline)
    fdef = tree.body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise CompileError("@dsl.kernel / @dsl.func decorate a function", SourceLoc(filename, firstline))
    # decorators sit before 'def'; locations are relative to the first decorator line
    params = param_decls(fn, filename, firstline, lines, require=is_kernel)
    if tensors is None:  # a guess from the body; a SIMD value indexed by lane (v[k]) is not a tensor
        guess = _used_as_tensors(fdef, params)
        try:
            return parse(fn, is_kernel=is_kernel, log_level=log_level, tensors=guess)
        except CompileError:
            if not guess:
                raise
            return parse(fn, is_kernel=is_kernel, log_level=log_level, tensors=frozenset())
    params = [dataclasses.replace(p, kind="tensor") if k in tensors and p.kind == "scalar" and p.annotation is None
              else p for k, p in enumerate(params)]
    v = _Visitor(fn, params, filename, firstline, indent, lines, is_kernel, log_level)
    v.fdef = fdef
    v.returns_value = any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fdef))
    if isinstance(fdef, ast.AsyncFunctionDef):
        raise v.error(fdef, "async functions are not supported in kernels", kind=UnsupportedSyntax)
    nesting.check_depth(fdef, v.error)  # before anything recurses over the tree
    body = v.block(fdef.body, top=True)
    return Parsed(fn.__name__, params, tuple(body), v.scratch, v.funcs, v.resolve.captured, v.shape_unpacks, filename,
                  firstline, src, log_level, v.loc(fdef), v.arrays, v.returns_value)


# --------------------------------------------------------------------------- the visitor

class _Visitor(Declarations, Calls, Visitor):
    """Turns one function's AST into IR: ``visit_<ast class>`` for each supported statement
    (returning a statement, a list of them or None) and expression (returning an ir.Expr).
    Compiler state lives here, not on AST nodes; ``self.top`` says whether the statement being
    visited is at the top level of the function body (where scratch may be declared)."""

    def __init__(self, fn, params, filename, firstline, indent, lines, is_kernel, log_level):
        self.fn = fn
        self.params = {p.name: p for p in params}
        self.filename = filename
        self.firstline = firstline
        self.indent = indent
        self.lines = lines
        self.is_kernel = is_kernel
        self.log_level = log_level
        self.scratch: List[ScratchDecl] = []
        self.arrays: List[LocalDecl] = []
        self.funcs: Dict[str, Any] = {}
        self.top = False
        self.fdef = None  # the function's ast.FunctionDef (set by parse)
        self.returns_value = True  # (set by parse) False: a @dsl.func without 'return value'
        self.assigned = _assigned_names(fn)
        self.tmp_count = 0
        self.source_names: Optional[Set[str]] = None  # every name the source uses (tmp() avoids them)
        self.shape_unpacks: List[Tuple[str, int, SourceLoc]] = []  # (tensor, names, loc): needs ndim == names
        self.resolve = Resolver(fn, lambda n: n in self.params or n in self.assigned, self.error)

    # ---- helpers
    def loc(self, node) -> SourceLoc:
        k = getattr(node, "lineno", 1) - 1
        line = self.lines[k].rstrip("\n") if 0 <= k < len(self.lines) else None
        return SourceLoc(self.filename, self.firstline + k, getattr(node, "col_offset", 0) + 1 + self.indent, line)

    def error(self, node, msg: str, note: Optional[str] = None, kind=CompileError) -> CompileError:
        """``kind``: the CompileError subclass (``UnsupportedSyntax`` for Python the language lacks)."""
        return kind(msg, self.loc(node), note)

    def tmp(self) -> str:
        """A new temporary's name, never one the function's source uses (a user may call a local ``_t1``)."""
        if self.source_names is None and self.fdef is not None:
            nodes = list(ast.walk(self.fdef))
            self.source_names = {n.id for n in nodes if isinstance(n, ast.Name)} | \
                {a.arg for a in nodes if isinstance(a, ast.arg)}
        while True:
            self.tmp_count += 1
            name = f"_t{self.tmp_count}"
            if name not in (self.source_names or ()):
                return name

    def is_tensor(self, name: str) -> bool:
        p = self.params.get(name)
        return (p is not None and p.kind in ("tensor", "vec")) or any(s.name == name for s in self.scratch) \
            or any(a.name == name for a in self.arrays)

    def is_writable(self, name: str) -> bool:
        p = self.params.get(name)
        if p is None:
            return True  # scratch
        # an unannotated @dsl.func tensor parameter is as writable as its argument (the checker knows)
        return p.kind == "tensor" and (p.annotation is None or p.annotation.writable)

    def unsupported(self, node):
        if isinstance(node, ast.stmt):
            raise self.error(node, f"construct '{_construct_name(node)}' is not supported in kernels",
                             "see the supported Python subset in docs/language.md", UnsupportedSyntax)
        raise self.error(node, f"expression '{_construct_name(node)}' is not supported in kernels",
                         "see the supported Python subset in docs/language.md", UnsupportedSyntax)

    # ---- statements
    def block(self, stmts, top: bool = False) -> List[ir.Stmt]:
        out: List[ir.Stmt] = []
        outer = self.top
        try:
            for k, s in enumerate(stmts):
                if k == 0 and top and isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) \
                        and isinstance(s.value.value, str):
                    continue  # docstring
                self.top = top
                result = self.visit(s)
                out.extend(result if isinstance(result, list) else [result] if result is not None else [])
        finally:
            self.top = outer
        return out

    def visit_Pass(self, s):
        return None

    def visit_Expr(self, s):
        v = s.value
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            return None  # a string statement is a comment
        if not isinstance(v, ast.Call):
            raise self.error(s, "an expression statement has no effect in a kernel; assign it or remove it")
        return self.call_stmt(v)

    def visit_Assign(self, s):
        if len(s.targets) > 1:  # a = b = e
            name = self.tmp()
            out = [ir.Assign(name, self.expr(s.value), loc=self.loc(s))]
            for t in s.targets:
                out.extend(self.assign_to(t, ir.Name(name, loc=self.loc(s)), s))
            return out
        target = s.targets[0]
        if isinstance(target, ast.Tuple):
            return self.unpack(target, s.value, s)
        if isinstance(target, ast.Name) and is_call_to(self, s.value, "scratch"):
            return self.declare_scratch(target, s.value, s)
        if isinstance(target, ast.Name) and is_call_to(self, s.value, "local"):
            return self.declare_local(target, s.value, s)
        if isinstance(target, (ast.Name, ast.Subscript)) and is_call_to(self, s.value, "atomic_add"):
            return self.assign_to(target, self.atomic_fetch(s.value), s)
        return self.assign_to(target, self.expr(s.value), s)

    def visit_AugAssign(self, s):
        op = _BINOPS.get(type(s.op))
        if op is None:
            raise self.error(s, f"operator {type(s.op).__name__} is not supported", kind=UnsupportedSyntax)
        if isinstance(s.target, ast.Name):
            cur = self.expr(s.target)
            return self.assign_to(s.target, ir.Binary(op, cur, self.expr(s.value), loc=self.loc(s)), s)
        if isinstance(s.target, ast.Subscript):
            tensor, index, flat = self.subscript(s.target)
            cur = ir.Load(tensor, index, flat, loc=self.loc(s.target))
            self.check_writable(tensor, s.target)
            return ir.Store(tensor, index, ir.Binary(op, cur, self.expr(s.value), loc=self.loc(s)), flat,
                            loc=self.loc(s))
        raise self.error(s.target, "augmented assignment needs a local or a tensor element")

    def assign_to(self, target, value: ir.Expr, s) -> List[ir.Stmt]:
        if isinstance(target, ast.Name):
            name = target.id
            if self.is_tensor(name):
                raise self.error(target, f"'{name}' is a tensor and cannot be rebound; write its elements "
                                         f"({name}[i] = ...)")
            if name in self.resolve.closure or (name not in self.assigned and name not in self.params):
                raise self.error(target, f"cannot assign to '{name}' here")
            return [ir.Assign(name, value, loc=self.loc(s))]
        if isinstance(target, ast.Subscript):
            tensor, index, flat = self.subscript(target)
            self.check_writable(tensor, target)
            return [ir.Store(tensor, index, value, flat, loc=self.loc(s))]
        if isinstance(target, ast.Attribute):
            raise self.error(target, "attributes cannot be assigned in kernels")
        raise self.error(target, f"cannot assign to {_construct_name(target)}")

    def check_writable(self, tensor: str, node) -> None:
        if not self.is_writable(tensor):
            ann = self.params[tensor].annotation
            where = "" if self.is_kernel else f" in @dsl.func '{self.fn.__name__}'"
            raise self.error(node, f"writing to '{tensor}', which is {ann!r}{where}: only Out and InOut tensors (and "
                                   "scratch) are writable")

    def unpack(self, target: ast.Tuple, value, s) -> List[ir.Stmt]:
        names = target.elts
        loc = self.loc(s)
        if is_call_to(self, value, "split"):
            return self.lower_split(names, value, s)
        if isinstance(value, ast.Tuple) and any(is_call_to(self, e, "scratch") for e in value.elts):
            if len(value.elts) != len(names) or not all(
                    isinstance(n, ast.Name) and is_call_to(self, e, "scratch") for n, e in zip(names, value.elts)):
                raise self.error(s, "a, b = dsl.scratch(...), dsl.scratch(...) declares one scratch buffer per name; "
                                    "do not mix scratch with other values")
            return [d for n, e in zip(names, value.elts) for d in self.declare_scratch(n, e, s)]
        if isinstance(value, ast.Attribute) and value.attr == "shape" and isinstance(value.value, ast.Name) \
                and self.is_tensor(value.value.id):
            exprs = [ir.Shape(value.value.id, k, loc=loc) for k in range(len(names))]
            return self.bind_all(names, exprs, s, check_rank=(value.value.id, len(names)))
        if not isinstance(value, ast.Tuple) or len(value.elts) != len(names):
            raise self.error(s, "tuple unpacking needs a tuple of the same length on the right, x.shape or "
                                "dsl.split(n)")
        return self.bind_all(names, [self.expr(e) for e in value.elts], s)

    def bind_all(self, names, exprs, s, check_rank=None) -> List[ir.Stmt]:
        out: List[ir.Stmt] = []
        temps = []
        for e in exprs:  # evaluate every right-hand side first: a, b = b, a
            t = self.tmp()
            out.append(ir.Assign(t, e, loc=self.loc(s)))
            temps.append(t)
        for n, t in zip(names, temps):
            out.extend(self.assign_to(n, ir.Name(t, loc=self.loc(s)), s))
        if check_rank:
            self.shape_unpacks.append((check_rank[0], check_rank[1], self.loc(s)))
        return out

    def visit_If(self, s):
        return ir.If(self.expr(s.test), tuple(self.block(s.body)), tuple(self.block(s.orelse)),
                     loc=self.loc(s))

    def visit_For(self, s):
        if s.orelse:
            raise self.error(s, "for ... else is not supported in kernels", kind=UnsupportedSyntax)
        if not isinstance(s.target, ast.Name):
            raise self.error(s.target, "a for loop needs one variable: for i in range(n)")
        it = s.iter
        callee = self.resolve.callee(it.func) if isinstance(it, ast.Call) else None
        if callee not in (("py", "range"), ("dsl", "static_range")):
            raise self.error(it, "kernels loop over range(...) or dsl.static_range(...) only: "
                                 "for i in range(start, stop, step)")
        static = callee == ("dsl", "static_range")
        fname = "dsl.static_range" if static else "range"
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.error(it, f"{fname} takes 1 to 3 positional arguments")
        a = [self.expr(x) for x in it.args]
        loc = self.loc(s)
        start, stop, step = ((ir.Const(0, loc=loc), a[0], ir.Const(1, loc=loc)) if len(a) == 1 else
                             (a[0], a[1], ir.Const(1, loc=loc)) if len(a) == 2 else tuple(a))
        if isinstance(step, ir.Const) and step.value == 0:
            raise self.error(it, f"{fname}() step must not be zero")
        if self.is_tensor(s.target.id):
            raise self.error(s.target, f"'{s.target.id}' is a tensor and cannot be a loop variable")
        if static:
            return self.static_for(s, start, stop, step)
        return ir.For(s.target.id, start, stop, step, tuple(self.block(s.body)), loc=loc)

    def static_for(self, s, start, stop, step) -> ir.StaticFor:
        """``for j in dsl.static_range(...)``: an ir.StaticFor the checker unrolls.  Its variable
        is a constant in each copy, so nothing else may bind that name (it would have a value
        after the loop that compiled code does not have), and the body may not break or continue
        the unrolled loop (there is no loop left to leave)."""
        var = s.target.id
        if var in self.params:
            raise self.error(s.target, f"'{var}' is a parameter and cannot be a dsl.static_range variable")
        other = _bound_elsewhere(self, var)
        if other is not None:
            raise self.error(s.target, f"'{var}' is the variable of a dsl.static_range loop and is also assigned at "
                                       f"line {self.loc(other).line}; it is a compile-time constant in each unrolled "
                                       "copy, so give the other variable another name")
        for node in _loop_exits(s.body):
            word = "break" if isinstance(node, ast.Break) else "continue"
            raise self.error(node, f"'{word}' inside a dsl.static_range loop: the loop is unrolled at compile time, "
                                   "so there is no loop to leave", "use range(...) for a loop that exits early, or "
                                   "guard the rest of the body with an if")
        return ir.StaticFor(var, start, stop, step, tuple(self.block(s.body)), loc=self.loc(s))

    def visit_While(self, s):
        if s.orelse:
            raise self.error(s, "while ... else is not supported in kernels", kind=UnsupportedSyntax)
        return ir.While(self.expr(s.test), tuple(self.block(s.body)), loc=self.loc(s))

    def visit_Break(self, s):
        return ir.Break(loc=self.loc(s))

    def visit_Continue(self, s):
        return ir.Continue(loc=self.loc(s))

    def visit_Return(self, s):
        if self.is_kernel and s.value is not None:
            raise self.error(s, "a kernel returns nothing; write results into Out tensors")
        if not self.is_kernel and s.value is None and self.returns_value:
            raise self.error(s, "this @dsl.func returns a value elsewhere, so every return needs one",
                             "a function called as a statement has no 'return value' at all")
        if not self.is_kernel and isinstance(s.value, ast.Name) and self.is_tensor(s.value.id):
            raise self.error(s.value, f"a @dsl.func cannot return tensor '{s.value.id}'; it returns scalars or SIMD "
                                      "values",
                             "take the output tensor as an Out[...] parameter and write into it")
        return ir.Return(self.expr(s.value) if s.value is not None else None, loc=self.loc(s))

    # ---- expressions
    def expr(self, e) -> ir.Expr:
        if not isinstance(e, ast.expr):  # a statement class in expression position cannot parse
            self.unsupported(e)
        return self.visit(e)

    def visit_Constant(self, e):
        v = e.value
        if isinstance(v, bool) or isinstance(v, (int, float)):
            return ir.Const(v, loc=self.loc(e))
        raise self.error(e, f"constant {v!r} of type {type(v).__name__} is not supported in kernel expressions; "
                            "numbers and booleans are", kind=UnsupportedSyntax)

    def visit_Name(self, e):
        name = e.id
        if name in self.params:
            p = self.params[name]
            if p.kind != "scalar":
                raise self.error(e, f"tensor '{name}' used as a value; read an element: {name}[i] or {name}.flat[i]")
            return ir.Name(name, loc=self.loc(e))
        if self.is_tensor(name):
            raise self.error(e, f"scratch buffer '{name}' used as a value; read an element: {name}[i]")
        if name in self.assigned:
            return ir.Name(name, loc=self.loc(e))
        value = self.resolve.global_value(e)
        return self.constant_value(value, e)

    def constant_value(self, value, e) -> ir.Expr:
        if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
            if isinstance(value, np.generic):
                return ir.Cast(ir.Const(value.item(), loc=self.loc(e)), type=T.from_numpy(value.dtype), loc=self.loc(e))
            return ir.Const(value, loc=self.loc(e))
        raise self.error(e, f"'{ast.unparse(e)}' is a {type(value).__name__}, which kernels cannot use as a value; "
                            "kernels read numbers, booleans, parameters and locals")

    def visit_BinOp(self, e):
        op = _BINOPS.get(type(e.op))
        if op is None:
            raise self.error(e, f"operator {type(e.op).__name__} is not supported in kernels", kind=UnsupportedSyntax)
        return ir.Binary(op, self.expr(e.left), self.expr(e.right), loc=self.loc(e))

    def visit_UnaryOp(self, e):
        operand = self.expr(e.operand)
        if isinstance(e.op, ast.UAdd):
            return operand
        if isinstance(e.op, ast.USub) and isinstance(operand, ir.Const) and not isinstance(operand.value, bool):
            return ir.Const(-operand.value, loc=self.loc(e))
        op = {ast.USub: "neg", ast.Not: "not", ast.Invert: "invert"}[type(e.op)]
        return ir.Unary(op, operand, loc=self.loc(e))

    def visit_BoolOp(self, e):
        op = "and" if isinstance(e.op, ast.And) else "or"
        values = [self.expr(v) for v in e.values]
        out = values[0]
        for v in values[1:]:
            out = ir.Logical(op, out, v, loc=self.loc(e))
        return out

    def visit_Compare(self, e):
        parts = []
        left = self.expr(e.left)
        for op, comp in zip(e.ops, e.comparators):
            name = _CMPOPS.get(type(op))
            if name is None:
                raise self.error(e, f"comparison '{type(op).__name__}' is not supported in kernels "
                                    "(use == != < <= > >=)", kind=UnsupportedSyntax)
            right = self.expr(comp)
            parts.append(ir.Compare(name, left, right, loc=self.loc(e)))
            left = right
        out = parts[0]
        for p in parts[1:]:
            out = ir.Logical("and", out, p, loc=self.loc(e))
        return out

    def visit_IfExp(self, e):
        return ir.Conditional(self.expr(e.test), self.expr(e.body), self.expr(e.orelse), loc=self.loc(e))

    def visit_Subscript(self, e):
        # x.shape[k]
        if isinstance(e.value, ast.Attribute) and e.value.attr == "shape" and isinstance(e.value.value, ast.Name) \
                and self.is_tensor(e.value.value.id):
            k = e.slice
            axis = k.value if isinstance(k, ast.Constant) else (-k.operand.value if isinstance(k, ast.UnaryOp) and
                                                                 isinstance(k.op, ast.USub) and
                                                                 isinstance(k.operand, ast.Constant) else None)
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise self.error(k, "x.shape[k] needs a constant integer k")
            return ir.Shape(e.value.value.id, axis, loc=self.loc(e))
        base = e.value.value if isinstance(e.value, ast.Attribute) and e.value.attr == "flat" else e.value
        if not (isinstance(base, ast.Name) and self.is_tensor(base.id)):
            if isinstance(e.slice, (ast.Slice, ast.Tuple)):
                raise self.error(e.slice, "a SIMD value takes one lane index: v[k]")
            return ir.Lane(self.expr(e.value), self.expr(e.slice), loc=self.loc(e))
        tensor, index, flat = self.subscript(e)
        return ir.Load(tensor, index, flat, loc=self.loc(e))

    def subscript(self, e: ast.Subscript):
        """(tensor name, index exprs, flat) of ``t[i, j]`` or ``t.flat[i]``."""
        base = e.value
        flat = False
        if isinstance(base, ast.Attribute) and base.attr == "flat":
            base, flat = base.value, True
        if not (isinstance(base, ast.Name) and self.is_tensor(base.id)):
            raise self.error(e, f"'{ast.unparse(e.value)}' cannot be indexed: only tensor parameters, their .flat "
                                "and scratch buffers can")
        idx = e.slice
        if isinstance(idx, ast.Slice) or (isinstance(idx, ast.Tuple) and any(isinstance(x, ast.Slice) for x in idx.elts)):
            raise self.error(idx, "slices are not supported in kernels; index one element at a time",
                             kind=UnsupportedSyntax)
        elts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        if flat and len(elts) != 1:
            raise self.error(idx, f"{base.id}.flat takes one index")
        p = self.params.get(base.id)
        if p is not None and p.kind == "vec":
            flat = True
            if len(elts) != 1:
                raise self.error(idx, f"vector parameter '{base.id}' takes one index")
        return base.id, tuple(self.expr(x) for x in elts), flat

    def visit_Attribute(self, e):
        if isinstance(e.value, ast.Name) and self.is_tensor(e.value.id):
            name = e.value.id
            loc = self.loc(e)
            if e.attr == "size":
                return ir.Size(name, loc=loc)
            if e.attr == "ndim":
                return ir.NDim(name, loc=loc)  # folded by the checker
            if e.attr in ("shape", "flat"):
                raise self.error(e, f"{name}.{e.attr} must be indexed: {name}.{e.attr}[k]")
            raise self.error(e, f"tensors have .shape, .size, .ndim and .flat; not .{e.attr}")
        value = self.resolve.value(e)
        return self.constant_value(value, e)

    def visit_Tuple(self, e):
        raise self.error(e, "tuples are only supported on either side of an assignment (a, b = b, a)")

def _loop_exits(stmts):
    """``break``/``continue`` statements in ``stmts`` that belong to the enclosing loop."""
    for node in stmts:
        if isinstance(node, (ast.Break, ast.Continue)):
            yield node
        elif isinstance(node, ast.If):
            yield from _loop_exits(node.body)
            yield from _loop_exits(node.orelse)
        # nested for/while bodies belong to the nested loop; other compound statements are rejected anyway


def _bound_elsewhere(v: _Visitor, name: str):
    """An AST node that binds ``name`` other than as a dsl.static_range loop variable, or None.
    The function is walked once (names -> their first such binding), not once per static_range
    loop: conv_pointwise has dozens of them over thousands of nodes."""
    bindings = v.__dict__.get("_bindings")
    if bindings is None:
        bindings = v._bindings = {}
        for node in ast.walk(v.fdef):
            if isinstance(node, ast.For) and is_call_to(v, node.iter, "static_range"):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)) else []
            stack = list(targets)
            while stack:  # names bound by a target: a Name, or one inside tuple/list/* unpacking
                t = stack.pop()
                if isinstance(t, (ast.Tuple, ast.List)):
                    stack.extend(t.elts)
                elif isinstance(t, ast.Starred):
                    stack.append(t.value)
                elif isinstance(t, ast.Name):
                    bindings.setdefault(t.id, t)
    return bindings.get(name)


def _construct_name(node) -> str:
    names = {"With": "with", "Try": "try", "Raise": "raise", "Assert": "assert", "Lambda": "lambda",
             "ListComp": "list comprehension", "DictComp": "dict comprehension", "SetComp": "set comprehension",
             "GeneratorExp": "generator expression", "Global": "global", "Nonlocal": "nonlocal",
             "Import": "import", "ImportFrom": "import", "ClassDef": "class", "FunctionDef": "nested def",
             "Delete": "del", "Match": "match", "List": "list", "Dict": "dict", "Set": "set",
             "JoinedStr": "f-string", "Await": "await", "Yield": "yield", "YieldFrom": "yield from",
             "NamedExpr": "walrus :=", "Starred": "*unpacking", "AsyncFor": "async for", "AsyncWith": "async with",
             "TryStar": "try", "AnnAssign": "annotated assignment (write x = f32(v) instead of x: f32 = v)"}
    return names.get(type(node).__name__, type(node).__name__)


def _assigned_names(fn) -> set:
    """Local names of ``fn``: anything the function's code stores to."""
    return set(fn.__code__.co_varnames)
