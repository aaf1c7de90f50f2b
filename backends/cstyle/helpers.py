"""C text the emitter adds on demand: Python-exact arithmetic, bf16 bits, printf formats.

Kept apart from the emitter (backends/cstyle/emitter.py) because it is a small runtime
library, not translation logic: each ``helper_<kind>`` returns one C function,
emitted once per kernel before its first user, named ``opdsl_<kind>_<ctype>``.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from dsl.lang import types as T


class Unsupported(Exception):
    """A construct the target cannot express; the emitter adds the user's source location."""


class CHelpers:
    func_prefix = "static "
    helper_prefix = "opdsl_"
    type_map: Dict[str, str] = {}
    helpers: Dict[str, str]

    def bits_to_float(self, bits: str) -> str:
        """C reinterpreting the uint ``bits`` as a float (a target hook)."""
        raise Unsupported(f"bf16 is not supported by the {type(self).__name__} target")

    def float_to_bits(self, value: str) -> str:
        """C reinterpreting the float ``value`` as a uint (a target hook)."""
        raise Unsupported(f"bf16 is not supported by the {type(self).__name__} target")

    def helper(self, kind: str, dtype: Optional[T.DType] = None, extra: str = "") -> str:
        ctype = self.type_map[dtype.name] if dtype is not None else ""
        name = self.helper_prefix + kind + (f"_{ctype}" if ctype else "") + (f"_{extra}" if extra else "")
        if name not in self.helpers:
            self.helpers[name] = getattr(self, "helper_" + kind)(name, ctype, dtype, extra)
        return name

    def helper_floordiv(self, name, t, dtype, extra):
        if dtype.is_float:
            return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                    f"  // Python a // b: numpy's divmod-based floor division\n"
                    f"  if (b == 0) return a / b;\n"
                    f"  {t} m = fmod(a, b);\n"
                    f"  {t} d = (a - m) / b;\n"
                    f"  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;\n"
                    f"  if (d == 0) return copysign(({t})0, a / b);\n"
                    f"  {t} f = floor(d);\n"
                    f"  return (d - f > ({t})0.5) ? f + 1 : f;\n}}")
        if dtype.kind == "u":
            return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                    f"  // a // b; 0 when b == 0 like numpy\n"
                    f"  return (b == 0) ? 0 : ({t})(a / b);\n}}")
        return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                f"  // Python a // b (rounds toward -inf); 0 when b == 0 and INT_MIN // -1 == INT_MIN like numpy\n"
                f"  if (b == 0) return 0;\n"
                f"  if (b == -1) return ({t})(0 - (u{t})a);\n"
                f"  {t} q = ({t})(a / b);\n"
                f"  return (({t})(q * b) != a && ((a < 0) != (b < 0))) ? ({t})(q - 1) : q;\n}}")

    def helper_mod(self, name, t, dtype, extra):
        if dtype.is_float:
            return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                    f"  // Python a % b: the result has the sign of b\n"
                    f"  {t} r = fmod(a, b);\n"
                    f"  if (r != 0) {{ if ((b < 0) != (r < 0)) r += b; }}\n"
                    f"  else r = copysign(({t})0, b);\n"
                    f"  return r;\n}}")
        if dtype.kind == "u":
            return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                    f"  // a % b; 0 when b == 0 like numpy\n"
                    f"  return (b == 0) ? 0 : ({t})(a % b);\n}}")
        return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                f"  // Python a % b: the result has the sign of b; 0 when b == 0 or b == -1 like numpy\n"
                f"  if (b == 0 || b == -1) return 0;\n"
                f"  {t} r = ({t})(a % b);\n"
                f"  return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(r + b) : r;\n}}")

    def helper_ipow(self, name, t, dtype, extra):
        ut = t if dtype.kind == "u" else "u" + t
        neg = ("  if (e < 0) return (b == 1) ? 1 : (b == -1) ? ((e & 1) ? -1 : 1) : 0;\n"
               if dtype.kind == "i" else "")
        return (f"{self.func_prefix}{t} {name}({t} b, {t} e) {{\n"
                f"  // integer power by squaring, wrapping like numpy; b ** -k truncates toward zero\n{neg}"
                f"  {ut} r = 1, x = ({ut})b;\n"
                f"  while (e > 0) {{\n"
                f"    if (e & 1) r = ({ut})(r * x);\n"
                f"    x = ({ut})(x * x);\n"
                f"    e >>= 1;\n"
                f"  }}\n"
                f"  return ({t})r;\n}}")

    def helper_shl(self, name, t, dtype, extra):
        ut = t if dtype.kind == "u" else "u" + t
        return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                f"  // a << b; 0 when b is outside [0, {dtype.bits}) like numpy (C leaves it undefined)\n"
                f"  return ((ulong)b < {dtype.bits}) ? ({t})(({ut})a << b) : 0;\n}}")

    def helper_shr(self, name, t, dtype, extra):
        if dtype.kind == "u":
            return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                    f"  // a >> b; 0 when b >= {dtype.bits} like numpy (C leaves it undefined)\n"
                    f"  return ((ulong)b < {dtype.bits}) ? ({t})(a >> b) : 0;\n}}")
        return (f"{self.func_prefix}{t} {name}({t} a, {t} b) {{\n"
                f"  // a >> b; a count outside [0, {dtype.bits}) fills with the sign bit like numpy\n"
                f"  return ({t})(a >> (((ulong)b < {dtype.bits}) ? b : {dtype.bits - 1}));\n}}")

    def helper_f2i(self, name, t, dtype, extra):
        """float ``extra`` -> int ``t``: truncate, saturate at the type's range, NaN -> 0."""
        lo, hi = T.int_range(dtype)
        single = extra == "float"
        lo_f, hi_f = self.float_literal(float(lo), single), self.float_literal(float(hi + 1), single)
        return (f"{self.func_prefix}{t} {name}({extra} x) {{\n"
                f"  // int(x): truncate toward zero, saturate at the type's range, NaN -> 0 (C leaves them undefined)\n"
                f"  if (isnan(x)) return 0;\n"
                f"  if (x >= {hi_f}) return {self.int_literal(hi, dtype)};\n"
                f"  if (x < {lo_f}) return {self.int_literal(lo, dtype)};\n"
                f"  return ({t})x;\n}}")

    def helper_where(self, name, t, dtype, extra):
        return (f"{self.func_prefix}{t} {name}(bool c, {t} a, {t} b) {{ return c ? a : b; }}"
                "  // dsl.where: both sides evaluated")

    def helper_min(self, name, t, dtype, extra):
        return f"{self.func_prefix}{t} {name}({t} a, {t} b) {{ return (b < a) ? b : a; }}  // Python min()"

    def helper_max(self, name, t, dtype, extra):
        return f"{self.func_prefix}{t} {name}({t} a, {t} b) {{ return (b > a) ? b : a; }}  // Python max()"

    def helper_bf16_to_f32(self, name, t, dtype, extra):
        return f"{self.func_prefix}float {name}(ushort b) {{ return {self.bits_to_float('((uint)b) << 16')}; }}"

    def helper_f32_to_bf16(self, name, t, dtype, extra):
        return (f"{self.func_prefix}ushort {name}(float f) {{\n"
                f"  // round to nearest even, NaN stays a quiet NaN (as ml_dtypes)\n"
                f"  uint u = {self.float_to_bits('f')};\n"
                f"  if (isnan(f)) return (ushort)((u >> 16) | 0x40);\n"
                f"  u += 0x7fffu + ((u >> 16) & 1u);\n"
                f"  return (ushort)(u >> 16);\n}}")

    def helper_round_bf16(self, name, t, dtype, extra):
        return (f"{self.func_prefix}float {name}(float f) {{ return {self.helper('bf16_to_f32')}"
                f"({self.helper('f32_to_bf16')}(f)); }}")


def printf_args(pieces, args: Sequence[Tuple[str, T.DType]], *, fp64: bool) -> Tuple[str, List[str]]:
    """A parsed log format (``ir.Log.pieces``, dsl/lang/log_format.py) -> C printf text and arguments,
    with the length modifiers and casts that print what Python prints."""
    out: List[str] = []
    cargs: List[str] = []
    it = iter(args)
    for p in pieces:
        if isinstance(p, str):
            out.append(c_escape(p))
            continue
        code, t = next(it)
        conv = p.conv
        if conv == "o" and "#" in p.flags:  # Python's alternate octal is 0o52, C's 052
            out.append("0o")
            p = type(p)(p.flags.replace("#", ""), max(p.width - 2, 0), p.prec, conv)
        if conv in "diouxX":
            c = "d" if conv in "diu" else conv
            if t.is_bool:
                out.append(p.c(c))
                cargs.append(f"(int)({code})")
            elif t.kind == "u":
                out.append(p.c("l" + ("u" if c == "d" else c)))
                cargs.append(f"(ulong)({code})")
            else:  # signed ints, and floats truncated the way Python's %d does
                out.append(p.c("l" + c))
                cargs.append(f"(long)({code})")
        elif conv in "eEfFgG":
            out.append(p.c(conv))
            cargs.append(f"({'double' if fp64 else 'float'})({code})")
        elif conv == "c":
            out.append(p.c("c"))
            cargs.append(f"(int)({code})")
        else:  # %s: Python's str() of the value
            if t.is_bool:
                out.append(p.c("s"))
                cargs.append(f"(({code}) ? \"True\" : \"False\")")
            elif t.is_float:
                out.append(p.c("g"))
                cargs.append(f"({'double' if fp64 else 'float'})({code})")
            else:
                out.append(p.c("lu" if t.kind == "u" else "ld"))
                cargs.append(f"({'ulong' if t.kind == 'u' else 'long'})({code})")
    return "".join(out), cargs


def c_escape(text: str) -> str:
    return (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
            .replace("%", "%%"))
