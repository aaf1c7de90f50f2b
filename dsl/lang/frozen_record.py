"""``@frozen_record``: ``@dataclass(frozen=True)`` whose methods are compiled at first use.

``dataclasses`` writes each class's ``__init__``, ``__eq__``, ``__hash__``, ``__repr__`` and frozen
``__setattr__``/``__delattr__`` as source text and ``exec``s it when the class is defined: about
2 ms a class, which Python's bytecode cache cannot keep.  The kernel IR (dsl/lang/ir.py) has ~50
node classes, so importing it cost 60-170 ms of every process that compiles or loads a kernel,
although one kernel constructs a handful of them.  Here the field bookkeeping stays dataclasses'
own (``dataclasses.fields``, ``replace``, ``__match_args__`` work as before); ``__init__``,
``__eq__`` and ``__hash__`` are generated the first time a class calls them (the same straight-line
code dataclasses would write, so construction and hashing cost what they did), and ``__repr__``
and the frozen guards are shared functions.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Tuple, Type

_FACTORY = object()  # the default of a field with a default_factory: made per instance


def frozen_record(cls: Type = None, /, *, kw_only: bool = False):
    """Like ``@dataclass(frozen=True, kw_only=...)``: equal, hashable, immutable records."""
    def wrap(cls: Type) -> Type:
        for name in ("__init__", "__eq__", "__hash__", "__repr__", "__setattr__", "__delattr__"):
            if name in cls.__dict__:
                raise TypeError(f"{cls.__qualname__} defines {name}; @frozen_record makes it")
        cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
        cls.__init__ = _first_init
        cls.__eq__ = _first_eq
        cls.__hash__ = _first_hash
        cls.__repr__ = _repr
        cls.__setattr__ = _frozen_setattr
        cls.__delattr__ = _frozen_delattr
        return cls
    return wrap if cls is None else wrap(cls)


def _init_fields(cls: Type) -> Tuple[dataclasses.Field, ...]:
    """The fields ``__init__`` takes, positional ones first (dataclasses' order for kw_only)."""
    every = [f for f in dataclasses.fields(cls) if f.init]
    return tuple([f for f in every if not f.kw_only] + [f for f in every if f.kw_only])


def _compile(cls: Type, name: str, source: str, env: Dict) -> Callable:
    """Compile one method of ``cls`` and install it, so later calls go straight to it."""
    scope: Dict = {}
    exec(source, env, scope)
    fn = scope[name]
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, fn)
    return fn


def _make_init(cls: Type) -> Callable:
    env: Dict = {"_FACTORY": _FACTORY, "_set": object.__setattr__}
    params, body, keyword = [], [], False
    for f in _init_fields(cls):
        if f.kw_only and not keyword:
            params.append("*")
            keyword = True
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            body.append(f"    if {f.name} is _FACTORY: {f.name} = _f_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"    _set(self, {f.name!r}, {f.name})")
    post = ["    self.__post_init__()"] if hasattr(cls, "__post_init__") else []
    source = "\n".join([f"def __init__(self, {', '.join(params)}):", *body, *post, ""]) \
        if params else "\n".join(["def __init__(self):", *(post or ["    pass"]), ""])
    return _compile(cls, "__init__", source, env)


def _compared(cls: Type) -> str:
    """``(self.a, self.b,)`` over the fields that take part in equality and hashing."""
    return "(" + "".join(f"self.{f.name}," for f in dataclasses.fields(cls) if f.compare) + ")"


def _make_eq(cls: Type) -> Callable:
    mine = _compared(cls)
    theirs = mine.replace("self.", "other.")
    source = (f"def __eq__(self, other):\n"
              f"    if other.__class__ is self.__class__:\n"
              f"        return {mine} == {theirs}\n"
              f"    return NotImplemented\n")
    return _compile(cls, "__eq__", source, {})


def _make_hash(cls: Type) -> Callable:
    return _compile(cls, "__hash__", f"def __hash__(self):\n    return hash({_compared(cls)})\n", {})


def _first_init(self, *args, **kwargs) -> None:
    _make_init(type(self))(self, *args, **kwargs)


def _first_eq(self, other):
    return _make_eq(type(self))(self, other)


def _first_hash(self) -> int:
    return _make_hash(type(self))(self)


def _repr(self) -> str:
    parts = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
    return f"{type(self).__qualname__}({parts})"


def _frozen_setattr(self, name: str, value) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
