"""Per-implementation compile options: ``defines`` (module constants overridden for one
implementation) and ``features`` (the target features an implementation needs; checked by
backends/options.py, which raw OpenCL ops share).

An op may list one kernel several times in its ``kernels`` mapping, compiled differently
(``kernels = {"wide": k.variant(defines={"TILE": 32}), "narrow": k}``).  Kernels read module
constants at compile time, so a define is a copy of the kernel's function whose globals hold
the new values; the ``@dsl.func`` helpers of the same module are copied onto those globals too,
so a constant they read follows the define.  Every backend sees the same thing: the compilers
resolve names through the copy, and the interpreter runs the copy.
"""
from __future__ import annotations

import types
from typing import Any, Dict, Mapping, Optional, Tuple

from backends.options import plain as _plain
from dsl.lang.func import Func

Defines = Tuple[Tuple[str, Any], ...]


def _constants(module: Mapping[str, Any]) -> list:
    return sorted(k for k, v in module.items() if not k.startswith("__") and _plain(v) is not None)


def check_defines(owner: str, fn, defines: Optional[Mapping[str, Any]]) -> Defines:
    """``defines`` validated against the module constants of ``fn`` -> sorted (name, value) pairs.

    A define must name an existing int/float/bool constant of the kernel's module (a typo would
    otherwise compile the unchanged kernel) and keep its kind: bool stays bool, int stays int,
    a float accepts an int."""
    if defines is None:
        return ()
    if not isinstance(defines, Mapping):
        raise TypeError(f"{owner}.variant(defines=...) takes a dict of constant name -> value, "
                        f"got {type(defines).__name__}")
    module = fn.__globals__
    where = module.get("__name__", "?")
    out = []
    for name, value in defines.items():
        if not isinstance(name, str) or name not in module or _plain(module[name]) is None:
            known = ", ".join(_constants(module)) or "none"
            raise ValueError(f"{owner}.variant(defines=...): {name!r} is not a module-level int/float/bool "
                             f"constant of module {where!r}, so the kernel cannot read it (constants: {known})")
        if name in fn.__code__.co_freevars:
            raise ValueError(f"{owner}.variant(defines=...): {name!r} is a closure variable of the kernel, "
                             f"not a module constant; defines override module-level constants only")
        old, new = _plain(module[name]), _plain(value)
        kinds = {bool: "bool", int: "int", float: "float"}
        ok = new is not None and (type(new) is type(old) or (type(old) is float and type(new) is int))
        if not ok:
            raise TypeError(f"{owner}.variant(defines=...): {name} is {kinds[type(old)]} "
                            f"({name} = {old!r} in {where}), got {type(value).__name__} {value!r}")
        out.append((name, float(new) if type(old) is float else new))
    return tuple(sorted(out))


def with_defines(fn: types.FunctionType, defines: Defines) -> types.FunctionType:
    """A copy of ``fn`` whose module globals have ``defines`` applied (see the module docstring)."""
    if not defines:
        return fn
    original = fn.__globals__
    scope: Dict[str, Any] = dict(original)
    scope.update(defines)

    def rebind(f: types.FunctionType) -> types.FunctionType:
        g = types.FunctionType(f.__code__, scope, f.__name__, f.__defaults__, f.__closure__)
        g.__kwdefaults__ = f.__kwdefaults__
        g.__qualname__, g.__doc__ = f.__qualname__, f.__doc__
        g.__annotations__ = dict(f.__annotations__)
        g.__dict__.update(f.__dict__)
        return g

    for name, value in original.items():  # helpers of this module read the defines too
        if isinstance(value, Func) and value.fn.__globals__ is original:
            scope[name] = Func(rebind(value.fn))
    return rebind(fn)