"""Pickling kernels, helpers and the Python around them, so a Dask worker (or any process that
unpickles) can run what this process defined (docs/dask.md, "Pickling").

Two ways to send a Python object:

* **By reference** (module and qualified name) when it can be imported from a real module: the
  receiving process imports it.  This is what ``pickle`` does for functions and classes.  An
  object of the user's own modules (not opdsl's, the standard library's or an installed
  package's) also carries its by-value form as a fallback: a worker that lacks the module
  rebuilds it from that (``lookup_or_fallback``) instead of failing with ModuleNotFoundError.
* **By value** otherwise: kernels and ops defined in ``__main__``, a notebook cell or a
  function body, and the files of an op package (``_opdsl_pkg_*`` modules exist only where the
  package was registered).  A function goes as its code object (``marshal``, so the receiving
  Python must be the same version, as Dask requires anyway), the globals it names (modules by
  name, other kernels and ``@dsl.func`` helpers by value in turn), its closure and defaults.  A
  kernel or ``@dsl.func`` also carries its source text, registered with ``linecache`` on arrival:
  the frontend reads kernels from source.  A class goes as its name, bases and namespace.

Nothing compiled is shipped: the receiving process compiles again, or loads the compiled code
from its own disk cache (the cache key is the source, so it hits when the source is the same).

Objects hook in with small ``__reduce__`` methods (``Kernel``, ``Autotuner``, ``dsl.Op``,
``RawOpenCL``); ``@dsl.func`` helpers are registered with ``copyreg`` here because the language
layer they live in sits below this one.  This module imports no class it rebuilds: the hooks
pass their class along.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import copyreg
import importlib
import inspect
import itertools
import linecache
import marshal
import os
import pickle
import sys
import threading
import types
import uuid
import weakref
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from dsl.lang.func import Func
from dsl.runtime import variant as V

# Modules that exist only in the process that made them (op packages import their files under a
# private name, dsl/package/loader.py): what they define travels by value.
PRIVATE_MODULE_PREFIXES = ("_opdsl_pkg_",)


# ---------------------------------------------------------------------- by reference

def by_reference(obj) -> Optional[Tuple[str, str]]:
    """``(module, qualname)`` when ``obj`` can be imported again from a real module, else None."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if (not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__"
            or module.startswith(PRIVATE_MODULE_PREFIXES) or "<locals>" in qualname):
        return None
    found = sys.modules.get(module)
    if found is None:
        return None
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return (module, qualname) if found is obj else None


def lookup(module: str, qualname: str):
    """The object ``by_reference`` named, imported in this process."""
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


# Top-level packages whose objects never need a fallback: opdsl's own, present wherever it runs.
_OWN_PACKAGES = frozenset({"dsl", "backends", "ops"})


def carries_fallback(module: str) -> bool:
    """Whether objects of ``module`` travel with a by-value fallback: the user's own code (a
    script's sibling module, a test module), not opdsl, the standard library or site-packages,
    which a worker has as surely as it has opdsl."""
    top = module.split(".", 1)[0]
    if top in _OWN_PACKAGES or top in sys.stdlib_module_names:
        return False
    file = getattr(sys.modules.get(module), "__file__", None)
    return bool(file) and not any(p in ("site-packages", "dist-packages") for p in Path(file).parts)


def with_fallback(ref: Tuple[str, str], rebuild, args: tuple):
    """The reduce value of an object found at ``ref``: by reference, plus ``rebuild(*args)`` (its
    by-value form) when its module is the user's own (``carries_fallback``)."""
    if not carries_fallback(ref[0]):
        return (lookup, ref)
    return (lookup_or_fallback, (*ref, rebuild, args))


def lookup_or_fallback(module: str, qualname: str, rebuild, args: tuple):
    """The imported object, or ``rebuild(*args)`` (from the carried source) when ``module`` is not
    installed here; any other import failure is the module's own error and is raised.  The
    fallback is built only then: building a kernel parses and checks its source."""
    try:
        return lookup(module, qualname)
    except ModuleNotFoundError as e:
        if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
            raise
        return rebuild(*args)


# ---------------------------------------------------------------------- portable values

def portable(value):
    """``value`` as something the standard pickle can send: modules by name, functions and
    classes that cannot be imported by value, containers element by element (anything else
    pickles as it would anyway)."""
    if isinstance(value, types.ModuleType):
        return _ModuleRef(value.__name__)
    if isinstance(value, types.FunctionType):
        ref = by_reference(value)
        if ref is None:
            return function_by_value(value)
        return _Reduced(with_fallback(ref, _identity, (function_by_value(value),))) if carries_fallback(ref[0]) \
            else value
    if isinstance(value, type):
        return portable_class(value)
    if isinstance(value, (staticmethod, classmethod)):
        return _Wrapped(type(value), portable(value.__func__))
    if isinstance(value, property):
        return _Wrapped(property, tuple(portable(f) for f in (value.fget, value.fset, value.fdel)), value.__doc__)
    if type(value) in (list, tuple, set, frozenset):
        return type(value)(portable(v) for v in value)
    if type(value) is dict:
        return {k: portable(v) for k, v in value.items()}
    return value


class _Reduced:
    """Pickles as a reduce value computed beforehand."""

    def __init__(self, reduced: tuple):
        self.reduced = reduced

    def __reduce__(self):
        return self.reduced


def _identity(value):
    return value


class _ModuleRef:
    def __init__(self, name: str):
        self.name = name

    def __reduce__(self):
        return (importlib.import_module, (self.name,))


class _Wrapped:
    """staticmethod / classmethod / property around portable functions."""

    def __init__(self, kind, inner, doc=None):
        self.kind, self.inner, self.doc = kind, inner, doc

    def __reduce__(self):
        return (_rewrap, (self.kind, self.inner, self.doc))


def _rewrap(kind, inner, doc):
    return kind(*inner, doc) if kind is property else kind(inner)


# ---------------------------------------------------------------------- functions by value

_FUNCTION_WRAPPERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def function_by_value(fn: types.FunctionType, what: str = "function", source: bool = False) -> "_FunctionByValue":
    """The wrapper that pickles ``fn`` by value; one per function, so that functions naming each
    other (and methods naming their class) pickle as a cycle, not an endless recursion."""
    with _LOCK:
        w = _FUNCTION_WRAPPERS.get(fn)
        if w is None or (source and not w.source):
            w = _FUNCTION_WRAPPERS[fn] = _FunctionByValue(fn, what, source)
        return w


class _FunctionByValue:
    def __init__(self, fn: types.FunctionType, what: str, source: bool):
        self.fn, self.what, self.source = fn, what, source
        self.token = uuid.uuid4().hex  # the same function arriving again is the same function there

    def __reduce__(self):
        fn = self.fn
        code = fn.__code__
        text = _source_of(fn, self.what) if self.source else _source_or_none(fn)
        state = {
            "globals": {name: portable(fn.__globals__[name])
                        for name in sorted(_global_names(code) | _annotation_names(fn)) if name in fn.__globals__},
            "closure": tuple(portable(_cell_value(c)) for c in (fn.__closure__ or ())),
            "defaults": portable(fn.__defaults__), "kwdefaults": portable(fn.__kwdefaults__),
            "annotations": portable(dict(fn.__annotations__)), "qualname": fn.__qualname__, "doc": fn.__doc__,
            "dict": {k: portable(v) for k, v in fn.__dict__.items() if k not in ("__wrapped__", "_opdsl_filled")},
        }
        return (_make_function, (marshal.dumps(code), fn.__name__, _namespace(fn.__globals__), text, self.token),
                state, None, None, _fill_function)


_NAMESPACES: Dict[int, Tuple[dict, "_Namespace"]] = {}


def _namespace(scope: dict) -> "_Namespace":
    """One stand-in per module namespace: functions of one module that travel in one pickle share
    their globals again on arrival (a variant's defines then reach its helpers, variant.py)."""
    with _LOCK:
        hit = _NAMESPACES.get(id(scope))
        if hit is None or hit[0] is not scope:
            hit = _NAMESPACES[id(scope)] = (scope, _Namespace(scope.get("__name__", "__main__")))
        return hit[1]


class _Namespace:
    def __init__(self, module: str):
        self.module = module

    def __reduce__(self):
        return (_new_namespace, (self.module,))


def _new_namespace(module: str) -> dict:
    return {"__builtins__": builtins, "__name__": module}


class _EmptyCell:
    """A closure variable not assigned yet (pickled as this module's one instance)."""

    def __reduce__(self):
        return "EMPTY_CELL"


EMPTY_CELL = _EmptyCell()


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return EMPTY_CELL


_FUNCTIONS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()  # token -> function made here


def _global_names(code: types.CodeType) -> set:
    """Every name the code (and the functions, lambdas and comprehensions inside it) may read
    from its globals; attribute names come along too and are dropped when no global has them."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _annotation_names(fn) -> set:
    """Names that annotations written as text (``from __future__ import annotations``) read: a
    kernel evaluates ``"In[f64]"`` against its globals when it is rebuilt, not only what its body reads."""
    names: set = set()
    for text in fn.__annotations__.values():
        if isinstance(text, str):
            try:
                tree = ast.parse(text, mode="eval")
            except SyntaxError:
                continue
            names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return names


_SOURCES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # function -> its source, once found


def _source_or_none(fn) -> Optional[Tuple[str, int, list]]:
    """The function's (file, first line, lines), looked up once per function: ``inspect`` tokenizes
    the file each time, and a kernel of the user's module is pickled with every task that uses it."""
    hit = _SOURCES.get(fn)
    if hit is not None and hit[0] is fn.__code__:
        return hit[1]
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    found = (fn.__code__.co_filename, first, lines)
    with contextlib.suppress(TypeError):  # a function that cannot be weakly referenced is looked up every time
        _SOURCES[fn] = (fn.__code__, found)
    return found


def _source_of(fn, what: str) -> Tuple[str, int, list]:
    found = _source_or_none(fn)
    if found is None:
        code = fn.__code__
        raise pickle.PicklingError(
            f"cannot pickle {what} {fn.__qualname__!r} (defined at {code.co_filename}:{code.co_firstlineno}): its "
            "source code is not available, and another process compiles it from source. Define it in a .py "
            "file or a notebook cell (or register the text of code run with exec() in linecache under its "
            "filename), or put it in an importable module so that it pickles by reference")
    return found


_PICKLED_FILES = itertools.count()
_REGISTERED: set = set()  # file names whose linecache entry this module wrote
_GAP = "pass  # (a line of the original file that was not pickled)\n"


def _register_source(filename: str, first: int, lines: list) -> str:
    """The file name under which ``inspect`` finds ``lines`` at line ``first`` here.

    The original name whenever possible (the generated code names it, so the disk cache of
    compiled code hits across processes): the file here already holds these lines, or no file
    of that name exists (a notebook cell, a script on another machine) and the lines are laid
    into an entry of this module's own.  A different file of the same name is never shadowed:
    the kernel then gets a new name."""
    lines = [ln if ln.endswith("\n") else ln + "\n" for ln in lines]
    end = first - 1 + len(lines)
    if linecache.getlines(filename)[first - 1:end] == lines:
        return filename
    if filename in _REGISTERED or (filename not in linecache.cache and not os.path.exists(filename)):
        name = filename
    else:
        name = f"<pickled {filename} #{next(_PICKLED_FILES)}>"
    entry = linecache.cache.get(name) if name in _REGISTERED else None
    text = list(entry[2]) if entry else []
    # lines nobody sent are a statement at column 0, not blank: a blank gap would let inspect read a
    # function's block on into the next function that arrived from the same file (a method after a kernel)
    text += [_GAP] * max(0, end - len(text))
    text[first - 1:end] = lines
    linecache.cache[name] = (sum(map(len, text)), None, text, name)  # mtime None: never checked
    _REGISTERED.add(name)
    return name


def _make_function(code_bytes: bytes, name: str, scope: dict, text, token: str):
    """The function with an empty namespace (``_fill_function`` completes it), its source
    registered with linecache (``_register_source``) so that ``inspect`` and the frontend find it.
    A function that arrived before (a kernel in every task of a Dask graph) is returned again."""
    hit = _FUNCTIONS.get(token)
    if hit is not None:
        return hit
    code = marshal.loads(code_bytes)
    if text is not None:
        filename, first, lines = text
        shown = _register_source(filename, first, lines)
        if shown != code.co_filename:
            code = _renamed(code, shown)
    closure = tuple(types.CellType() for _ in code.co_freevars)
    fn = _FUNCTIONS[token] = types.FunctionType(code, scope, name, None, closure or None)
    return fn


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _fill_function(fn: types.FunctionType, state: Dict[str, Any]) -> None:
    if getattr(fn, "_opdsl_filled", False):
        return
    fn._opdsl_filled = True
    for k, v in state["globals"].items():
        fn.__globals__.setdefault(k, v)
    for cell, value in zip(fn.__closure__ or (), state["closure"]):
        if value is not EMPTY_CELL:
            cell.cell_contents = value
    fn.__defaults__, fn.__kwdefaults__ = state["defaults"], state["kwdefaults"]
    fn.__annotations__ = state["annotations"]
    fn.__qualname__, fn.__doc__ = state["qualname"], state["doc"]
    fn.__dict__.update(state["dict"])


# ---------------------------------------------------------------------- classes by value

_CLASS_WRAPPERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CLASSES: Dict[str, type] = {}  # token -> class made here: one class per original, however often it arrives
_SKIPPED = frozenset({"__dict__", "__weakref__", "_param_table", "__module__", "__qualname__"})


def portable_class(cls: type):
    """``cls`` itself when importable, its own ``_opdsl_portable_class()`` stand-in if it has one
    (op packages carry their files), else a wrapper that pickles the class by value."""
    ref = by_reference(cls)
    if ref:
        return _Reduced(with_fallback(ref, _identity, (_class_by_value(cls),))) if carries_fallback(ref[0]) else cls
    own = getattr(cls, "_opdsl_portable_class", None)
    if own is not None:
        return own()
    return _class_by_value(cls)


def _class_by_value(cls: type) -> "_ClassByValue":
    with _LOCK:
        w = _CLASS_WRAPPERS.get(cls)
        if w is None:
            w = _CLASS_WRAPPERS[cls] = _ClassByValue(cls, f"{cls.__module__}.{cls.__qualname__}:{uuid.uuid4().hex}")
        return w


class _ClassByValue:
    def __init__(self, cls: type, token: str):
        self.cls, self.token = cls, token

    def __reduce__(self):
        cls = self.cls
        namespace = {k: portable(v) for k, v in cls.__dict__.items() if k not in _SKIPPED}
        bases = tuple(portable_class(b) for b in cls.__bases__)
        return (_make_class, (portable_class(type(cls)), cls.__name__, bases, cls.__module__, cls.__qualname__,
                              self.token), namespace, None, None, _fill_class)


def _make_class(meta, name, bases, module, qualname, token):
    with _LOCK:
        hit = _CLASSES.get(token)
        if hit is None:
            hit = _CLASSES[token] = meta(name, bases, {"__module__": module, "__qualname__": qualname})
            hit._opdsl_unfilled = True
        return hit


def _fill_class(cls: type, namespace: Dict[str, Any]) -> None:
    if not cls.__dict__.get("_opdsl_unfilled"):
        return  # this process already has the class
    for k, v in namespace.items():
        if k != "__doc__":
            setattr(cls, k, v)
    del cls._opdsl_unfilled


# ---------------------------------------------------------------------- kernels

def reduce_kernel(kernel):
    """``Kernel.__reduce__``: by reference when importable; a variant as its base plus its
    defines and features; otherwise the function by value with its source."""
    ref = by_reference(kernel)
    if ref and (not carries_fallback(ref[0]) or _source_or_none(kernel.fn) is None):
        return (lookup, ref)  # opdsl's own, or nothing to rebuild from: by reference only
    options = {"threads": kernel.threads, "grid": portable(kernel.grid), "log_level": kernel.log_level,
               "fastmath": kernel.fastmath, "debug": kernel.debug, "log_floor": kernel.log_floor_option}
    base = kernel.base
    if base is not kernel:
        by_value = (restore_variant, (base, options, kernel.defines, kernel.features))
    else:
        by_value = (restore_kernel, (type(kernel), function_by_value(kernel.fn, "kernel", source=True), options))
    return with_fallback(ref, *by_value) if ref else by_value


_KERNELS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # function made here -> its kernel


def restore_kernel(cls, fn, options):
    """One kernel per arriving function: its compiled variants are reused by every task."""
    with _LOCK:
        hit = _KERNELS.get(fn)
        if hit is None or hit[0] != options:
            hit = _KERNELS[fn] = (options, cls(fn, **options))
        return hit[1]


def restore_variant(base, options, defines, features):
    """``base.variant(defines=..., features=...)`` without re-checking the defines: a base sent by
    value carries only the globals its own body reads, not every constant of its module."""
    k = type(base)(V.with_defines(base.fn, tuple(defines)), **options)
    k.base, k.defines, k.features = base, tuple(defines), frozenset(features)
    if options.get("log_level") is None:  # no level of its own: it follows its base's, as it did
        k.follow_log_level(base)
    return k


def _reduce_func(f: Func):
    ref = by_reference(f)
    if ref and (not carries_fallback(ref[0]) or _source_or_none(f.fn) is None):
        return (lookup, ref)
    by_value = (type(f), (function_by_value(f.fn, "@dsl.func", source=True),))
    return with_fallback(ref, *by_value) if ref else by_value


copyreg.pickle(Func, _reduce_func)


# ---------------------------------------------------------------------- raw OpenCL ops

def reduce_raw_opencl(op):
    """``RawOpenCL.__reduce__``: its source text and hooks (by value when defined in __main__)."""
    return (_new_instance, (type(op),), portable(op.__getstate__()))


def _new_instance(cls):
    return cls.__new__(cls)
