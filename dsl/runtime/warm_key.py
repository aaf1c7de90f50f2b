"""The front-end key: what a kernel's generated code depends on, computed without parsing it.

A warm process looks a specialization up by this key (backends/warm_start.py) and reaches the
compiled entry without running the front end (parse, check, specialize, generate).  The key must
change whenever the code would: it hashes the kernel's source text, its parameters' annotations,
and everything its code object can read by name -- globals and closure cells it names (a scalar
constant by value, a ``@dsl.func`` by its own source and captures, recursively; an attribute of
a module, class or object it names, at any depth, when the code names that attribute) -- plus the version of the
front end's own source files.  It reads more names than the front end resolves (every name the
code object holds, attributes included), so it can only be more sensitive, never less.
"""
from __future__ import annotations

import enum
import functools
import hashlib
import linecache
import types as pytypes
from pathlib import Path
from typing import Any, Iterable, List, Set

import numpy as np

from dsl.lang import types as T
from dsl.lang.func import Func

_MAX_DEPTH = 4  # a.b.c.d: deeper attribute chains are described by type only
_SCALARS = (bool, int, float, complex, str, bytes, np.generic, T.DType, T.TypeVar, enum.Enum)


@functools.lru_cache(maxsize=1)
def frontend_version() -> str:
    """Hash of the front end's and the kernel runtime's own source: a change to either (a
    builtin, a check, a lowering) must not reuse a record made by the old one."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted((here.parent / "lang").glob("*.py")) + [here / "kernel.py", here / "warm_key.py"]:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _names(code: pytypes.CodeType) -> Set[str]:
    """Every name ``code`` and the code objects nested in it (comprehensions) refer to."""
    out = set(code.co_names) | set(code.co_freevars)
    for c in code.co_consts:
        if isinstance(c, pytypes.CodeType):
            out |= _names(c)
    return out


def _describe(value: Any) -> str:
    """A value as the generated code sees it: scalars, enum members and dtypes by value, modules
    by name, others by type (their attributes the code names are described beside them)."""
    if isinstance(value, _SCALARS):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, pytypes.ModuleType):
        return f"module:{value.__name__}"
    if isinstance(value, tuple) and len(value) <= 64:
        return "(" + ",".join(_describe(v) for v in value) + ")"
    return f"type:{type(value).__module__}.{type(value).__qualname__}"


def _namespace(value) -> dict:
    """The attributes of ``value`` the code could read as ``value.name`` without running code:
    a module's or an object's own ``__dict__``, and for a class those of its bases too."""
    if isinstance(value, type):
        out: dict = {}
        for klass in reversed(value.__mro__):
            out.update(vars(klass))
        return out
    d = getattr(value, "__dict__", None)
    return d if isinstance(d, dict) else {}


def _attribute_parts(prefix: str, owner: Any, names: Set[str], depth: int, seen: Set[int],
                     funcs: List[Func]) -> Iterable[str]:
    """``prefix.attr=value`` for each name of the code that ``owner`` (a module, class or object)
    holds, at any depth: a superset of the ``a.b.c`` chains the kernel reads."""
    if depth > _MAX_DEPTH or id(owner) in seen:
        return
    seen = seen | {id(owner)}
    attrs = _namespace(owner)
    for name in sorted(names):
        if name not in attrs:
            continue
        value = attrs[name]
        if isinstance(value, Func):
            funcs.append(value)
        yield f"{prefix}.{name}={_describe(value)}"
        if not isinstance(value, _SCALARS):
            yield from _attribute_parts(f"{prefix}.{name}", value, names, depth + 1, seen, funcs)


def _last_line(code: pytypes.CodeType) -> int:
    """The last source line any instruction of ``code`` or of the code nested in it spans."""
    last = code.co_firstlineno
    for _, end, _, _ in code.co_positions():
        if end is not None and end > last:
            last = end
    for c in code.co_consts:
        if isinstance(c, pytypes.CodeType):
            last = max(last, _last_line(c))
    return last


def source_text(fn) -> str:
    """``fn``'s source lines, from its first decorator to the last line its code spans, read from
    ``linecache`` (files, Jupyter cells and sources opdsl registers alike).  ``inspect``'s
    ``getsourcelines`` tokenizes the block to find its end (~10 ms a kernel, most of a warm
    process's key cost); the code object already knows it.  Trailing comments after the last
    statement are left out: they change no code."""
    code = fn.__code__
    lines = linecache.getlines(code.co_filename, fn.__globals__)
    if not lines or code.co_firstlineno > len(lines):
        from dsl.lang import frontend
        return frontend.source_of(fn)[0]  # what the front end reads, or its error
    return "".join(lines[code.co_firstlineno - 1:_last_line(code)])


def _function_text(fn, seen: Set[int]) -> str:
    """``fn``'s source and everything it can read by name; ``@dsl.func``s it reaches included once."""
    src = source_text(fn)
    code = fn.__code__
    names = _names(code)
    closure = dict(zip(code.co_freevars, (c.cell_contents for c in (fn.__closure__ or ()))))
    g = fn.__globals__
    parts = [src, f"defaults:{_describe(fn.__defaults__)}"]
    funcs: List[Func] = []
    for name in sorted(names):
        if name in closure:
            value = closure[name]
        elif name in g:
            value = g[name]
        else:
            continue  # a builtin, an attribute name, or a local: not a global of this function
        if isinstance(value, Func):
            funcs.append(value)
        parts.append(f"{name}={_describe(value)}")
        if not isinstance(value, _SCALARS):
            parts.extend(_attribute_parts(name, value, names, 1, set(), funcs))
    for f in funcs:
        if id(f) in seen:
            continue
        seen.add(id(f))
        parts.append(f"func {f.fn.__module__}.{f.fn.__qualname__}:{_function_text(f.fn, seen)}")
    return "\n".join(parts)


def source_key(fn, params) -> str:
    """Digest of ``fn``'s source, its parameters' annotations and what it captures (see the
    module docstring); computed once per kernel object by its caller."""
    h = hashlib.sha256()
    h.update(frontend_version().encode())
    h.update(_function_text(fn, set()).encode())
    for p in params:
        h.update(f"\0{p.name}:{p.kind}:{p.annotation!r}:{p.default!r}".encode())
    return h.hexdigest()[:32]
