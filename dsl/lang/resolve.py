"""Name resolution for kernel bodies: what a global name or ``a.b.c`` chain refers to.

Kernels read globals at compile time only; every value read is recorded in
``captured`` so the compile-cache key changes when a constant or a called
function changes.
"""
from __future__ import annotations

import ast
import builtins as py_builtins
import types as pytypes
from typing import Any, Callable, Dict, Tuple

import numpy as np

from dsl.lang import builtins as B
from dsl.lang.func import Func
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError

PY_BUILTINS = {py_builtins.min: "min", py_builtins.max: "max", py_builtins.abs: "abs",
               py_builtins.range: "range", py_builtins.len: "len", py_builtins.int: "int",
               py_builtins.float: "float", py_builtins.bool: "bool", py_builtins.print: "print",
               py_builtins.breakpoint: "breakpoint"}


class Resolver:
    """Resolves names of one function against its globals and closure."""

    def __init__(self, fn, is_local: Callable[[str], bool], error: Callable[..., CompileError]):
        self.fn = fn
        self.is_local = is_local
        self.error = error
        self.closure = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in (fn.__closure__ or ()))))
        self.captured: Dict[str, Any] = {}

    def global_value(self, e: ast.Name):
        name = e.id
        if name in self.closure:
            value = self.closure[name]
        elif name in self.fn.__globals__:
            value = self.fn.__globals__[name]
        elif hasattr(py_builtins, name):
            return getattr(py_builtins, name)
        else:
            raise self.error(e, f"name '{name}' is not defined")
        if not isinstance(value, pytypes.ModuleType):
            self.captured[name] = value
        return value

    def value(self, e):
        """The Python object an ast Name/Attribute chain refers to (globals only)."""
        if isinstance(e, ast.Name):
            if self.is_local(e.id):
                raise self.error(e, f"'{e.id}' is a local, not a module-level object")
            return self.global_value(e)
        if isinstance(e, ast.Attribute):
            base = self.value(e.value)
            try:
                value = getattr(base, e.attr)
            except AttributeError:
                raise self.error(e, f"'{ast.unparse(e.value)}' has no attribute '{e.attr}'") from None
            if isinstance(base, pytypes.ModuleType) and not isinstance(value, pytypes.ModuleType):
                self.captured[ast.unparse(e)] = value
            return value
        raise self.error(e, f"'{ast.unparse(e)}' is not a name the compiler can resolve")

    def callee(self, func) -> Tuple[str, Any]:
        """Classify a call target: ('py'|'dsl'|'dtype'|'func'|'log', name or object)."""
        if isinstance(func, ast.Name) and self.is_local(func.id):
            raise self.error(func, f"'{func.id}' is a local value and cannot be called")
        obj = self.value(func)
        if isinstance(obj, T.DType):
            return "dtype", obj
        if _hashable(obj) and obj in PY_BUILTINS:
            return "py", PY_BUILTINS[obj]
        builtin = B.by_runtime(obj)  # the registry (dsl/lang/builtins.py), read at each call
        if builtin is not None:
            return "dsl", builtin
        if getattr(obj, "__self__", None) is B.log and obj.__name__ in ir.LOG_LEVELS:
            return "log", obj.__name__
        if isinstance(obj, Func):
            return "func", obj
        module = getattr(obj, "__module__", None)
        if callable(obj) and (module in ("math", "numpy") or isinstance(obj, np.ufunc)):
            raise self.error(func, f"'{ast.unparse(func)}' is a {module or 'numpy'} function; kernels use the dsl "
                                   "builtins (dsl.exp, dsl.sqrt, ...) so every backend computes the same thing")
        raise self.error(func, f"cannot call '{ast.unparse(func)}' in a kernel: it is not a dsl builtin, a dtype "
                               "cast, a @dsl.func or a supported Python builtin")


def _hashable(obj) -> bool:
    try:
        hash(obj)
        return True
    except TypeError:
        return False
