"""``dsl.log`` and ``print`` for the numba backend: Python's ``%`` formatting, in nopython code.

numba's ``print`` cannot format, and its unicode strings are slow to compile, so a
log line is built in a byte buffer by the C library and written with
``PySys_FormatStdout`` (to ``sys.stdout``, like the interpreter's ``print``):

* ``plan()`` (compile time) turns the parsed format (``ir.Log.pieces``, dsl/lang/log_format.py)
  into C ``snprintf`` pieces: ``%d %i %u``
  and the float conversions mean the same in C and Python (glibc rounds exactly, as
  Python does), so most lines are a single ``put_c`` call;
* the rest gets small helpers: ``%x %X %o`` (Python's ``-ff`` and ``0o`` prefixes),
  ``%s`` of a float (``str()`` of the numpy scalar: the shortest digits that read back
  to the same value), ``%s`` of a bool, a 0-padded inf/nan, ``%s`` width/precision.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
from llvmlite import ir as llir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from dsl.lang import log_format as LF
from dsl.lang.log_format import Spec

_JIT = dict(nogil=True, cache=False, error_model="numpy")

# --------------------------------------------------------------------------- compile time

# The format grammar is dsl/lang/log_format.py's; the frontend parsed it into ``ir.Log.pieces``.
INT_CONVS = LF.INT_CONVS
FLOAT_CONVS = LF.FLOAT_CONVS


# A step of a log line: ("c", c_format, [(kind, code)]) or ("call", template) where kind is
# "i" (int64 argument) or "f" (float64 argument) and template takes the value code.
Step = Tuple


def radix_spec(spec: Spec) -> int:
    """The flags of an ``%o %x %X`` conversion packed into one int (see put_radix)."""
    base = 8 if spec.conv == "o" else 16
    bits = ((spec.conv == "X") << 0 | ("#" in spec.flags) << 1 | ("+" in spec.flags) << 2
            | (" " in spec.flags) << 3 | ("-" in spec.flags) << 4 | ("0" in spec.flags) << 5)
    return base | bits << 8 | (spec.width & 0xFFFF) << 16 | ((spec.prec + 1) & 0xFFFF) << 32


def plan(pieces, kinds) -> List[Step]:
    """C snprintf steps for ``pieces``; ``kinds[k]`` is 'b', 'i', 'u' or 'f' for argument k."""
    steps: List[Step] = []
    cfmt, cargs = "", []

    def flush():
        nonlocal cfmt, cargs
        if cfmt:
            steps.append(("c", cfmt, cargs))
        cfmt, cargs = "", []

    k = 0
    for p in pieces:
        if isinstance(p, str):
            cfmt += p.replace("%", "%%")
            continue
        kind = kinds[k]
        arg = k
        k += 1
        conv = p.conv
        if conv in "diu" or (conv == "s" and kind in "iu" and p.prec < 0):
            cfmt += p.c("llu" if kind == "u" else "lld", drop="#")
            cargs.append(("i", arg))
        elif conv in FLOAT_CONVS and not ("0" in p.flags and "-" not in p.flags and p.width):
            cfmt += p.c(conv)
            cargs.append(("f", arg))
        elif conv == "c":
            cfmt += p.c("c", drop="#+ 0")
            cargs.append(("i", arg))
        else:
            flush()
            steps.append(("spec", p, arg))
    flush()
    return steps


# --------------------------------------------------------------------------- C library calls

def _snprintf(builder, dst, size, cfmt, values):
    fnty = llir.FunctionType(llir.IntType(32), [cgutils.voidptr_t, llir.IntType(64), cgutils.voidptr_t],
                             var_arg=True)
    fn = cgutils.get_or_insert_function(builder.module, fnty, "snprintf")
    return builder.call(fn, [dst, size, cfmt] + list(values))


@intrinsic
def put_c(typingctx, buf, pos, cfmt, values):
    """snprintf(buf + pos, room, cfmt, *values) for a literal C format; returns the new end.

    ``values`` is a tuple of int64/float64.  The text is cut at the buffer's end.
    """
    if not (isinstance(buf, types.Array) and isinstance(cfmt, types.StringLiteral)
            and isinstance(values, types.BaseTuple)):
        return None
    for v in values:
        if v not in (types.int64, types.float64, types.uint64):
            return None
    sig = types.intp(buf, types.intp, cfmt, values)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        pos = args[1]
        room = builder.sub(builder.sub(ary.nitems, pos), llir.Constant(llir.IntType(64), 1))
        room = builder.select(builder.icmp_signed("<", room, room.type(0)), room.type(0), room)
        dst = builder.gep(builder.bitcast(ary.data, cgutils.voidptr_t), [pos])
        text = context.insert_const_string(builder.module, sig.args[2].literal_value)
        vals = [builder.extract_value(args[3], i) for i in range(len(sig.args[3]))]
        size = builder.add(room, room.type(1))
        n = builder.sext(_snprintf(builder, dst, size, text, vals), llir.IntType(64))
        n = builder.select(builder.icmp_signed("<", n, n.type(0)), n.type(0), n)
        n = builder.select(builder.icmp_signed(">", n, room), room, n)
        return builder.add(pos, n)
    return sig, codegen


@intrinsic
def _e_digits(typingctx, buf, digits, value):
    """snprintf(buf, len(buf), "%.*e", digits, value)."""
    if not isinstance(buf, types.Array):
        return None
    sig = types.intp(buf, types.int32, types.float64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        text = context.insert_const_string(builder.module, "%.*e")
        data = builder.bitcast(ary.data, cgutils.voidptr_t)
        n = _snprintf(builder, data, ary.nitems, text, [args[1], args[2]])
        return builder.sext(n, llir.IntType(64))
    return sig, codegen


@intrinsic
def _strtod(typingctx, buf, single):
    """strtod (or strtof when ``single``) of the NUL-terminated bytes in ``buf``, as float64."""
    if not isinstance(buf, types.Array):
        return None
    sig = types.float64(buf, types.boolean)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        data = builder.bitcast(ary.data, cgutils.voidptr_t)
        null = cgutils.voidptr_t(None)
        fd = cgutils.get_or_insert_function(
            builder.module, llir.FunctionType(llir.DoubleType(), [cgutils.voidptr_t, cgutils.voidptr_t]), "strtod")
        ff = cgutils.get_or_insert_function(
            builder.module, llir.FunctionType(llir.FloatType(), [cgutils.voidptr_t, cgutils.voidptr_t]), "strtof")
        v32 = builder.fpext(builder.call(ff, [data, null]), llir.DoubleType())
        v64 = builder.call(fd, [data, null])
        return builder.select(args[1], v32, v64)
    return sig, codegen


@intrinsic
def emit(typingctx, buf, pos):
    """Write bytes [0, pos) of ``buf`` and a newline to ``sys.stdout`` (taking the GIL)."""
    if not isinstance(buf, types.Array):
        return None
    sig = types.void(buf, types.intp)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        data = builder.bitcast(ary.data, cgutils.voidptr_t)
        builder.store(llir.Constant(llir.IntType(8), 0), builder.gep(data, [args[1]]))
        mod = builder.module
        ensure = cgutils.get_or_insert_function(mod, llir.FunctionType(llir.IntType(32), []), "PyGILState_Ensure")
        release = cgutils.get_or_insert_function(
            mod, llir.FunctionType(llir.VoidType(), [llir.IntType(32)]), "PyGILState_Release")
        write = cgutils.get_or_insert_function(
            mod, llir.FunctionType(llir.VoidType(), [cgutils.voidptr_t], var_arg=True), "PySys_FormatStdout")
        state = builder.call(ensure, [])
        builder.call(write, [context.insert_const_string(mod, "%s\n"), data])
        builder.call(release, [state])
        return context.get_dummy_value()
    return sig, codegen


# --------------------------------------------------------------------------- helpers

@njit(**_JIT)
def _put_byte(buf, pos, b):
    if pos < buf.size - 1:
        buf[pos] = b
        return pos + 1
    return pos


@njit(**_JIT)
def pad(buf, start, pos, width, prec, left):
    """Apply ``%[-][width][.prec]s`` to the text in buf[start:pos]; returns the new end."""
    if prec >= 0 and pos - start > prec:
        pos = start + prec
    n = pos - start
    if n >= width:
        return pos
    fill = min(width - n, buf.size - 1 - pos)
    if fill <= 0:
        return pos
    if left:
        for i in range(fill):
            buf[pos + i] = 32
    else:
        for i in range(pos - 1, start - 1, -1):
            buf[i + fill] = buf[i]
        for i in range(fill):
            buf[start + i] = 32
    return pos + fill


@njit(**_JIT)
def put_radix(buf, pos, v, spec):
    """Python's ``%o %x %X`` of an int64 (flags packed by ``radix_spec``): ``-ff``, ``0x``, ``0o``."""
    base = spec & 0xFF
    upper = (spec >> 8) & 1
    alt = (spec >> 9) & 1
    plus = (spec >> 10) & 1
    space = (spec >> 11) & 1
    left = (spec >> 12) & 1
    zero = (spec >> 13) & 1
    width = (spec >> 16) & 0xFFFF
    prec = ((spec >> 32) & 0xFFFF) - 1
    neg = v < 0
    mag = np.uint64(-(v + 1)) + np.uint64(1) if neg else np.uint64(v)
    digits = np.empty(72, np.uint8)
    nd = 0
    b = np.uint64(base)
    while True:
        d = np.int64(mag % b)
        digits[nd] = (48 + d) if d < 10 else ((55 if upper else 87) + d)
        nd += 1
        mag = mag // b
        if mag == np.uint64(0):
            break
    while nd < prec and nd < 64:
        digits[nd] = 48
        nd += 1
    head = np.empty(4, np.uint8)
    nh = 0
    if neg:
        head[nh] = 45
        nh += 1
    elif plus:
        head[nh] = 43
        nh += 1
    elif space:
        head[nh] = 32
        nh += 1
    if alt:
        head[nh] = 48
        head[nh + 1] = (88 if upper else 120) if base == 16 else 111
        nh += 2
    fill = width - nh - nd
    if fill > 0 and not left and not (zero and prec < 0):
        for _ in range(fill):
            pos = _put_byte(buf, pos, 32)
    for i in range(nh):
        pos = _put_byte(buf, pos, head[i])
    if fill > 0 and not left and zero and prec < 0:
        for _ in range(fill):
            pos = _put_byte(buf, pos, 48)
    for i in range(nd - 1, -1, -1):
        pos = _put_byte(buf, pos, digits[i])
    if fill > 0 and left:
        for _ in range(fill):
            pos = _put_byte(buf, pos, 32)
    return pos


@njit(**_JIT)
def _put_repr(buf, pos, x, single):
    if x != x:
        return put_c(buf, pos, "nan", ())
    if x == np.inf:
        return put_c(buf, pos, "inf", ())
    if x == -np.inf:
        return put_c(buf, pos, "-inf", ())
    if x < 0 or (x == 0 and np.copysign(1.0, x) < 0):
        pos = _put_byte(buf, pos, 45)
        x = -x
    if x == 0:
        return put_c(buf, pos, "0.0", ())
    tmp = np.zeros(40, np.uint8)
    n = 0
    for p in range(1, 18):  # the shortest %.Ne that reads back as x
        n = _e_digits(tmp, np.int32(p - 1), x)
        if _strtod(tmp, single) == x:
            break
    digits = np.empty(20, np.uint8)
    nd = 0
    i = 0
    while i < n and tmp[i] != 101:  # up to 'e'
        if tmp[i] != 46:  # skip '.'
            digits[nd] = tmp[i]
            nd += 1
        i += 1
    esign = -1 if tmp[i + 1] == 45 else 1
    e = 0
    for j in range(i + 2, n):
        e = e * 10 + (tmp[j] - 48)
    e *= esign
    while nd > 1 and digits[nd - 1] == 48:
        nd -= 1
    # numpy's str(): float32 is positional for 1e-4 <= x < 1e6 (by value); Python's float
    # repr by the exponent of the shortest digits, -4 <= e < 16
    if (1e-4 <= x < 1e6) if single else (-4 <= e < 16):
        if e >= 0:
            for k in range(max(nd, e + 1)):
                pos = _put_byte(buf, pos, digits[k] if k < nd else 48)
                if k == e:
                    pos = _put_byte(buf, pos, 46)
            if nd <= e + 1:
                pos = _put_byte(buf, pos, 48)
            return pos
        pos = put_c(buf, pos, "0.", ())
        for _ in range(-e - 1):
            pos = _put_byte(buf, pos, 48)
        for k in range(nd):
            pos = _put_byte(buf, pos, digits[k])
        return pos
    pos = _put_byte(buf, pos, digits[0])
    if nd > 1:
        pos = _put_byte(buf, pos, 46)
        for k in range(1, nd):
            pos = _put_byte(buf, pos, digits[k])
    return put_c(buf, pos, "e%+03lld", (np.int64(e),))


@njit(**_JIT)
def put_repr64(buf, pos, x):
    """``%s`` / ``print`` of an f64: ``str(np.float64(x))``."""
    return _put_repr(buf, pos, x, False)


@njit(**_JIT)
def put_repr32(buf, pos, x):
    """``%s`` / ``print`` of an f32 (given as f64): ``str(np.float32(x))``."""
    return _put_repr(buf, pos, x, True)


@njit(**_JIT)
def put_bool(buf, pos, v):
    return put_c(buf, pos, "True", ()) if v else put_c(buf, pos, "False", ())


@njit(**_JIT)
def zero_pad(buf, start, pos, width):
    """Pad buf[start:pos] to ``width`` with zeros after its sign: Python's 0-flagged inf/nan."""
    n = pos - start
    if n >= width:
        return pos
    fill = min(width - n, buf.size - 1 - pos)
    signed = buf[start] == 45 or buf[start] == 43 or buf[start] == 32
    first = start + 1 if signed else start
    for i in range(pos - 1, first - 1, -1):
        buf[i + fill] = buf[i]
    for i in range(fill):
        buf[first + i] = 48
    return pos + fill
