"""Op registry: (domain, op_type, opset range) -> Op class (PPL.NN's OptKernelCreatorManager).

Filled by ``@dsl.op`` / ``@dsl.composed`` in modules imported explicitly.  The built-in
library (the ``ops`` package) is imported lazily, as ``backends.get`` loads a backend, so
importers such as ``dsl.onnx.load`` never import it: a lookup of one op imports only the library
modules its index names for that (domain, op_type) (ops/library_index.py), and questions about the
whole table (``all_ops``, ``domains``, an op the index does not know) import all of it
(ops/library.py).  A model unpickled from the plan cache or an ``.opdsl`` file imports just the
modules its nodes' classes live in.  Among registrations of one (domain, op_type) covering an
opset, a user op beats a built-in (a class of the ``ops`` package, or one registered inside
``builtin_library()``) whatever the import order, and otherwise the later registration wins;
``unregister`` undoes an override.  The ONNX default domain is ``""`` (``"ai.onnx"`` is an alias).
"""
from __future__ import annotations

import contextlib
import difflib
import importlib
import threading
from typing import Dict, Iterator, List, Optional, Set, Tuple

from dsl.lang.errors import UnknownOpError  # noqa: F401  (every error: dsl/lang/errors.py)

_ONNX_ALIASES = ("ai.onnx",)

# (domain, op_type) -> entries, most recent registration last
_TABLE: Dict[Tuple[str, str], List[type]] = {}


def normalize_domain(domain: Optional[str]) -> str:
    domain = domain or ""
    return "" if domain in _ONNX_ALIASES else domain


def _range(cls) -> str:
    return f"[{cls.since}, {'...' if cls.until is None else cls.until}]"


def _covers(cls, opset: Optional[int]) -> bool:
    if opset is None:
        return True
    return cls.since <= opset and (cls.until is None or opset <= cls.until)


_PACKAGE = "ops"                # the built-in library's package: its classes are built-ins
_LIBRARY = "ops.library"        # imports every family
_INDEX = "ops.library_index"    # "domain::op_type" -> the modules registering it
_library_state = {"loaded": False}
_indexed: Set[Tuple[str, str]] = set()  # keys whose index modules were imported


def load_builtin_library() -> None:
    """Import the built-in op library once (its imports register it inside ``builtin_library()``)."""
    if _library_state["loaded"]:
        return
    _library_state["loaded"] = True  # set first: the library's own imports may ask the table
    try:
        with builtin_library():
            importlib.import_module(_LIBRARY)
    except BaseException:
        _library_state["loaded"] = False
        raise


def load_library_for(domain: str, op_type: str) -> None:
    """Import the built-in modules registering ``domain::op_type`` (the whole library when the
    index does not name it: an unknown op's error lists every registration)."""
    key = (domain, op_type)
    if _library_state["loaded"] or key in _indexed:
        return
    try:
        modules = importlib.import_module(_INDEX).OPS.get(f"{domain}::{op_type}")
    except ImportError:  # a library without an index: all of it
        modules = None
    if modules is None:
        load_builtin_library()
        return
    with builtin_library():
        for m in modules:
            importlib.import_module(m)
    _indexed.add(key)


# classes registered inside builtin_library() (the ops package's imports)
_BUILTIN: Set[type] = set()
_state = threading.local()


@contextlib.contextmanager
def builtin_library() -> Iterator[None]:
    """Registrations made inside are built-ins (``ops/__init__.py`` wraps its imports in it)."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def is_builtin(cls) -> bool:
    """Registered by the ops library: user registrations take precedence over it."""
    return cls in _BUILTIN


def register(cls) -> type:
    """Register ``cls`` under ``(cls.domain, cls.op_type, [cls.since, cls.until])``."""
    cls.domain = normalize_domain(cls.domain)
    if not isinstance(cls.since, int) or (cls.until is not None and cls.until < cls.since):
        raise ValueError(f"{cls.__name__}: opset range since={cls.since!r} until={cls.until!r} is empty")
    entries = _TABLE.setdefault((cls.domain, cls.op_type), [])
    # re-registering the same class (module reload) replaces it in place, built-in or not
    same = [c for c in entries if c.__qualname__ == cls.__qualname__ and c.__module__ == cls.__module__]
    entries[:] = [c for c in entries if c not in same]
    entries.append(cls)
    if getattr(_state, "depth", 0) > 0 or any(c in _BUILTIN for c in same) or \
            cls.__module__.partition(".")[0] == _PACKAGE:  # imported by an unpickled model, say
        _BUILTIN.add(cls)
    _BUILTIN.difference_update(c for c in same if c is not cls)
    return cls


def unregister(cls) -> None:
    entries = _TABLE.get((cls.domain, cls.op_type), [])
    if cls in entries:
        entries.remove(cls)
        _BUILTIN.discard(cls)
    if not entries:
        _TABLE.pop((cls.domain, cls.op_type), None)


def lookup(domain: Optional[str], op_type: str, opset: Optional[int] = None) -> type:
    """The op class for ``domain::op_type`` at ``opset`` (None: the newest registration).

    Among registrations covering ``opset`` the most recent wins (overrides)."""
    domain = normalize_domain(domain)
    load_library_for(domain, op_type)
    entries = _TABLE.get((domain, op_type), [])
    for builtin_pass in (False, True):
        for cls in reversed(entries):
            if is_builtin(cls) == builtin_pass and _covers(cls, opset):
                return cls
    if not _library_state["loaded"]:  # what the index imported does not cover it: ask the whole library
        load_builtin_library()
        return lookup(domain, op_type, opset)
    if entries:
        ranges = ", ".join(f"{c.__name__} {_range(c)}" for c in entries)
        raise UnknownOpError(
            f"op {op_type!r} in domain {domain or 'ai.onnx'!r} has no registration for opset {opset} "
            f"(registered: {ranges})", domain, op_type, opset)
    raise UnknownOpError(_unknown_message(domain, op_type, opset), domain, op_type, opset)


def find(domain: Optional[str], op_type: str, opset: Optional[int] = None) -> Optional[type]:
    """Like ``lookup`` but ``None`` when nothing matches."""
    try:
        return lookup(domain, op_type, opset)
    except UnknownOpError:
        return None


def _unknown_message(domain: str, op_type: str, opset: Optional[int]) -> str:
    shown_dom = domain or "ai.onnx"
    at = f" (opset {opset})" if opset is not None else ""
    same_domain = sorted(t for (d, t) in _TABLE if d == domain)
    close = difflib.get_close_matches(op_type, same_domain, n=5, cutoff=0.5)
    other = sorted(f"{d or 'ai.onnx'}::{t}" for (d, t) in _TABLE if t == op_type and d != domain)
    if not close:  # case-insensitive and cross-domain near misses
        every = {f"{d or 'ai.onnx'}::{t}": t for (d, t) in _TABLE}
        close = difflib.get_close_matches(op_type.lower(), [t.lower() for t in every.values()], n=5, cutoff=0.6)
        close = sorted(k for k, t in every.items() if t.lower() in close)
    msg = f"no op registered for {op_type!r} in domain {shown_dom!r}{at}"
    hints = []
    if other:
        hints.append(f"the same type exists in: {', '.join(other)}")
    if close:
        hints.append(f"closest known ops: {', '.join(close)}")
    if not hints:
        known = sorted({d or "ai.onnx" for (d, _) in _TABLE})
        hints.append(f"known domains: {', '.join(known) or 'none'}")
    return msg + "; " + "; ".join(hints)


def registered_now() -> List[type]:
    """The classes registered so far, without loading the built-in library."""
    return [c for entries in list(_TABLE.values()) for c in entries]


def all_ops() -> List[type]:
    """Every registered op class, newest registration of each (domain, type) last."""
    load_builtin_library()
    return [c for entries in _TABLE.values() for c in entries]


def domains() -> List[str]:
    load_builtin_library()
    return sorted({d for d, _ in _TABLE})
