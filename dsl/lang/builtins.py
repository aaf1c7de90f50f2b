"""Kernel builtins: registered once, in ``BUILTINS`` (``register``), with everything every layer
needs: the user face (a real function the interpreter runs and resolution recognises), the
compiler face (arity and a type rule the checker applies) and a spelling per target (what
the numba and C-family emitters write).  Adding a builtin is one ``register(...)`` call here
plus its row in docs/language.md.

Inside a kernel the runtime faces read the current team context, which the
interpreter backend binds per Python thread (``bind_context``).
"""
from __future__ import annotations

import math
import operator
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from dsl.lang import quantize as _quantize
from dsl.lang import tiles as _tiles
from dsl.lang import types as T
from dsl.lang.errors import KernelValueError
from dsl.lang.grid import AXES, tile_coords

# --------------------------------------------------------------------------- team context

_local = threading.local()


class TeamContext:
    """What a running kernel thread can ask of its team (implemented by the interpreter)."""

    thread_id: int = 0
    num_threads: int = 1
    flat_tile_id: int = 0    # this team's index in the flattened grid (axis 0 fastest)
    flat_num_tiles: int = 1  # gx * gy * gz
    grid_shape: Tuple[int, int, int] = (1, 1, 1)  # (gx, gy, gz); a 1-d grid is (grid, 1, 1)
    log_level: str = "warn"  # the kernel's compile-time log threshold

    def sync(self) -> None:
        raise NotImplementedError

    def scratch(self, shape, dtype) -> np.ndarray:
        raise NotImplementedError

    def log(self, level: str, text: str) -> None:
        raise NotImplementedError

    def atomic_add(self, array: np.ndarray, index, value):
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


def tile_id(axis: int = 0) -> int:
    """Index of this team along grid axis ``axis`` (0, 1 or 2, a compile-time constant; default 0).

    Axis 0 varies fastest: in a ``grid=(gx, gy)`` launch the flat team index is
    ``tile_id(0) + gx * tile_id(1)``.  Axes beyond the grid's rank give 0."""
    ctx = current()
    return np.int64(tile_coords(ctx.flat_tile_id, ctx.grid_shape)[grid_axis_value(axis, "tile_id")])


def num_tiles(axis: int = 0) -> int:
    """Number of teams along grid axis ``axis`` (0, 1 or 2, a compile-time constant; default 0).

    A 1-d ``grid=n`` launch has ``num_tiles() == n`` and ``num_tiles(1) == num_tiles(2) == 1``."""
    return np.int64(current().grid_shape[grid_axis_value(axis, "num_tiles")])


def grid_axis_value(axis, name: str) -> int:
    """``axis`` checked as the interpreter sees it (compiled code was checked at compile time)."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)) or axis not in AXES:
        raise ValueError(f"dsl.{name}(axis): axis must be 0, 1 or 2, got {axis!r}")
    return int(axis)


def grid_axis(call) -> int:
    """The grid axis of a checked ``tile_id``/``num_tiles`` ir.Call (the checker leaves axis 0 without
    an argument and any other axis as one integer ir.Const)."""
    return call.args[0].value if call.args else 0


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
    if align < 1:  # the interpreter adds the kernel and the place (backends/interpreter)
        err = KernelValueError(f"dsl.split(n, align): align is {align}; accepted: an integer >= 1")
        err.what, err.value, err.loc = "split_align", int(align), None
        raise err
    ctx = current()
    parts, index = ctx.num_threads, ctx.thread_id
    if grid:  # the flattened grid: every thread of every team, whatever the grid's shape
        parts, index = ctx.flat_num_tiles * parts, ctx.flat_tile_id * ctx.num_threads + index
    chunk = -(-n // parts)
    chunk = -(-chunk // align) * align
    lo = min(index * chunk, n)
    return np.int64(lo), np.int64(min(lo + chunk, n))  # i64, as the checker types them


def atomic_add(tensor, index, value):
    """tensor[index] += value, atomically across threads and tiles; returns the element before
    (``old = dsl.atomic_add(...)``: a fetch-and-add, e.g. to claim the next chunk of work)."""
    return current().atomic_add(tensor, index, value)


def static_range(*args):
    """range(...) unrolled at compile time: every bound must be a compile-time constant.

    Compiled code never calls this (the checker unrolls the loop and rejects bounds it cannot
    fold); the interpreter runs the kernel's Python, where this is ``range`` with its checks."""
    if not 1 <= len(args) <= 3:
        raise TypeError(f"dsl.static_range takes 1 to 3 arguments, got {len(args)}")
    return range(*args)


def splat(value, lanes: int, dtype=None):
    """A SIMD value with every one of ``lanes`` lanes ``value`` (converted to ``dtype`` if given)."""
    if dtype is not None:
        value = T.as_dtype(dtype)(value)
    elem = np.asarray(value).dtype
    return np.full(T.simd(elem, lanes).lanes, value, elem).view(Lanes)


def local(shape, dtype):
    """A per-thread array of compile-time ``shape``, every element zero; ``dtype`` may be a
    ``dsl.simd`` type (an array of SIMD values)."""
    return current().local(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), dtype)


def _reduction(fold):
    def run(v):
        v = np.asarray(v)
        return v.dtype.type(fold(v))
    return run


def reduce_add(v):
    """Sum of the lanes of a SIMD value (element type; lanes added in any order)."""
    return _reduction(np.sum)(v)


def _python_fold(pick_later):
    """Lanes folded left to right as Python's max/min do: a later lane wins only if it compares
    greater (smaller), so a NaN in lane 0 is the result and a NaN elsewhere is skipped."""
    def fold(v):
        out = v[0]
        for x in v[1:]:
            if pick_later(x, out):
                out = x
        return out
    return fold


def reduce_max(v):
    """Largest lane of a SIMD value (NaN only if lane 0 is NaN, as max(v[0], v[1], ...))."""
    return _reduction(_python_fold(lambda x, best: x > best))(v)


def reduce_min(v):
    """Smallest lane of a SIMD value (NaN only if lane 0 is NaN, as min(v[0], v[1], ...))."""
    return _reduction(_python_fold(lambda x, best: x < best))(v)


def fma(a, b, c):
    """a * b + c, rounded once where the target has a fused multiply-add (floats), promoted type."""
    lanes = _has_lanes((a, b, c))
    if lanes:
        t = np.result_type(a, b, c)
    else:
        t = _promoted(a, b, c)
        if t in (int, float, bool):
            return t(a * b + c)
        t = np.dtype(t)
    # the f64 product of two f32 is exact, so f32 results are rounded (almost always) once
    wide = np.float64 if t.kind == "f" and t.itemsize < 8 else t
    out = np.asarray(a, wide) * np.asarray(b, wide) + np.asarray(c, wide)
    return out.astype(t).view(Lanes) if lanes else t.type(out)


def _float_of(x):
    """Result of a float builtin on ``x``: f32 stays f32, ints become f64, literals stay Python."""
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return float
    dt = np.asarray(x).dtype
    return dt.type if dt.kind == "f" else np.float64


def _unary_float(fn: Callable) -> Callable:
    """A float builtin from a ``math`` function: computed in f64, rounded to the result type."""
    def run(x):
        if isinstance(x, np.ndarray):
            return np.array([fn(v) for v in x.tolist()], _float_of(x)).view(Lanes)
        return _float_of(x)(fn(float(x)))
    return run


def _np_unary(fn: Callable) -> Callable:
    """A float builtin from a numpy ufunc; integer arguments compute in f64 as the checker types
    them (numpy would give f16 for an i8).  (numpy's floor/ceil, unlike ``math``'s, keep inf
    and NaN, and f32 stays f32, exactly.)"""
    def run(x):
        conv = _float_of(x)
        if conv is float:
            return float(fn(x))
        if isinstance(x, np.ndarray):
            return fn(x.astype(conv, copy=False)).view(Lanes)
        return fn(conv(x))
    return run


def _promoted(*xs):
    """numpy's NEP 50 result of combining ``xs``, as a converter."""
    t = np.result_type(*xs)
    if all(type(x) in (int, float, bool) for x in xs):
        return type(max(xs, key=lambda v: {bool: 0, int: 1, float: 2}[type(v)]))
    return t.type


def min_(*xs):
    if _has_lanes(xs):
        return _fold_lanes(xs, np.less)
    return _promoted(*xs)(min(xs))


def max_(*xs):
    if _has_lanes(xs):
        return _fold_lanes(xs, np.greater)
    return _promoted(*xs)(max(xs))


def abs_(x):
    return type(x)(abs(x)) if isinstance(x, np.generic) else abs(x)


def clamp(x, lo, hi):
    """min(max(x, lo), hi), promoted like arithmetic."""
    if _has_lanes((x, lo, hi)):
        _, (x, lo, hi) = _lane_operands((x, lo, hi))
        m = np.where(lo > x, lo, x)
        return np.where(hi < m, hi, m).view(Lanes)
    return _promoted(x, lo, hi)(min(max(x, lo), hi))


def where(cond, a, b):
    """Elementwise select of two already-computed values (both sides evaluated)."""
    if _has_lanes((cond, a, b)):
        t = np.result_type(a, b)
        return np.where(cond, np.asarray(a, t), np.asarray(b, t)).view(Lanes)
    return _promoted(a, b)(a if cond else b)


def rsqrt(x):
    conv = _float_of(x)
    if isinstance(x, np.ndarray):  # per lane as below: f64, then rounded once
        w = x.astype(np.float64)
        pos = w > 0
        out = np.where(pos, 1.0 / np.sqrt(np.where(pos, w, 1.0)), np.where(w == 0, np.inf, np.nan))
        return out.astype(conv).view(Lanes)
    return conv(1.0 / math.sqrt(float(x))) if float(x) > 0 else conv(math.inf if float(x) == 0 else math.nan)


exp = _np_unary(np.exp)
log_ = _np_unary(np.log)
sqrt = _np_unary(np.sqrt)
tanh = _np_unary(np.tanh)
sin = _np_unary(np.sin)
cos = _np_unary(np.cos)
erf = _unary_float(math.erf)
erfc = _unary_float(math.erfc)
floor = _np_unary(np.floor)
ceil = _np_unary(np.ceil)
rint = _np_unary(np.rint)
tan = _np_unary(np.tan)
asin = _np_unary(np.arcsin)
acos = _np_unary(np.arccos)
atan = _np_unary(np.arctan)
sinh = _np_unary(np.sinh)
cosh = _np_unary(np.cosh)
asinh = _np_unary(np.arcsinh)
acosh = _np_unary(np.arccosh)
atanh = _np_unary(np.arctanh)
expm1 = _np_unary(np.expm1)
log1p = _np_unary(np.log1p)


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
    """``int(v)`` in kernels: a float truncates toward zero, saturates at the i64 range, NaN -> 0.
    On a SIMD value, i64 lanes converted the same way."""
    if isinstance(v, np.ndarray):
        return saturated_lanes(v, T.i64) if v.dtype.kind == "f" else v.astype(np.int64).view(Lanes)
    if isinstance(v, (float, np.floating)):
        return T.saturated_int(float(v), T.i64)
    return int(v)


def float_(v=0.0):
    """``float(v)`` in kernels: Python's; on a SIMD value, f64 lanes (the checker's cast)."""
    if isinstance(v, np.ndarray):
        return v.astype(np.float64).view(Lanes)
    return float(v)


def bool_(v=False):
    """``bool(v)`` in kernels: Python's; on a SIMD value, bool lanes (``v != 0``, the checker's cast)."""
    if isinstance(v, np.ndarray):
        return v.astype(np.bool_).view(Lanes)
    return bool(v)


def prefetch(a, index):
    """Hint that ``a.flat[index]`` is read soon: the cache line holding it starts on its way to
    the core (x86 ``prefetcht0`` on numba, OpenCL ``prefetch`` of a global buffer).  Results never
    change, and an index outside the tensor is allowed and does nothing (a prefetch never faults),
    so a kernel may prefetch the next block without a bounds test.  A statement in a kernel body;
    the interpreter only checks the index is an integer."""
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
        raise KernelValueError(f"dsl.prefetch(a, index): index must be an integer element offset, got "
                               f"{type(index).__name__} {index!r}")


def dot4(acc, a, b):
    """acc + the dot product of the 4 bytes of ``a`` (unsigned) and of ``b`` (signed), per i32 lane.

    Each i32 (lane) of ``a`` and ``b`` holds 4 packed bytes, byte j = (x >> 8·j) & 0xFF (a u8/i8
    array viewed as i32 on a little-endian host).  The products are exact and the sum wraps
    modulo 2**32 like i32 addition, with no intermediate saturation (VNNI's ``vpdpbusd``)."""
    lanes = _has_lanes((acc, a, b))
    ua = np.asarray(a).astype(np.int64) & 0xFFFFFFFF
    ub = np.asarray(b).astype(np.int64) & 0xFFFFFFFF
    total = np.asarray(acc).astype(np.int64)
    for j in range(4):
        sb = (ub >> (8 * j)) & 0xFF
        total = total + ((ua >> (8 * j)) & 0xFF) * (sb - ((sb & 0x80) << 1))
    out = (((total + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int32)
    return out.view(Lanes) if lanes else np.int32(out)


def dot4_sat(acc, a, b):
    """``dot4`` with each pair of byte products summed in saturating i16 first (x86 ``vpmaddubsw``).

    Per i32 lane: acc + sat16(a0·b0 + a1·b1) + sat16(a2·b2 + a3·b3), bytes of ``a`` unsigned and of
    ``b`` signed, the i32 sum wrapping.  It equals ``dot4`` whenever neither pair can leave i16:
    the positive bytes of each pair of ``b`` sum to at most 128, and so do the negative ones
    (7-bit weights, for example); an AVX2 CPU runs it in three instructions where the exact
    ``dot4`` takes about six."""
    lanes = _has_lanes((acc, a, b))
    ua = np.asarray(a).astype(np.int64) & 0xFFFFFFFF
    ub = np.asarray(b).astype(np.int64) & 0xFFFFFFFF
    total = np.asarray(acc).astype(np.int64)
    for pair in range(2):
        s = 0
        for j in (2 * pair, 2 * pair + 1):
            sb = (ub >> (8 * j)) & 0xFF
            s = s + ((ua >> (8 * j)) & 0xFF) * (sb - ((sb & 0x80) << 1))
        total = total + np.clip(s, -32768, 32767)
    out = (((total + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int32)
    return out.view(Lanes) if lanes else np.int32(out)


def dot2_i16(acc, a, b):
    """acc + the dot product of the 2 signed i16 halves of ``a`` and of ``b``, per i32 lane (x86
    ``vpmaddwd``): half h = (x >> 16·h) sign-extended from 16 bits; products and sums in i32,
    wrapping.  An exact int8 product on AVX2 without VNNI: u8 bytes widened to i16 in the loop
    (a mask, a shift) against i8 weights widened once when they are packed."""
    lanes = _has_lanes((acc, a, b))
    ua = np.asarray(a).astype(np.int64) & 0xFFFFFFFF
    ub = np.asarray(b).astype(np.int64) & 0xFFFFFFFF
    total = np.asarray(acc).astype(np.int64)
    for h in range(2):
        sa = (ua >> (16 * h)) & 0xFFFF
        sb = (ub >> (16 * h)) & 0xFFFF
        total = total + (sa - ((sa & 0x8000) << 1)) * (sb - ((sb & 0x8000) << 1))
    out = (((total + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int32)
    return out.view(Lanes) if lanes else np.int32(out)


# --------------------------------------------------------------------------- SIMD values

class Lanes(np.ndarray):
    """A SIMD value in the interpreter: a 1-d numpy array of its lanes, element type as checked.

    A SIMD value is a value, as a scalar is: after ``w = v; w += 1`` the local ``v`` is
    unchanged, and ``acc += f64_lanes`` makes ``acc`` f64 lanes as the checker types the local.
    numpy's in-place operators would write into ``v`` and keep its dtype (or raise for an int
    ``acc``), so augmented assignment here computes a new value and rebinds."""

    def __repr__(self) -> str:
        return f"<simd {self.dtype} x{self.size}: {np.array2string(self.view(np.ndarray), separator=', ')}>"


for _name, _op in [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv), ("mod", operator.mod),
                   ("pow", operator.pow), ("lshift", operator.lshift), ("rshift", operator.rshift),
                   ("and", operator.and_), ("or", operator.or_), ("xor", operator.xor),
                   ("matmul", operator.matmul)]:
    setattr(Lanes, f"__i{_name}__", lambda self, other, _op=_op: _op(self, other))


def _has_lanes(xs) -> bool:
    for x in xs:
        if isinstance(x, np.ndarray):
            return True
    return False


def _lane_operands(xs):
    """(promoted dtype, ``xs`` converted to it): the checker converts every operand of a lane-wise
    builtin to one element type (NEP 50, Python numbers weak) before applying it."""
    t = np.result_type(*xs)
    return t, [np.asarray(x, t) for x in xs]


def _fold_lanes(xs, replaces):
    """Python's ``min``/``max`` per lane: the running result is replaced by a later argument only
    where ``replaces(arg, result)`` (``arg < result`` for min), so NaN handling matches scalars."""
    _, vals = _lane_operands(xs)
    out = vals[0]
    for x in vals[1:]:
        out = np.where(replaces(x, out), x, out)
    return out.view(Lanes)


def saturated_lanes(v, t: T.DType):
    """Float lanes converted to integer type ``t`` as ``T.saturated_int`` converts one value:
    truncated toward zero, saturated at the range, NaN -> 0 (numpy's astype leaves these undefined)."""
    x = np.asarray(v, np.float64)
    lo, hi = T.int_range(t)
    top = float(hi + 1)
    out = np.where((x >= lo) & (x < top), x, 0).astype(t.np)
    out[x >= top] = hi
    out[x < lo] = lo
    return out.view(Lanes)


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
            ctx.log(level, fmt % args)  # the checker accepted fmt: dsl/lang/log_format.py

    def debug(self, fmt: str, *args) -> None:
        self._emit("debug", fmt, *args)

    def info(self, fmt: str, *args) -> None:
        self._emit("info", fmt, *args)

    def warn(self, fmt: str, *args) -> None:
        self._emit("warn", fmt, *args)

    def error(self, fmt: str, *args) -> None:
        self._emit("error", fmt, *args)


log = _Log()


# --------------------------------------------------------------------------- the registry

class BuiltinTypeError(Exception):
    """Raised by a type rule; the checker adds the source location."""


@dataclass(frozen=True)
class Helper:
    """A spelling the target's emitter provides as code: the emitter's ``builtin_<name>``
    method builds the text (for things a format string cannot say: a type-dependent helper
    function, a variadic fold, a thread-index variable of the generated code's structure)."""

    name: str


Spelling = Union[str, Helper]
"""A format string over the argument code, ``{0}``, ``{1}``, ... (each already converted to
the argument type the rule chose, and each used once, so an argument is evaluated once), and
``{T}``, the target's spelling of the result type (numba ``np.float32``, C ``float``); or a
``Helper``."""

TARGETS = ("numba", "c")
"""The built-in targets every ``kind="call"``/``"team"`` builtin must spell.  A backend looks its
spelling up under a chain of target names, most specific first: OpenCL uses ``("opencl", "c")``."""

KINDS = {
    "call": "an ir.Call, typed by its rule and spelled per target",
    "team": "an ir.Call without arguments whose spelling is the generated code's thread structure "
            "(Helper spellings)",
    "tile": "a statement (ir.ExprStmt of an ir.Call) on the tile registers (dsl/lang/tiles.py): literal tile "
            "indexes and, to move memory, a tensor (ir.TensorRef); the checker types it (dsl/lang/check_tiles.py)",
    "lowered": "the frontend builds other IR for it (a statement, a Select, arithmetic); no spelling",
    "hint": "a statement (ir.ExprStmt of an ir.Call) of a tensor (ir.TensorRef) and an element offset that "
            "never changes results (dsl.prefetch); each backend lowers it itself, or to nothing",
}


@dataclass(frozen=True)
class Builtin:
    """One builtin, registered once: everything every layer needs to know about it.

    * ``runtime`` is the Python function kernels call: the interpreter runs it, resolution
      recognises it (``dsl.exp`` is ``BUILTINS["exp"].runtime``), and its docstring documents it;
    * ``arity`` and ``rule`` type a call: ``rule(arg types) -> (argument type, result type)``
      (``RULES`` names the shared ones);
    * ``spelling`` maps target names (``TARGETS``, or a more specific one such as ``"opencl"``)
      to a ``Spelling``;
    * ``kind`` is one of ``KINDS``; a ``"lowered"`` builtin gives the ``reason`` instead of
      spellings;
    * ``derivative`` is how ``dsl.grad`` differentiates a float call (``DERIVATIVES``); a float
      builtin without one cannot be differentiated.
    """

    name: str            # name in the IR (ir.Call.name) and in docs/language.md
    runtime: Callable
    doc: str
    kind: str = "call"
    arity: Tuple[int, ...] = ()  # accepted argument counts
    rule: Optional[Callable[[Sequence[T.DType]], "tuple[T.DType, T.DType]"]] = None
    spelling: Mapping[str, Spelling] = field(default_factory=dict)
    reason: str = ""     # why a "lowered" builtin has no spelling
    varying: bool = False  # its value may differ between the threads of a team (the sync() check)
    positive: bool = False  # its value is always >= 1 (a loop stepping by it counts up)
    literal_arg: Tuple[int, ...] = ()  # its optional argument must fold to one of these at compile time
    derivative: Union[str, Tuple[str, ...]] = ()  # d(result)/d(argument k), one formula per argument (DERIVATIVES)

    def spelled(self, targets: Sequence[str]) -> Optional[Spelling]:
        for t in targets:
            if t in self.spelling:
                return self.spelling[t]
        return None


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


def _dot4_rule(ts):
    """dsl.dot4, dot4_sat, dot2_i16: i32 (or u32) accumulator and packed operands, integer literals;
    the result is i32."""
    for t in ts:
        if not (t.is_int and (t.weak or t.bits == 32)):
            raise BuiltinTypeError(f"takes i32 values (a and b hold 4 packed bytes, or 2 packed i16, per i32: view "
                                   f"u8/i8 data as i32, or pack it with shifts), got {t}")
    return T.i32, T.i32


def _team_rule(ts):
    return T.i64, T.i64


RULES: Dict[str, Callable] = {
    "unary_float": _float_rule,  # one argument, ints -> f64, result has the argument's float type
    "same": _same_rule,          # arguments promoted together (NEP 50), result the promoted type
    "team": _team_rule,          # no arguments (tile_id/num_tiles: a grid axis), i64
}

DERIVATIVES = """A builtin's ``derivative`` is one formula per argument, the partial derivative of the
result with respect to that argument, written in kernel Python over ``x`` (the first argument),
``a``, ``b``, ``c`` (the arguments in order), ``y`` (the result) and float literals, with
arithmetic, comparisons, ``and``/``or``, ``where`` and the registered builtins (dsl/lang/derivatives.py
reads it).  ``"pick"`` says the result is one of the arguments (min, max): the gradient goes to the
first argument equal to the result.  Integer arguments never receive a gradient."""

BUILTINS: Dict[str, Builtin] = {}
_BY_RUNTIME: Dict[int, str] = {}  # id(runtime function) -> name, for resolution


def register(b: Builtin) -> Builtin:
    """Add ``b`` to the table (replacing a builtin of the same name).  This is the only step:
    resolution, the frontend, the checker, the interpreter and every backend read the table."""
    if b.kind not in KINDS:
        raise ValueError(f"builtin {b.name}: kind must be one of {sorted(KINDS)}, got {b.kind!r}")
    if b.kind == "lowered" and not b.reason:
        raise ValueError(f"builtin {b.name}: a lowered builtin says why it has no spelling (reason=)")
    if b.kind != "lowered" and b.rule is None:
        raise ValueError(f"builtin {b.name}: a {b.kind} builtin needs a typing rule")
    unregister(b.name)
    BUILTINS[b.name] = b
    _BY_RUNTIME[id(b.runtime)] = b.name
    return b


def unregister(name: str) -> None:
    old = BUILTINS.pop(name, None)
    if old is not None:
        _BY_RUNTIME.pop(id(old.runtime), None)


def by_runtime(obj) -> Optional[str]:
    """The builtin whose runtime function ``obj`` is, or None."""
    name = _BY_RUNTIME.get(id(obj))
    return name if name is not None and BUILTINS[name].runtime is obj else None


def spelling(name: str, targets: Sequence[str], loc=None) -> Spelling:
    """How target ``targets[0]`` (falling back along ``targets``) writes builtin ``name``; a
    CompileError naming the builtin, the target and the call's location if it has none."""
    from dsl.lang.errors import CompileError
    b = BUILTINS.get(name)
    s = b.spelled(targets) if b is not None else None
    if s is None:
        raise CompileError(f"builtin {name}() has no spelling for the {targets[0]} target",
                           loc, f"add one to its entry in dsl/lang/builtins.py (spelling={{{targets[0]!r}: ...}})")
    return s


def _float_math(name, runtime, doc, numba, c, derivative):
    register(Builtin(name, runtime, doc, arity=(1,), rule=_float_rule, spelling={"numba": numba, "c": c},
                     derivative=(derivative,)))


_float_math("exp", exp, "e**x", "math.exp({0})", "exp({0})", "y")
_float_math("log", log, "natural logarithm", "math.log({0})", "log({0})", "1 / x")
_float_math("sqrt", sqrt, "square root", "math.sqrt({0})", "sqrt({0})", "0.5 / y")
register(Builtin("rsqrt", rsqrt, "1/sqrt(x)", arity=(1,), rule=_float_rule,
                 spelling={"numba": "({T}(1.0) / math.sqrt({0}))", "opencl": "rsqrt({0})", "c": "(({T})1 / sqrt({0}))"},
                 derivative=("-0.5 * y * y * y",)))
_float_math("tanh", tanh, "hyperbolic tangent", "math.tanh({0})", "tanh({0})", "1 - y * y")
_float_math("erf", erf, "error function", "math.erf({0})", "erf({0})", "1.1283791670955126 * exp(-(x * x))")
_float_math("erfc", erfc, "1 - erf(x), accurate where erf(x) is near 1", "math.erfc({0})", "erfc({0})", "-1.1283791670955126 * exp(-(x * x))")
_float_math("sin", sin, "sine", "math.sin({0})", "sin({0})", "cos(x)")
_float_math("cos", cos, "cosine", "math.cos({0})", "cos({0})", "-sin(x)")
_float_math("floor", floor, "largest integral value <= x (a float)", "np.floor({0})", "floor({0})", "0")
_float_math("ceil", ceil, "smallest integral value >= x (a float)", "np.ceil({0})", "ceil({0})", "0")
_float_math("rint", rint, "nearest integral value, ties to even (a float)", "np.rint({0})", "rint({0})", "0")
_float_math("tan", tan, "tangent", "math.tan({0})", "tan({0})", "1 + y * y")
_float_math("asin", asin, "arc sine (NaN outside [-1, 1])", "math.asin({0})", "asin({0})", "1 / sqrt(1 - x * x)")
_float_math("acos", acos, "arc cosine (NaN outside [-1, 1])", "math.acos({0})", "acos({0})", "-1 / sqrt(1 - x * x)")
_float_math("atan", atan, "arc tangent", "math.atan({0})", "atan({0})", "1 / (1 + x * x)")
_float_math("sinh", sinh, "hyperbolic sine", "math.sinh({0})", "sinh({0})", "cosh(x)")
_float_math("cosh", cosh, "hyperbolic cosine", "math.cosh({0})", "cosh({0})", "sinh(x)")
_float_math("asinh", asinh, "inverse hyperbolic sine", "math.asinh({0})", "asinh({0})", "1 / sqrt(x * x + 1)")
_float_math("acosh", acosh, "inverse hyperbolic cosine (NaN below 1)", "math.acosh({0})", "acosh({0})", "1 / sqrt(x * x - 1)")
_float_math("atanh", atanh, "inverse hyperbolic tangent (NaN outside [-1, 1])", "math.atanh({0})", "atanh({0})", "1 / (1 - x * x)")
_float_math("expm1", expm1, "e**x - 1, accurate near 0", "math.expm1({0})", "expm1({0})", "y + 1")
_float_math("log1p", log1p, "log(1 + x), accurate near 0", "math.log1p({0})", "log1p({0})", "1 / (1 + x)")
register(Builtin("abs", abs_, "absolute value, same type", arity=(1,), rule=_same_rule,
                 spelling={"numba": "abs({0})", "c": Helper("abs")},
                 derivative=("where(x > 0, 1, where(x < 0, -1, 0))",)))
register(Builtin("min", min_, "smallest argument, promoted type", arity=tuple(range(2, 9)), rule=_same_rule,
                 spelling={"numba": Helper("min"), "c": Helper("min")}, derivative="pick"))
register(Builtin("max", max_, "largest argument, promoted type", arity=tuple(range(2, 9)), rule=_same_rule,
                 spelling={"numba": Helper("max"), "c": Helper("max")}, derivative="pick"))
register(Builtin("clamp", clamp, "min(max(x, lo), hi), promoted type", arity=(3,), rule=_same_rule,
                 spelling={"numba": Helper("clamp"), "c": Helper("clamp")},
                 derivative=("where(a >= b and a <= c, 1, 0)", "where(a < b, 1, 0)", "where(a > c and a >= b, 1, 0)")))
register(Builtin("fma", fma, "a * b + c rounded once (floats; a fused multiply-add), promoted type", arity=(3,),
                 rule=_same_rule, spelling={"numba": Helper("fma"), "c": Helper("fma")}, derivative=("b", "a", "1")))
register(Builtin("pow", pow_, "x ** y, promoted type (integer edge cases as for **)", arity=(2,), rule=_same_rule,
                 spelling={"numba": Helper("pow"), "c": Helper("pow")},
                 derivative=("where(b == 0, 0, b * pow(a, b - 1))", "where(a > 0, y * log(a), 0)")))
register(Builtin("dot4", dot4, "acc + dot(4 u8 bytes of a, 4 i8 bytes of b) per i32 lane, wrapping (vpdpbusd)",
                 arity=(3,), rule=_dot4_rule, spelling={"numba": Helper("dot4"), "c": Helper("dot4")}))
register(Builtin("dot4_sat", dot4_sat, "dot4 with each pair of byte products summed in saturating i16 (vpmaddubsw)",
                 arity=(3,), rule=_dot4_rule, spelling={"numba": Helper("dot4_sat"), "c": Helper("dot4_sat")}))
register(Builtin("dot2_i16", dot2_i16, "acc + dot(2 i16 halves of a, 2 i16 halves of b) per i32 lane, wrapping (vpmaddwd)",
                 arity=(3,), rule=_dot4_rule, spelling={"numba": Helper("dot2_i16"), "c": Helper("dot2_i16")}))
def _tile_rule(ts):
    """dsl.tile_*: the checker types their arguments itself (dsl/lang/check_tiles.py); no value."""
    return T.i64, T.i32


for _fn, _arity, _doc in (
        (_tiles.tile_zero, 1, "tile t = 0 (tilezero)"),
        (_tiles.tile_load, 4, "tile t = 16 rows of 64 bytes of a, row r from element offset + r * row_stride (tileloadd)"),
        (_tiles.tile_store, 4, "16 rows of 64 bytes of tile t into a, row r at element offset + r * row_stride (tilestored)"),
        (_tiles.tile_dot_u8i8, 3, "tile c (16x16 i32) += tile a (16x64 u8) . tile b (16x16x4 i8), wrapping (tdpbusd)")):
    register(Builtin(_fn.__name__, _fn, _doc, kind="tile", arity=(_arity,), rule=_tile_rule,
                     spelling={"numba": Helper("tile"), "c": Helper("tile")}))
def _hint_rule(ts):
    """dsl.prefetch: the checker types the tensor and the index itself (check.py ``hint_call``); no value."""
    return T.i64, T.i32


register(Builtin("prefetch", prefetch, "start moving the cache line of a.flat[index] toward the core (a hint)",
                 kind="hint", arity=(2,), rule=_hint_rule, spelling={"numba": Helper("prefetch"),
                                                                     "c": Helper("prefetch")}))
for _fn in (thread_id, num_threads, tile_id, num_tiles):
    _per_axis = _fn in (tile_id, num_tiles)  # tile_id(axis), num_tiles(axis): axis a literal 0, 1 or 2
    register(Builtin(_fn.__name__, _fn, _fn.__doc__, kind="team", arity=(0, 1) if _per_axis else (0,),
                     rule=_team_rule, spelling={"numba": Helper(_fn.__name__), "c": Helper(_fn.__name__)},
                     varying=_fn is thread_id, positive=_fn in (num_threads, num_tiles),
                     literal_arg=AXES if _per_axis else ()))
for _fn, _reason in [
    (where, "becomes ir.Select: both operands evaluated, then one picked"),
    (split, "lowered to arithmetic on the team builtins (lo, hi = dsl.split(n))"),
    (sync, "a statement: ir.Sync"),
    (scratch, "a declaration: ir.Scratch in Kernel.scratch"),
    (atomic_add, "a statement (ir.AtomicAdd), or ir.AtomicFetchAdd as an assignment's value"),
    (static_range, "a for loop the checker unrolls (ir.StaticFor, never seen by a backend)"),
    (splat, "becomes ir.Splat (lane count known at compile time)"),
    (local, "a declaration: ir.LocalInit, elements become locals or Kernel.arrays"),
    (reduce_add, "becomes ir.VReduce"), (reduce_max, "becomes ir.VReduce"), (reduce_min, "becomes ir.VReduce"),
    (T.simd, "a type: dsl.simd(f32, 16) names the type of a SIMD value"),
    (_quantize.dequant, "f32 arithmetic written out by the frontend (dsl/lang/quantize.py)"),
    (_quantize.quant, "f32 arithmetic, rint and clamp written out by the frontend (dsl/lang/quantize.py)"),
]:
    register(Builtin(_fn.__name__, _fn, (_fn.__doc__ or "").strip().splitlines()[0], kind="lowered", reason=_reason))
