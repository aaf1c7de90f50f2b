"""``dsl.log`` for the numba backend: printf-style formatting that matches Python's ``%``.

numba's ``print`` cannot format, so the code generator splits each format
string at compile time (``parse``) and calls one small nopython formatter per
conversion.  Floats go through the C library's ``snprintf`` (glibc rounds
exactly, as Python's ``%f %e %g`` do); ``%s`` of a float is the shortest
string that reads back to the same value (``strtod``/``strtof``), laid out as
``str()`` of the numpy scalar would; integers follow Python (``'%x' % -255``
is ``-ff``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Union

import numpy as np
from llvmlite import ir as llir
from numba import literally, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_JIT = dict(nogil=True, cache=False, error_model="numpy")

# --------------------------------------------------------------------------- compile-time parsing

_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\d+)?(?:\.(?P<prec>\d+))?[hlL]*(?P<conv>[diouxXeEfFgGscp%])")
INT_CONVS = "diuoxX"
FLOAT_CONVS = "eEfFgG"


@dataclass(frozen=True)
class Spec:
    """One ``%`` conversion: flags, width, precision (-1 when absent) and the letter."""

    flags: str
    width: int
    prec: int
    conv: str

    @property
    def text(self) -> str:
        return ("%" + self.flags + (str(self.width) if self.width else "")
                + (f".{self.prec}" if self.prec >= 0 else "") + self.conv)


def parse(fmt: str) -> List[Union[str, Spec]]:
    """Split a format into literal text and ``Spec`` items; ValueError names what is unsupported."""
    out: List[Union[str, Spec]] = []
    pos = 0
    lit = ""
    while pos < len(fmt):
        i = fmt.find("%", pos)
        if i < 0:
            lit += fmt[pos:]
            break
        lit += fmt[pos:i]
        m = _SPEC.match(fmt, i)
        if m is None:
            raise ValueError(f"unsupported conversion {fmt[i:i + 3]!r} in log format {fmt!r}; "
                             "accepted: %d %i %u %o %x %X %e %E %f %F %g %G %s %c %% with flags -+ #0, "
                             "a width and a .precision")
        if m.group("conv") == "%":
            lit += "%"
        else:
            if lit:
                out.append(lit)
                lit = ""
            out.append(Spec(m.group("flags") or "", int(m.group("width") or 0),
                            int(m.group("prec")) if m.group("prec") is not None else -1, m.group("conv")))
        pos = m.end()
    if lit:
        out.append(lit)
    return out


# --------------------------------------------------------------------------- C library calls

@intrinsic
def _snprintf_f64(typingctx, buf, fmt, value):
    """snprintf(buf, len(buf), fmt, value) with a literal ``fmt``; returns the length written."""
    if not isinstance(fmt, types.StringLiteral) or not isinstance(buf, types.Array):
        return None
    sig = types.intp(buf, fmt, types.float64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        cfmt = context.insert_const_string(builder.module, sig.args[1].literal_value)
        fnty = llir.FunctionType(llir.IntType(32), [cgutils.voidptr_t, llir.IntType(64), cgutils.voidptr_t],
                                 var_arg=True)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "snprintf")
        data = builder.bitcast(ary.data, cgutils.voidptr_t)
        n = builder.call(fn, [data, ary.nitems, cfmt, args[2]])
        return builder.sext(n, llir.IntType(64))
    return sig, codegen


@intrinsic
def _snprintf_e(typingctx, buf, digits, value):
    """snprintf(buf, len(buf), "%.*e", digits, value)."""
    if not isinstance(buf, types.Array):
        return None
    sig = types.intp(buf, types.int32, types.float64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        cfmt = context.insert_const_string(builder.module, "%.*e")
        fnty = llir.FunctionType(llir.IntType(32), [cgutils.voidptr_t, llir.IntType(64), cgutils.voidptr_t],
                                 var_arg=True)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "snprintf")
        data = builder.bitcast(ary.data, cgutils.voidptr_t)
        n = builder.call(fn, [data, ary.nitems, cfmt, args[1], args[2]])
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
        with builder.if_else(args[1]) as (then, otherwise):
            with then:
                bb_then = builder.basic_block
                v32 = builder.fpext(builder.call(ff, [data, null]), llir.DoubleType())
            with otherwise:
                bb_else = builder.basic_block
                v64 = builder.call(fd, [data, null])
        phi = builder.phi(llir.DoubleType())
        phi.add_incoming(v32, bb_then)
        phi.add_incoming(v64, bb_else)
        return phi
    return sig, codegen


@njit(**_JIT)
def _bytes_str(buf, n):
    s = ""
    for i in range(n):
        s += chr(buf[i])
    return s


# --------------------------------------------------------------------------- formatters

@njit(**_JIT)
def pad(s, width, left, zero_after):
    """Pad ``s`` to ``width``: spaces left/right, or zeros after the first ``zero_after`` chars."""
    n = len(s)
    if n >= width:
        return s
    fill = width - n
    if zero_after >= 0:
        return s[:zero_after] + "0" * fill + s[zero_after:]
    if left:
        return s + " " * fill
    return " " * fill + s


@njit(**_JIT)
def fmt_str(s, width, left, prec):
    """``%[-][width][.prec]s`` of a string."""
    if prec >= 0 and len(s) > prec:
        s = s[:prec]
    return pad(s, width, left, -1)


@njit(**_JIT)
def fmt_int(v, base, upper, plus, space, left, zero, alt, width, prec):
    """Python's ``%d %o %x %X`` of an int64 (or uint64) ``v`` with its flags."""
    neg = v < 0
    if neg:
        mag = np.uint64(-(v + 1)) + np.uint64(1)
    else:
        mag = np.uint64(v)
    digits = "0123456789ABCDEF" if upper else "0123456789abcdef"
    body = ""
    b = np.uint64(base)
    while True:
        body = digits[np.int64(mag % b)] + body
        mag = mag // b
        if mag == np.uint64(0):
            break
    if prec > len(body):
        body = "0" * (prec - len(body)) + body
    head = "-" if neg else ("+" if plus else (" " if space else ""))
    if alt and base == 16:
        head += "0X" if upper else "0x"
    elif alt and base == 8:
        head += "0o"
    s = head + body
    if left:
        return pad(s, width, True, -1)
    return pad(s, width, False, len(head) if zero and prec < 0 else -1)


@njit(**_JIT)
def _digits_of(buf, n):
    """Mantissa digits and decimal exponent of snprintf's ``%.*e`` output in ``buf``."""
    digits = ""
    i = 0
    if buf[0] == 45:  # '-'
        i = 1
    while i < n and buf[i] != 101:  # 'e'
        if buf[i] != 46:  # '.'
            digits += chr(buf[i])
        i += 1
    i += 1
    esign = 1
    if buf[i] == 45:
        esign = -1
    i += 1
    e = 0
    while i < n:
        e = e * 10 + (buf[i] - 48)
        i += 1
    return digits, esign * e


@njit(**_JIT)
def repr_float(x, single):
    """``str()`` of a numpy float64 (``single``: float32) scalar: shortest round-trip digits."""
    if x != x:
        return "nan"
    if x == np.inf:
        return "inf"
    if x == -np.inf:
        return "-inf"
    sign = "-" if (x < 0 or (x == 0 and np.copysign(1.0, x) < 0)) else ""
    if x == 0:
        return sign + "0.0"
    buf = np.zeros(40, np.uint8)
    n = 0
    for p in range(1, 18):
        n = _snprintf_e(buf, np.int32(p - 1), x)
        if _strtod(buf, single) == x:
            break
    digits, e = _digits_of(buf, n)
    while len(digits) > 1 and digits[len(digits) - 1] == "0":
        digits = digits[:len(digits) - 1]
    # numpy's str(): float32 is positional for 1e-4 <= |x| < 1e6 (by value); Python's
    # float repr by the shortest digits' exponent, -4 <= e < 16
    positional = (1e-4 <= abs(x) < 1e6) if single else (-4 <= e < 16)
    if positional:
        if e >= 0:
            if len(digits) <= e + 1:
                return sign + digits + "0" * (e + 1 - len(digits)) + ".0"
            return sign + digits[:e + 1] + "." + digits[e + 1:]
        return sign + "0." + "0" * (-e - 1) + digits
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    ex = -e if e < 0 else e
    es = str(ex)
    if len(es) < 2:
        es = "0" + es
    return sign + mant + ("e-" if e < 0 else "e+") + es


@njit(**_JIT)
def _c_float(fmt, x):
    buf = np.zeros(64, np.uint8)
    n = _snprintf_f64(buf, fmt, x)
    if n >= 64:  # wide fields or huge %f: retry with room for them
        buf = np.zeros(n + 1, np.uint8)
        n = _snprintf_f64(buf, fmt, x)
    return _bytes_str(buf, n)


@njit(**_JIT)
def c_float(fmt, bare, x, width):
    """One float conversion through snprintf; ``fmt`` and ``bare`` are literals like "%08.3f", "%.3f".

    ``bare`` (no width, no 0 flag) serves inf/nan under the 0 flag, which Python
    pads with zeros after the sign and C with spaces.
    """
    literally(fmt)
    literally(bare)
    if width > 0 and not np.isfinite(x):
        s = _c_float(bare, x)
        return pad(s, width, False, 1 if (s[0] == "-" or s[0] == "+" or s[0] == " ") else 0)
    return _c_float(fmt, x)


@njit(**_JIT)
def fmt_bool(v):
    return "True" if v else "False"
