"""Integer and conversion semantics for numba code, where LLVM's would differ (docs/language.md,
"Semantics").

Each helper is the defined result of an operation whose plain numba spelling is
undefined or different at the edges: ``INT_MIN // -1`` (LLVM's ``sdiv`` overflows),
shift counts outside ``[0, bits)`` (``shl`` gives poison), a negative integer exponent,
and float -> int conversion of NaN, inf or an out-of-range value (``fptosi`` is poison).
They are tiny, so LLVM inlines them; the code generator calls them only where the
operands can reach those edges (a constant in-range shift count is a plain ``<<``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

# only compiled code calls these: no Python or C wrapper to build and optimize on every cold compile
_JIT = dict(nogil=True, cache=False, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)


@intrinsic
def where(typingctx, c, a, b):
    """``dsl.where(c, a, b)`` of scalars: both operands are evaluated (``a if c else b`` is not),
    then one LLVM ``select``, with no branch in numba's IR and no function to compile per type."""
    kinds = (types.Integer, types.Float, types.Boolean)
    if not (isinstance(c, kinds) and isinstance(a, kinds) and isinstance(b, kinds)):
        return None
    t = typingctx.unify_types(types.unliteral(a), types.unliteral(b))
    if not isinstance(t, kinds):
        return None

    def codegen(context, builder, sig, args):
        cond = context.cast(builder, args[0], sig.args[0], types.boolean)
        x, y = (context.cast(builder, v, ty, t) for v, ty in zip(args[1:], sig.args[1:]))
        return builder.select(cond, x, y)
    return t(c, a, b), codegen


def _pick(less: bool):
    """An intrinsic for ``min(a, b)`` (or ``max``) of two numbers, lowered as numba lowers its own: both
    converted to their common type, then ``b`` when ``b < a`` (``b > a``) by an ordered compare, else
    ``a`` (so a NaN in ``b`` is skipped and one in ``a`` kept, as Python does), without compiling
    numba's generic implementation as one more function (~50 ms of a cold compile per type)."""
    def pick(typingctx, a, b):
        kinds = (types.Integer, types.Float)
        if not (isinstance(a, kinds) and isinstance(b, kinds)):
            return None
        t = typingctx.unify_types(types.unliteral(a), types.unliteral(b))  # as numba's min: one common type
        if not isinstance(t, kinds):
            return None

        def codegen(context, builder, sig, args):
            x, y = (context.cast(builder, v, ty, t) for v, ty in zip(args, sig.args))
            op = "<" if less else ">"
            if isinstance(t, types.Float):
                better = builder.fcmp_ordered(op, y, x)
            else:
                better = builder.icmp_signed(op, y, x) if t.signed else builder.icmp_unsigned(op, y, x)
            return builder.select(better, y, x)
        return t(a, b), codegen
    return intrinsic(pick)


min2 = _pick(True)
min2.__doc__ = """``min(a, b)`` of two ints or floats, exactly as numba's ``min`` (NaN as Python's)."""
max2 = _pick(False)
max2.__doc__ = """``max(a, b)`` of two ints or floats, exactly as numba's ``max`` (NaN as Python's)."""


@intrinsic
def count_up(typingctx, start, stop):
    """``len(range(start, stop))`` of two i64 bounds, exact at the int64 limits (the distance is taken
    in uint64, where ``stop - start`` cannot overflow, then capped at int64 max).  An intrinsic, so a
    step-1 loop's count is three selects, not branches: every branch is numba IR blocks, and numba's
    reaching-definitions pass grows with blocks times variables (a 1,300-line thread body spent
    most of its cold compile there when these counts were conditional expressions)."""
    if not (isinstance(start, types.Integer) and isinstance(stop, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        a, e = (context.cast(builder, v, ty, types.int64) for v, ty in zip(args, sig.args))
        i64 = a.type
        zero, cap = i64(0), i64(2 ** 63 - 1)
        d = builder.sub(e, a)  # the uint64 distance, when e > a
        n = builder.select(builder.icmp_unsigned(">", d, cap), cap, d)
        return builder.select(builder.icmp_signed(">", e, a), n, zero)
    return types.int64(start, stop), codegen


@njit(**_JIT)
def floordiv_i64(a, b):
    """Python ``a // b`` on i64: 0 when b == 0, and INT_MIN // -1 wraps to INT_MIN (numpy)."""
    if b == -1:
        return np.int64(0) - a  # wraps at INT_MIN
    if b == 0:
        return np.int64(0)
    return a // b


@njit(**_JIT)
def mod_i64(a, b):
    """Python ``a % b`` on i64: 0 when b == 0 or b == -1 (INT_MIN % -1 is 0)."""
    if b == -1 or b == 0:
        return np.int64(0)
    return a % b


@njit(**_JIT)
def shl(a, b, bits):
    """``a << b``: 0 when the count is outside [0, bits), as numpy."""
    if b < 0 or b >= bits:
        return a - a
    return a << b


@njit(**_JIT)
def shr_signed(a, b, bits):
    """``a >> b`` of a signed value: a count outside [0, bits) fills with the sign bit, as numpy."""
    if b < 0 or b >= bits:
        return a >> (bits - 1)
    return a >> b


@njit(**_JIT)
def shr_unsigned(a, b, bits):
    """``a >> b`` of an unsigned value: 0 when the count is >= bits, as numpy."""
    if b >= bits:
        return a - a
    return a >> b


@njit(**_JIT)
def ipow(b, e, one):
    """Integer ``b ** e`` by squaring, wrapping like numpy (``one`` is 1 of the operands' type).
    A negative exponent gives the exact power truncated toward zero: 1 for b == 1, +-1 for
    b == -1, otherwise 0."""
    if e < 0:
        if b == one:
            return one
        if b == -one:
            return -one if e & one else one
        return one - one
    r = one
    while e > 0:
        if e & one:
            r = r * b
        b = b * b
        e = e >> one
    return r


@njit(**_JIT)
def f2i(x, lo, hi, lo_f, hi_f):
    """float -> signed or narrow unsigned int (as int64): truncate toward zero, saturate at
    [lo, hi], NaN -> 0.  ``lo_f`` is lo and ``hi_f`` is hi + 1 as floats of x's type (exact
    powers of two, or 0), so the comparisons are exact whatever the float width."""
    if x != x:
        return lo - lo
    if x >= hi_f:
        return hi
    if x < lo_f:
        return lo
    return np.int64(x)


@njit(**_JIT)
def f2u64(x, hi_f):
    """float -> u64: truncate toward zero, saturate at [0, 2**64 - 1], NaN -> 0."""
    if x != x or x < 0:
        return np.uint64(0)
    if x >= hi_f:
        return np.uint64(0xFFFFFFFFFFFFFFFF)
    return np.uint64(x)
