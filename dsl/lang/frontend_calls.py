"""The parser's calls: builtins, ``@dsl.func`` helpers, tensor methods (``vload``/``vstore``),
casts, logging and ``print``, as statements and as expressions, with their argument checks.

A mixin of the frontend's visitor (``self`` has ``expr``, ``error``, ``resolve``, ...)."""
from __future__ import annotations

import ast
from typing import Any, Dict, Optional

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import log_format as LF
from dsl.lang import quantize
from dsl.lang import types as T


class Calls:
    """``visit_Call`` and the statement forms of calls; mixed into the frontend's visitor."""

    def call_stmt(self, call: ast.Call) -> Optional[ir.Stmt]:
        callee = self.callee(call)
        loc = self.loc(call)
        kind, name = callee
        if (kind, name) == ("dsl", "sync"):
            self.call_args(call, (), required=0)
            if not self.is_kernel:
                raise self.error(call, "dsl.sync() is only allowed in a kernel body, not in a @dsl.func")
            return ir.Sync(loc=loc)
        if (kind, name) == ("dsl", "atomic_add"):
            return ir.AtomicAdd(*self.atomic_parts(call), loc=loc)
        if kind == "log":
            return self.log_stmt(call, name)
        if kind == "method" and name == "vstore":
            tensor = call.func.value.id
            self.check_writable(tensor, call)
            args = self.call_args(call, ("index", "value"), required=2)
            return ir.VStore(tensor, args["index"], args["value"], loc=loc)
        if (kind, name) == ("py", "print"):
            if call.keywords:
                raise self.error(call, "print() in kernels takes positional arguments only")
            parts, args = [], []
            for a in call.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    parts.append(a.value.replace("%", "%%"))
                else:
                    parts.append("%s")
                    args.append(self.expr(a))
            fmt = " ".join(parts)
            return ir.Log("print", fmt, tuple(args), LF.parse(fmt), loc=loc)
        if (kind, name) == ("py", "breakpoint"):
            return None
        if kind == "dsl" and B.BUILTINS[name].kind == "tile":
            return ir.ExprStmt(self.tile_call(call, name), loc=loc)
        if kind == "dsl" and B.BUILTINS[name].kind == "hint":
            return ir.ExprStmt(self.hint_call(call, name), loc=loc)
        return ir.ExprStmt(self.expr(call), loc=loc)

    def hint_call(self, call: ast.Call, name: str) -> ir.Call:
        """``dsl.prefetch(a, index)``: the tensor passes whole (an ``ir.TensorRef``), the index as a value."""
        if not self.is_kernel:
            raise self.error(call, f"dsl.{name}() is only allowed in a kernel body, not in a @dsl.func")
        args = self.call_args(call, ("a", "index"), required=2, raw=True)
        a = args["a"]
        if not (isinstance(a, ast.Name) and self.is_tensor(a.id)):
            raise self.error(a, f"dsl.{name}(a, index): a must be a tensor (a kernel argument or scratch), got "
                                f"'{ast.unparse(a)}'")
        return ir.Call(name, (ir.TensorRef(a.id, loc=self.loc(a)), self.expr(args["index"])), loc=self.loc(call))

    def tile_call(self, call: ast.Call, name: str) -> ir.Call:
        """``dsl.tile_*(...)`` (dsl/lang/tiles.py): the tensor of tile_load/tile_store passes whole
        (an ``ir.TensorRef``); the checker types the rest (dsl/lang/check_tiles.py)."""
        if not self.is_kernel:
            raise self.error(call, f"dsl.{name}() is only allowed in a kernel body, not in a @dsl.func: tile "
                                   "registers are configured once per kernel thread")
        spec = B.BUILTINS[name]
        if call.keywords:
            raise self.error(call, f"dsl.{name}() takes positional arguments only")
        if len(call.args) not in spec.arity:
            raise self.error(call, f"dsl.{name}() takes {_arity_text(spec.arity)} argument(s), got {len(call.args)}")
        args = []
        for j, a in enumerate(call.args):
            if j == 1 and name in ("tile_load", "tile_store"):
                if not (isinstance(a, ast.Name) and self.is_tensor(a.id)):
                    raise self.error(a, f"dsl.{name}(t, a, offset, row_stride): a must be a tensor (a kernel "
                                        f"argument or scratch), got '{ast.unparse(a)}'")
                if name == "tile_store":
                    self.check_writable(a.id, a)
                args.append(ir.TensorRef(a.id, loc=self.loc(a)))
            else:
                args.append(self.expr(a))
        return ir.Call(name, tuple(args), loc=self.loc(call))

    def atomic_parts(self, call: ast.Call):
        """(tensor, index, value, flat) of ``dsl.atomic_add(t, index, value)``, statement or fetch form."""
        args = self.call_args(call, ("tensor", "index", "value"), required=3, raw=True)
        t = args["tensor"]
        flat = isinstance(t, ast.Attribute) and t.attr == "flat"
        tname = t.value.id if flat and isinstance(t.value, ast.Name) else t.id if isinstance(t, ast.Name) else None
        if tname is None or not self.is_tensor(tname):
            raise self.error(t, "dsl.atomic_add(t, index, value): t must be a tensor (or t.flat)")
        self.check_writable(tname, t)
        idx = args["index"]
        index = tuple(self.expr(e) for e in (idx.elts if isinstance(idx, ast.Tuple) else [idx]))
        return tname, index, self.expr(args["value"]), flat

    def atomic_fetch(self, call: ast.Call) -> ir.AtomicFetchAdd:
        """``old = dsl.atomic_add(...)``: the fetch-and-add, only ever a whole assignment's value."""
        return ir.AtomicFetchAdd(*self.atomic_parts(call), loc=self.loc(call))

    def log_stmt(self, call: ast.Call, level: str) -> Optional[ir.Stmt]:
        from dsl import config
        if not call.args or not (isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
            raise self.error(call, f"dsl.log.{level}(fmt, *args) needs a literal format string first")
        if call.keywords:
            raise self.error(call, f"dsl.log.{level} takes positional arguments only")
        fmt = call.args[0].value
        args = tuple(self.expr(a) for a in call.args[1:])
        try:
            pieces = LF.parse(fmt)
        except LF.FormatError as err:
            raise self.error(call.args[0], str(err)) from None
        count = len(LF.specs(pieces))
        if count != len(args):
            raise self.error(call.args[0], f"log format {fmt!r} has {count} conversion(s) but {len(args)} "
                                           "argument(s) were given")
        if not config.level_passes(level, self.log_level):
            return None  # filtered at compile time: no code at all
        return ir.Log(level, fmt, args, pieces, loc=self.loc(call))

    def callee(self, call: ast.Call):
        """(kind, name) of what ``call`` calls; ``("method", m)`` for ``t.vload``/``t.vstore`` of a tensor."""
        f = call.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and self.is_tensor(f.value.id):
            if f.attr not in ("vload", "vstore"):
                raise self.error(call, f"tensors have the methods vload(i, lanes) and vstore(i, value); not "
                                       f".{f.attr}()")
            return "method", f.attr
        return self.resolve.callee(f)

    def visit_Call(self, e):
        kind, name = self.callee(e)
        loc = self.loc(e)
        if kind == "method":
            if name == "vstore":
                raise self.error(e, "t.vstore(i, v) is a statement and returns nothing")
            args = self.call_args(e, ("index", "lanes"), required=2)
            return ir.VLoad(e.func.value.id, args["index"], args["lanes"], loc=loc)
        if kind == "dtype":
            args = self.call_args(e, ("value",), required=1)
            return ir.Cast(args["value"], type=name, loc=loc)
        if kind == "py":
            if name in ("int", "float", "bool"):
                args = self.call_args(e, ("value",), required=1)
                weak = {"int": T.WEAK_INT, "float": T.WEAK_FLOAT, "bool": T.WEAK_BOOL}[name]
                return ir.Cast(args["value"], type=weak, loc=loc)
            if name == "len":
                arg = e.args[0] if len(e.args) == 1 and not e.keywords else None
                if not (isinstance(arg, ast.Name) and self.is_tensor(arg.id)):
                    raise self.error(e, "len(t) takes one tensor")
                return ir.Shape(arg.id, 0, loc=loc)
            if name in ("min", "max", "abs"):
                if e.keywords:
                    raise self.error(e, f"{name}() in kernels takes positional arguments only")
                return self.builtin_call(e, name, [self.expr(a) for a in e.args])
            raise self.error(e, f"{name}() cannot be used in an expression here")
        if kind == "dsl":
            if name == "where":
                args = self.call_args(e, ("cond", "a", "b"), required=3)
                return ir.Select(args["cond"], args["a"], args["b"], loc=loc)
            if name == "splat":
                args = self.call_args(e, ("value", "lanes", "dtype"), required=2, raw=True)
                value = self.expr(args["value"])
                if "dtype" in args:
                    value = ir.Cast(value, type=self.type_value(args["dtype"]), loc=loc)
                return ir.Splat(value, self.expr(args["lanes"]), loc=loc)
            if name in ("reduce_add", "reduce_max", "reduce_min"):
                args = self.call_args(e, ("v",), required=1)
                return ir.VReduce(name[len("reduce_"):], args["v"], loc=loc)
            if name in ("dequant", "quant"):
                return quantize.lower(self, e, name)
            if B.BUILTINS[name].kind in ("lowered", "tile", "hint"):
                raise self.error(e, {"split": "dsl.split(n) returns two values: lo, hi = dsl.split(n)",
                                     "scratch": "dsl.scratch(...) must be assigned to a name at the top of the kernel",
                                     "static_range": "dsl.static_range(...) is only a for loop's iterable: "
                                                     "for j in dsl.static_range(4)",
                                     "atomic_add": "dsl.atomic_add(t, i, v) returns the old value only as the whole "
                                                   "right side of an assignment: old = dsl.atomic_add(t, i, v)",
                                     }.get(name, f"dsl.{name}(...) is a statement and returns nothing"))
            return self.builtin_call(e, name, [self.expr(a) for a in e.args])
        if kind == "func":
            if e.keywords:
                raise self.error(e, "calls to @dsl.func take positional arguments only")
            return ir.FuncCall(self.func_key(name), tuple(self.func_arg(a) for a in e.args), loc=loc)
        if kind == "log":
            raise self.error(e, "dsl.log calls are statements and return nothing")
        raise self.error(e, f"cannot call '{ast.unparse(e.func)}' in a kernel")

    def func_arg(self, a) -> ir.Expr:
        """A @dsl.func argument: a tensor's bare name passes the whole tensor, anything else a value."""
        if isinstance(a, ast.Name) and self.is_tensor(a.id):
            return ir.TensorRef(a.id, loc=self.loc(a))
        return self.expr(a)

    def func_key(self, func) -> str:
        """The key naming ``func`` in this function's untyped FuncCalls (``Parsed.funcs``): its
        qualified name, made unique when two different functions share one."""
        key, n = func.__qualname__, 1
        while self.funcs.get(key, func) is not func:
            n += 1
            key = f"{func.__qualname__}#{n}"
        self.funcs[key] = func
        return key

    def builtin_call(self, e, name, args) -> ir.Expr:
        spec = B.BUILTINS[name]
        if e.keywords:
            raise self.error(e, f"dsl.{name}() takes positional arguments only")
        if len(args) not in spec.arity:
            raise self.error(e, f"{name}() takes {_arity_text(spec.arity)} argument(s), got {len(args)}")
        return ir.Call(name, tuple(args), loc=self.loc(e))

    def call_args(self, call: ast.Call, names, required: int, raw: bool = False) -> Dict[str, Any]:
        fn = ast.unparse(call.func)
        if len(call.args) > len(names):
            raise self.error(call, f"{fn}() takes at most {len(names)} arguments, got {len(call.args)}")
        got = dict(zip(names, call.args))
        for kw in call.keywords:
            if kw.arg not in names or kw.arg in got:
                raise self.error(call, f"{fn}() got an unexpected or repeated keyword '{kw.arg}'; accepted: "
                                       f"{', '.join(names) or 'none'}")
            got[kw.arg] = kw.value
        missing = [n for n in names[:required] if n not in got]
        if missing:
            raise self.error(call, f"{fn}() is missing argument(s): {', '.join(missing)}")
        return got if raw else {k: self.expr(v) for k, v in got.items()}


def _arity_text(arity) -> str:
    a = list(arity)
    return str(a[0]) if len(a) == 1 else f"{a[0]} to {a[-1]}"
