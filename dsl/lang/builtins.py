"""Kernel builtins: each has a user face (a real function the interpreter runs)
and a compiler face (a type rule the checker applies).  One table, one place.

Inside a kernel the runtime faces read the current team context, which the
interpreter backend binds per Python thread (``bind_context``).
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

import numpy as np

from dsl.lang import types as T

# --------------------------------------------------------------------------- team context

_local = threading.local()


class TeamContext:
    """What a running kernel thread can ask of its team (implemented by the interpreter)."""

    thread_id: int = 0
    num_threads: int = 1
    tile_id: int = 0
    num_tiles: int = 1
    log_level: str = "warn"  # the kernel's compile-time log threshold

    def sync(self) -> None:
        raise NotImplementedError

    def scratch(self, shape, dtype) -> np.ndarray:
        raise NotImplementedError

    def log(self, level: str, text: str) -> None:
        raise NotImplementedError

    def atomic_add(self, array: np.ndarray, index, value) -> None:
        raise NotImplementedError


def bind_context(ctx: Optional[TeamContext]) -> None:
    _local.ctx = ctx


def current() -> TeamContext:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise RuntimeError("this dsl builtin only runs inside a kernel launch "
                           "(call the kernel, or use backend='interpreter' to step through it)")
    return ctx


# --------------------------------------------------------------------------- runtime faces

def thread_id() -> int:
    """Index of this thread in its team, 0 <= thread_id() < num_threads()."""
    return current().thread_id


def num_threads() -> int:
    """Team size (the kernel's ``threads=`` option)."""
    return current().num_threads


def tile_id() -> int:
    """Index of this team in the launch grid."""
    return current().tile_id


def num_tiles() -> int:
    """Number of teams in the launch grid."""
    return current().num_tiles


def sync() -> None:
    """Barrier across the team: every thread reaches it before any passes it."""
    current().sync()


def scratch(shape, dtype):
    """A team-shared buffer, shape known at compile time, contents undefined at start."""
    return current().scratch(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,),
                             dtype if isinstance(dtype, T.TypeVar) else T.as_dtype(dtype))


def split(n, align: int = 1, grid: bool = False):
    """(lo, hi): this thread's contiguous share of range(n); shares are multiples of ``align``.

    The team's threads share range(n); with ``grid=True`` every thread of every team does."""
    ctx = current()
    parts, index = ctx.num_threads, ctx.thread_id
    if grid:
        parts, index = ctx.num_tiles * parts, ctx.tile_id * ctx.num_threads + index
    chunk = -(-n // parts)
    chunk = -(-chunk // align) * align
    lo = min(index * chunk, n)
    return np.int64(lo), np.int64(min(lo + chunk, n))  # i64, as the checker types them


def atomic_add(tensor, index, value) -> None:
    """tensor[index] += value, atomically across threads and tiles."""
    current().atomic_add(tensor, index, value)


def _float_of(x):
    """Result of a float builtin on ``x``: f32 stays f32, ints become f64, literals stay Python."""
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return float
    dt = np.asarray(x).dtype
    return dt.type if dt.kind == "f" else np.float64


def _unary_float(fn: Callable) -> Callable:
    def run(x):
        return _float_of(x)(fn(float(x)))
    return run


def _np_unary(fn: Callable) -> Callable:
    def run(x):
        out = fn(x)
        return float(out) if _float_of(x) is float else out
    return run


def _promoted(*xs):
    """numpy's NEP 50 result of combining ``xs``, as a converter."""
    t = np.result_type(*xs)
    if all(type(x) in (int, float, bool) for x in xs):
        return type(max(xs, key=lambda v: {bool: 0, int: 1, float: 2}[type(v)]))
    return t.type


def min_(*xs):
    return _promoted(*xs)(min(xs))


def max_(*xs):
    return _promoted(*xs)(max(xs))


def abs_(x):
    return type(x)(abs(x)) if isinstance(x, np.generic) else abs(x)


def clamp(x, lo, hi):
    """min(max(x, lo), hi), promoted like arithmetic."""
    return _promoted(x, lo, hi)(min(max(x, lo), hi))


def where(cond, a, b):
    """Elementwise select of two already-computed values (both sides evaluated)."""
    return _promoted(a, b)(a if cond else b)


def rsqrt(x):
    conv = _float_of(x)
    return conv(1.0 / math.sqrt(float(x))) if float(x) > 0 else conv(math.inf if float(x) == 0 else math.nan)


def _floor_or_ceil(fn):
    def run(x):
        return _float_of(x)(fn(float(x)))
    return run


exp = _np_unary(np.exp)
log_ = _np_unary(np.log)
sqrt = _np_unary(np.sqrt)
tanh = _np_unary(np.tanh)
sin = _np_unary(np.sin)
cos = _np_unary(np.cos)
erf = _unary_float(math.erf)
floor = _floor_or_ceil(math.floor)
ceil = _floor_or_ceil(math.ceil)


def pow_(x, y):
    return int_pow(x, y) if _is_integer(x) and _is_integer(y) else _promoted(x, y)(x ** y)


def _is_integer(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def int_pow(x, y):
    """``x ** y`` as compiled code computes it (docs/language.md, Semantics): integers stay
    integers, and a negative exponent gives the exact power truncated toward zero (1 for
    x == 1, +-1 for x == -1, else 0) where numpy raises and Python gives a float."""
    if not (_is_integer(x) and _is_integer(y)) or y >= 0:
        return x ** y
    r = 1 if x == 1 else (-1 if y & 1 else 1) if x == -1 else 0
    return x * 0 + y * 0 + r  # the promoted integer type of x and y


def int_(v=0):
    """``int(v)`` in kernels: a float truncates toward zero, saturates at the i64 range, NaN -> 0."""
    if isinstance(v, (float, np.floating)):
        return T.saturated_int(float(v), T.i64)
    return int(v)


# --------------------------------------------------------------------------- logging

class _Log:
    """``dsl.log(x)`` is the natural logarithm; ``dsl.log.info("x=%d", x)`` logs
    printf-style messages, filtered at compile time."""

    def __call__(self, x):
        return log_(x)

    def _emit(self, level: str, fmt: str, *args) -> None:
        from dsl import config
        ctx = current()
        if config.level_passes(level, ctx.log_level):
            ctx.log(level, fmt % args)  # the checker accepted fmt: dsl/log_format.py

    def debug(self, fmt: str, *args) -> None:
        self._emit("debug", fmt, *args)

    def info(self, fmt: str, *args) -> None:
        self._emit("info", fmt, *args)

    def warn(self, fmt: str, *args) -> None:
        self._emit("warn", fmt, *args)

    def error(self, fmt: str, *args) -> None:
        self._emit("error", fmt, *args)


log = _Log()


# --------------------------------------------------------------------------- compiler faces

class BuiltinTypeError(Exception):
    """Raised by a type rule; the checker adds the source location."""


@dataclass(frozen=True)
class Builtin:
    name: str            # name in the IR (ir.Call.name)
    arity: Sequence[int]  # accepted argument counts
    rule: Callable[[Sequence[T.DType]], "tuple[T.DType, T.DType]"]  # -> (arg type, result type)
    doc: str


def _numeric(ts):
    for t in ts:
        if t.is_bool:
            raise BuiltinTypeError(f"expects numbers, got {t}")


def _float_rule(ts):
    """One float argument: ints become f64 (numpy); the result has the argument's type."""
    _numeric(ts)
    t = ts[0].compute
    if t.is_float:
        return t, t
    ft = T.WEAK_FLOAT if t.weak else T.f64
    return ft, ft


def _same_rule(ts):
    """Arguments promoted together; the result has the promoted type."""
    _numeric(ts)
    t = ts[0]
    for u in ts[1:]:
        t = T.promote(t, u)
    return t, t


def _pow_rule(ts):
    _numeric(ts)
    t = T.promote(ts[0], ts[1])
    return t, t


def _team_rule(ts):
    return T.i64, T.i64


BUILTINS: Dict[str, Builtin] = {}
RUNTIME: Dict[str, Callable] = {}


def _add(name: str, arity, rule, runtime: Callable, doc: str) -> None:
    BUILTINS[name] = Builtin(name, tuple(arity), rule, doc)
    RUNTIME[name] = runtime


for _name, _fn, _doc in [
    ("exp", exp, "e**x"), ("log", log, "natural logarithm"), ("sqrt", sqrt, "square root"),
    ("rsqrt", rsqrt, "1/sqrt(x)"), ("tanh", tanh, "hyperbolic tangent"), ("erf", erf, "error function"),
    ("sin", sin, "sine"), ("cos", cos, "cosine"), ("floor", floor, "largest integral value <= x (a float)"),
    ("ceil", ceil, "smallest integral value >= x (a float)"),
]:
    _add(_name, (1,), _float_rule, _fn, _doc)
_add("abs", (1,), _same_rule, abs_, "absolute value, same type")
_add("min", range(2, 9), _same_rule, min_, "smallest argument, promoted type")
_add("max", range(2, 9), _same_rule, max_, "largest argument, promoted type")
_add("clamp", (3,), _same_rule, clamp, "min(max(x, lo), hi)")
_add("pow", (2,), _pow_rule, pow_, "x ** y, promoted type")
for _name, _fn, _doc in [("thread_id", thread_id, thread_id.__doc__), ("num_threads", num_threads, num_threads.__doc__),
                         ("tile_id", tile_id, tile_id.__doc__), ("num_tiles", num_tiles, num_tiles.__doc__)]:
    _add(_name, (0,), _team_rule, _fn, _doc)

# Builtins the frontend lowers itself (not ir.Call): where → Select, split → arithmetic,
# sync → Sync, scratch → Scratch, atomic_add → AtomicAdd, casts → Cast, log.* → Log.
