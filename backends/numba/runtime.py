"""Helpers the generated numba modules call: 16-bit float conversion, atomics, team bookkeeping.

numba has no f16/bf16 arrays on the CPU, so those tensors travel as uint16 and
are converted here bit by bit (round half to even, like numpy and ml_dtypes).
Atomics are LLVM ``atomicrmw`` / ``cmpxchg`` on the element pointer, so they are
real hardware atomics across the parallel threads.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir as llir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# only compiled code calls these: no Python or C wrapper to build and optimize on every cold compile
_JIT = dict(nogil=True, cache=False, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)


# --------------------------------------------------------------------------- bit casts

@intrinsic
def f32_bits(typingctx, x):
    """The IEEE bits of a float32 as uint32 (other floats are converted to f32 first)."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.float32)
        return builder.bitcast(v, llir.IntType(32))
    return types.uint32(x), codegen


@intrinsic
def bits_f32(typingctx, x):
    """The float32 whose IEEE bits are the low 32 bits of the integer ``x``."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.uint32)
        return builder.bitcast(v, llir.FloatType())
    return types.float32(x), codegen


# --------------------------------------------------------------------------- f16 / bf16

@intrinsic
def f16_to_f32(typingctx, h):
    """IEEE half bits (the low 16 bits of the integer ``h``) -> float32, exact: one LLVM
    ``fpext half`` (``vcvtph2ps`` with F16C), so loops over f16 data vectorize."""
    if not isinstance(h, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.uint16)
        return builder.fpext(builder.bitcast(v, llir.HalfType()), llir.FloatType())
    return types.float32(h), codegen


@njit(**_JIT)
def f32_to_f16(f):
    """float32 -> IEEE half bits (uint16), round half to even, overflow to inf, NaN kept."""
    x = f32_bits(np.float32(f))
    sign = np.uint16((x >> np.uint32(16)) & np.uint32(0x8000))
    x = x & np.uint32(0x7FFFFFFF)
    if x >= np.uint32(0x7F800000):  # inf or nan
        return np.uint16(sign | np.uint16(0x7C00) | (np.uint16(0x200) if x > np.uint32(0x7F800000) else np.uint16(0)))
    if x >= np.uint32(0x477FF000):  # >= 65520 rounds to inf
        return np.uint16(sign | np.uint16(0x7C00))
    if x < np.uint32(0x38800000):  # below the smallest normal half: count 2**-24 units
        v = bits_f32(x) * np.float32(16777216.0)  # exact: a power-of-two scale
        r = np.floor(v)
        d = v - r
        if d > np.float32(0.5) or (d == np.float32(0.5) and (np.int64(r) & 1) == 1):
            r += np.float32(1.0)
        return np.uint16(sign | np.uint16(np.int64(r)))
    x = x - np.uint32(0x38000000)  # rebias exponent 127 -> 15
    x = x + np.uint32(0xFFF) + ((x >> np.uint32(13)) & np.uint32(1))
    return np.uint16(sign | np.uint16(x >> np.uint32(13)))


@njit(**_JIT)
def bf16_to_f32(h):
    """bfloat16 bits (uint16) -> float32, exact."""
    return bits_f32(np.uint32(h) << np.uint32(16))


@njit(**_JIT)
def f32_to_bf16(f):
    """float32 -> bfloat16 bits, round half to even (ml_dtypes' rounding), NaN stays quiet NaN."""
    x = f32_bits(np.float32(f))
    if (x & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((x >> np.uint32(16)) | np.uint32(0x40))
    x = x + np.uint32(0x7FFF) + ((x >> np.uint32(16)) & np.uint32(1))
    return np.uint16(x >> np.uint32(16))


@njit(**_JIT)
def round_f16(f):
    """``f16(v)`` in a kernel: the f32 value rounded through half precision."""
    return f16_to_f32(f32_to_f16(f))


@njit(**_JIT)
def round_bf16(f):
    """``bf16(v)`` in a kernel: the f32 value rounded through bfloat16."""
    return bf16_to_f32(f32_to_bf16(f))


# --------------------------------------------------------------------------- atomics

def _atomic_rmw_add(name: str, ordering: str, returns_old: bool):
    """An intrinsic doing ``arr[idx] += val`` as one LLVM ``atomicrmw`` (integer ``add`` / float
    ``fadd``) with ``ordering``; it gives the element's old value when ``returns_old``."""
    def typer(typingctx, arr, idx, val):
        if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
            return None
        if not isinstance(arr.dtype, (types.Integer, types.Float)):
            return None
        sig = (arr.dtype if returns_old else types.void)(arr, types.intp, arr.dtype)

        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
            op = "fadd" if isinstance(aryty.dtype, types.Float) else "add"
            old = builder.atomic_rmw(op, ptr, args[2], ordering)
            return old if returns_old else context.get_dummy_value()
        return sig, codegen
    typer.__name__ = typer.__qualname__ = name  # numba names (and caches) the intrinsic by it
    return intrinsic(typer)


# ``dsl.atomic_add`` as a statement: a plain sum, no ordering needed
atomic_add = _atomic_rmw_add("atomic_add", "monotonic", returns_old=False)
# ``old = dsl.atomic_add(...)``: acq_rel, so a thread that claims work through a counter also sees
# what the thread before it published
fetch_add = _atomic_rmw_add("fetch_add", "acq_rel", returns_old=True)


@intrinsic
def cas(typingctx, arr, idx, expected, new):
    """Compare-and-swap on an integer array element; returns the value found (== expected on success)."""
    if not (isinstance(arr, types.Array) and isinstance(arr.dtype, types.Integer)):
        return None
    sig = arr.dtype(arr, types.intp, arr.dtype, arr.dtype)

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        pair = builder.cmpxchg(ptr, args[2], args[3], "monotonic", "monotonic")
        return builder.extract_value(pair, 0)
    return sig, codegen


@njit(**_JIT)
def atomic_add_f16(arr, idx, val):
    """Atomic add on an f16 tensor stored as uint16 (compute in f32, CAS loop)."""
    old = arr[idx]
    while True:
        new = f32_to_f16(f16_to_f32(old) + np.float32(val))
        seen = cas(arr, idx, old, new)
        if seen == old:
            return
        old = seen


@njit(**_JIT)
def atomic_add_bf16(arr, idx, val):
    """Atomic add on a bf16 tensor stored as uint16 (compute in f32, CAS loop)."""
    old = arr[idx]
    while True:
        new = f32_to_bf16(bf16_to_f32(old) + np.float32(val))
        seen = cas(arr, idx, old, new)
        if seen == old:
            return
        old = seen


# --------------------------------------------------------------------------- team bookkeeping

@njit(**_JIT)
def first_live(done):
    """Index of the first thread that has not returned, -1 when the whole team has."""
    for t in range(done.shape[0]):
        if not done[t]:
            return t
    return -1


# numba's parfor pass treats an array allocated in a parallel function, whose only writes
# happen inside called functions, as unchanged after a prange (seen with np.zeros): the
# parallel entries allocate through this opaque helper.

@njit(**_JIT)
def empty(shape, dtype):
    """Scratch memory of every tile: contents undefined at the start of a launch."""
    return np.empty(shape, dtype)


# --------------------------------------------------------------------------- Ctrl-C polling

@intrinsic
def interrupted(typingctx, flag, start):
    """Whether the SIGINT counter ``flag[0]`` moved since the launch began (it read ``start``).

    An atomic (monotonic) load: LLVM may not hoist it out of the loop that polls it, as it
    would a plain load of memory the loop never writes (backends/interrupt.py sets it)."""
    if not (isinstance(flag, types.Array) and flag.dtype == types.int64 and isinstance(start, types.Integer)):
        return None
    sig = types.boolean(flag, types.int64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        now = builder.load_atomic(ary.data, "monotonic", 8)
        return builder.icmp_signed("!=", now, args[1])
    return sig, codegen


@njit(**_JIT)
def trip_count(start, stop, step):
    """len(range(start, stop, step)), exact for every int64 bound (the distance is taken in uint64, where
    ``stop - start`` cannot overflow; counts past int64 max, which no loop reaches, are capped)."""
    if step == 0:  # refused where the step is known at run time only (Gen.refuse_zero_step)
        return np.int64(0)
    one = np.uint64(1)
    if step > 0:
        if stop <= start:
            return np.int64(0)
        n = (np.uint64(stop) - np.uint64(start) - one) // np.uint64(step) + one
    else:
        if start <= stop:
            return np.int64(0)
        n = (np.uint64(start) - np.uint64(stop) - one) // (np.uint64(0) - np.uint64(step)) + one
    return np.int64(min(n, np.uint64(9223372036854775807)))


# --------------------------------------------------------------------------- debug-mode bounds checks
# The record layout is backends/bounds.py's: [claimed, site, axis, tid, tile, index x 8, shape x 8, ...].

@njit(**_JIT)
def record_oob(err, site, axis, tid, tile, idx, shape):
    """Keep the first failing access of the launch (later ones lose the CAS and are dropped)."""
    if cas(err, 0, np.int64(0), np.int64(1)) == 0:
        err[1] = site
        err[2] = axis
        err[3] = tid
        err[4] = tile
        for d in range(min(len(idx), 8)):
            err[5 + d] = idx[d]
            err[13 + d] = shape[d]


@njit(**_JIT)
def refuse(err, site, value, tid, tile):
    """Keep the launch's first refused run-time argument (a range step of 0, a dsl.split align < 1)."""
    if cas(err, 0, np.int64(0), np.int64(1)) == 0:
        err[1] = site
        err[2] = -1
        err[3] = tid
        err[4] = tile
        err[5] = value


@njit(**_JIT)
def checked_offset(idx, shape, err, site, tid, tile):
    """Row-major offset of ``idx`` in ``shape``; -1 after recording the first axis out of range."""
    off = np.int64(0)
    for d in range(len(idx)):
        i = idx[d]
        n = shape[d]
        if i < 0 or i >= n:
            record_oob(err, site, d, tid, tile, idx, shape)
            return np.int64(-1)
        off = off * n + i
    return off


@njit(**_JIT)
def load_checked(arr, idx, shape, zero, err, site, tid, tile):
    """``arr[offset(idx)]``, or ``zero`` (and a record) when an index is out of range."""
    off = checked_offset(idx, shape, err, site, tid, tile)
    if off < 0:
        return zero
    return arr[off]


@njit(**_JIT)
def fetch_add_checked(arr, idx, shape, value, zero, err, site, tid, tile):
    """``fetch_add`` at ``offset(idx)``, or ``zero`` (and a record) when an index is out of range."""
    off = checked_offset(idx, shape, err, site, tid, tile)
    if off < 0:
        return zero
    return fetch_add(arr, off, value)


@njit(**_JIT)
def store_checked(arr, idx, shape, value, err, site, tid, tile):
    """``arr[offset(idx)] = value`` unless an index is out of range (then only the record)."""
    off = checked_offset(idx, shape, err, site, tid, tile)
    if off >= 0:
        arr[off] = value
