"""``@dsl.func`` device functions, as the language sees them: the decorated Python function and
a place for its parsed body (``frontend.parse_func`` fills it per log level). The language layer
owns this class so name resolution can recognise a call to one without importing the kernel layer.
"""
from __future__ import annotations

import functools
import inspect
import threading
import types
from typing import Callable


def require_function(fn, decorator: str) -> None:
    """Kernels and funcs are compiled from a ``def``'s source: reject anything else at decoration."""
    if isinstance(fn, Func):
        raise TypeError(f"{decorator} got {fn!r}, which is already a @dsl.func; decorate the plain function once")
    if isinstance(fn, types.FunctionType):
        if fn.__name__ == "<lambda>":
            raise TypeError(f"{decorator} cannot compile a lambda: write it as a def function")
        if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(f"{decorator} decorates a plain def function; {fn.__qualname__} is a generator or "
                            "async function")
        return
    what = ("a class" if isinstance(fn, type) else
            "a builtin function (implemented in C, it has no Python source)"
            if isinstance(fn, types.BuiltinFunctionType) else "a method" if isinstance(fn, types.MethodType)
            else f"an object of type {type(fn).__name__}")
    hint = ("; to set options write @dsl.kernel(threads=...) with keywords"
            if decorator == "@dsl.kernel" and isinstance(fn, (int, tuple)) else "")
    raise TypeError(f"{decorator} decorates a Python function defined with def; got {what}: {fn!r}{hint}")


class Func:
    """A ``@dsl.func`` device function: called from kernels; plain Python elsewhere."""

    def __init__(self, fn: Callable):
        require_function(fn, "@dsl.func")
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.parsed_bodies = {}  # log level -> frontend.Parsed (frontend.parse_func)
        self.lock = threading.Lock()

    def __call__(self, *args):
        return self.fn(*args)

    def __copy__(self) -> "Func":
        return self  # immutable; pickling goes through dsl/runtime/pickling.py (copyreg), copying must not

    def __deepcopy__(self, memo) -> "Func":
        return self

    def __repr__(self) -> str:
        return f"<dsl.func {self.fn.__qualname__}>"
