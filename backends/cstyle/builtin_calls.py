"""Builtin calls in C: each registered builtin spelled from its registry entry (a format string
over the argument code) or, for a ``B.Helper`` spelling, by a ``builtin_<name>`` method here.

A mixin of ``CStyleRenderer`` (``self`` has ``bare``, ``expr``, ``helper``, ``ctype``, ``_wrap``,
``targets`` and ``code_for_team``)."""
from __future__ import annotations

from typing import List

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T


class CBuiltinCalls:
    """``visit_Call`` and the builtins whose C spelling needs code, not a format string."""

    def visit_Call(self, e: ir.Call) -> str:
        """A registered builtin, spelled from its registry entry under ``targets``: a format
        string over the argument code, or a ``builtin_<name>`` method (``B.Helper``)."""
        if B.BUILTINS[e.name].kind == "tile":
            return self.builtin_tile(e)
        if B.BUILTINS[e.name].kind == "hint":  # a tensor passes whole: its Helper method spells it
            return getattr(self, "builtin_" + B.spelling(e.name, self.targets, e.loc).name)(e, [])
        spelled = B.spelling(e.name, self.targets, e.loc)
        args = [self.bare(a) for a in e.args]
        if isinstance(spelled, B.Helper):
            return getattr(self, "builtin_" + spelled.name)(e, args)
        return spelled.format(*args, T=self.ctype(e.type))

    # Helper spellings (B.Helper): (call, argument code) -> code
    def builtin_prefetch(self, e: ir.Call, args: List[str]) -> str:
        """OpenCL's ``prefetch`` of one element of a global buffer; of local or private memory, nothing."""
        tensor = e.args[0].tensor
        if not isinstance(self.k.buffer(tensor), ir.TensorParam):
            return "(void)0"
        # as bytes: the line holding the element (prefetch of a half pointer is ambiguous without fp16)
        return f"prefetch(({self.buffer_prefix}const uchar*)({self.pointer(tensor)} + ({self.bare(e.args[1])})), 1)"

    def builtin_thread_id(self, e: ir.Call, args: List[str]) -> str:
        return self.code_for_team["thread_id"]

    def builtin_num_threads(self, e: ir.Call, args: List[str]) -> str:
        return self.code_for_team["num_threads"]

    def builtin_tile_id(self, e: ir.Call, args: List[str]) -> str:
        return self.code_for_team["tile_id"].format(axis=B.grid_axis(e))

    def builtin_num_tiles(self, e: ir.Call, args: List[str]) -> str:
        return self.code_for_team["num_tiles"].format(axis=B.grid_axis(e))

    def builtin_abs(self, e: ir.Call, args: List[str]) -> str:
        t = e.type
        if t.is_float:
            return f"fabs({args[0]})"
        if t.kind == "u":
            return args[0]
        return f"(({self.ctype(t)})abs({args[0]}))"

    def _fold(self, fn: str, args: List[str]) -> str:
        text = args[0]
        for a in args[1:]:
            text = f"{fn}({text}, {a})"
        return text

    def builtin_min(self, e: ir.Call, args: List[str]) -> str:
        return self._fold(self.helper("min", e.type), args)

    def builtin_max(self, e: ir.Call, args: List[str]) -> str:
        return self._fold(self.helper("max", e.type), args)

    def builtin_clamp(self, e: ir.Call, args: List[str]) -> str:
        t = e.type
        return f"{self.helper('min', t)}({self.helper('max', t)}({args[0]}, {args[1]}), {args[2]})"

    def builtin_fma(self, e: ir.Call, args: List[str]) -> str:
        t = e.type
        if t.is_float:
            return f"fma({', '.join(args)})"
        if t.is_bool:
            return f"(({args[0]} && {args[1]}) || {args[2]})"
        return self._wrap(t, f"(({args[0]}) * ({args[1]}) + ({args[2]}))")  # a * b + c, wrapping like '*' and '+'

    def builtin_dot4(self, e: ir.Call, args: List[str]) -> str:
        return f"{self.helper('dot4', T.i32)}({', '.join(args)})"

    def helper_dot4(self, name, t, dtype, extra):
        """dsl.dot4 on one i32: the device's packed u8·i8 dot product where it has one
        (cl_khr_integer_dot_product, decided by the device compiler), else four byte products;
        unsigned sums, so the i32 result wraps as the language says."""
        plain = " + ".join(f"(uint)((int)((a >> {8 * j}) & 0xFFu) * (int)(char)(b >> {8 * j}))" for j in range(4))
        return (f"{self.func_prefix}int {name}(int acc, int sa, int sb) {{\n"
                f"  // acc + dot(4 unsigned bytes of a, 4 signed bytes of b), wrapping\n"
                f"  uint a = (uint)sa, b = (uint)sb;\n"
                f"#if defined(cl_khr_integer_dot_product) && defined(__opencl_c_integer_dot_product_input_4x8bit_packed)\n"
                f"  return (int)((uint)acc + (uint)dot_4x8packed_us_int(a, b));\n"
                f"#else\n"
                f"  return (int)((uint)acc + {plain});\n"
                f"#endif\n}}")

    def builtin_dot4_sat(self, e: ir.Call, args: List[str]) -> str:
        return f"{self.helper('dot4_sat', T.i32)}({', '.join(args)})"

    def helper_dot4_sat(self, name, t, dtype, extra):
        """dsl.dot4_sat on one i32: two pairs of byte products, each clamped to i16, then summed
        (vpmaddubsw's arithmetic; no device built-in has it)."""
        prods = [f"(int)((a >> {8 * j}) & 0xFFu) * (int)(char)(b >> {8 * j})" for j in range(4)]
        return (f"{self.func_prefix}int {name}(int acc, int sa, int sb) {{\n"
                f"  // acc + sat16(a0*b0 + a1*b1) + sat16(a2*b2 + a3*b3), bytes of a unsigned and b signed, wrapping\n"
                f"  uint a = (uint)sa, b = (uint)sb;\n"
                f"  int lo = {prods[0]} + {prods[1]}, hi = {prods[2]} + {prods[3]};\n"
                f"  lo = lo < -32768 ? -32768 : lo > 32767 ? 32767 : lo;\n"
                f"  hi = hi < -32768 ? -32768 : hi > 32767 ? 32767 : hi;\n"
                f"  return (int)((uint)acc + (uint)lo + (uint)hi);\n}}")

    def builtin_dot2_i16(self, e: ir.Call, args: List[str]) -> str:
        return f"{self.helper('dot2_i16', T.i32)}({', '.join(args)})"

    def helper_dot2_i16(self, name, t, dtype, extra):
        """dsl.dot2_i16 on one i32: the products of the two signed i16 halves, summed (vpmaddwd's
        arithmetic); unsigned sums, so the result wraps as the language says."""
        return (f"{self.func_prefix}int {name}(int acc, int a, int b) {{\n"
                f"  // acc + lo16(a)*lo16(b) + hi16(a)*hi16(b), halves signed, wrapping\n"
                f"  return (int)((uint)acc + (uint)((int)(short)a * (int)(short)b)\n"
                f"               + (uint)((int)(short)(a >> 16) * (int)(short)(b >> 16)));\n}}")

    def builtin_pow(self, e: ir.Call, args: List[str]) -> str:
        return self._pow(e.type, e.args[0], e.args[1])

    def _pow(self, t: T.DType, left: ir.Expr, right: ir.Expr) -> str:
        a, b = self.bare(left), self.bare(right)
        if t.is_float:
            if isinstance(right, ir.Const) and float(right.value) == 2.0:
                x = self.expr(left)
                if isinstance(left, (ir.Name, ir.Const)):
                    return f"({x} * {x})"
            return f"pow({a}, {b})"
        return f"{self.helper('ipow', t)}({a}, {b})"
