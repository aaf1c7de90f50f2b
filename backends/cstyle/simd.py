"""SIMD values (``dsl.simd``, dsl/lang/ir.py "SIMD values") in OpenCL C's vector dialect.

Mixed into CStyleRenderer; a target sets ``vector_dialect = True`` when its C has OpenCL's
vector types (``float4``, ``vload4``, ``convert_int4_sat_rtz``, ``select``, ``.s0`` swizzles).

Bool lanes (comparison masks) are always ``intN`` holding -1 or 0, what comparisons of 32-bit
lanes return: comparisons of other widths, ``select`` masks and conversions to and from numbers
convert at the point of use, so a mask local has one declared type whatever it compared.

Every vector-valued text this file returns is a primary expression (a name, a call or fully
parenthesized), so a lane read can append ``.sK`` to it.

Built-in *functions* (``vload``, ``convert_``, ``select``, ``exp``...) go through ``vcall``, which
splits vectors wider than ``vector_call_bits`` into halves: PoCL 3.0's CPU library takes and
returns 512-bit vectors (``float16``, ``double8``) in a way its kernels disagree with (a crash
or garbage lanes on an AVX-512 host), while operators and swizzles on them are fine.  Lane
values do not depend on the split.
"""
from __future__ import annotations

import re
from typing import List

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from backends.cstyle.helpers import Unsupported

# OpenCL C math functions overloaded for float vectors: a builtin spelled ``name({0}, ...)`` with one
# of these is applied to whole vectors; any other spelling is applied lane by lane (a helper).
VECTOR_MATH = frozenset("""
exp exp2 exp10 expm1 log log2 log10 log1p sqrt rsqrt cbrt sin cos tan asin acos atan atan2 sinh cosh
tanh asinh acosh atanh erf erfc floor ceil trunc round rint fabs fmin fmax fma pow fmod copysign
hypot tgamma lgamma
""".split())
_CALL = re.compile(r"^([A-Za-z_]\w*)\((\{\d\}(, \{\d\})*)?\)$")
_SIGNED = {8: "char", 16: "short", 32: "int", 64: "long"}
_BITS = {"char": 8, "uchar": 8, "short": 16, "ushort": 16, "int": 32, "uint": 32, "long": 64, "ulong": 64,
         "half": 16, "float": 32, "double": 64}
_VT = re.compile(r"([a-z]+?)(\d+)")


def _width(vt: str) -> int:
    """Bits of OpenCL vector type ``vt`` (``float16`` -> 512)."""
    m = _VT.fullmatch(vt)
    return _BITS[m.group(1)] * int(m.group(2))


def _half(vt: str) -> str:
    m = _VT.fullmatch(vt)
    return f"{m.group(1)}{int(m.group(2)) // 2}"
_VEC_C = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "bitand": "&", "bitor": "|", "bitxor": "^",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class CSimd:
    vector_dialect = False  # the target's C has OpenCL's vector types and built-ins
    vector_call_bits = 0    # wider vectors reach built-in functions in halves (0: never split)

    # ---- types --------------------------------------------------------------------
    def vtype(self, t: T.SimdType) -> str:
        """``float4`` for f32x4; bool lanes are ``intN`` masks (see the module docstring)."""
        if not self.vector_dialect:
            raise CompileError(f"SIMD values are not supported by the {type(self).__name__} target", self.cur_loc)
        return f"int{t.lanes}" if t.is_bool else f"{self.ctype(t.elem)}{t.lanes}"

    def vzero(self, t: T.SimdType) -> str:
        return f"(({self.vtype(t)})(0))"

    def vcall(self, fn: str, result: str, args: List[str], types: List[str]) -> str:
        """``fn(args)`` for a built-in function of vectors (types: the argument vector types), in
        halves through a helper when a vector is wider than ``vector_call_bits``."""
        if not self.vector_call_bits or max(map(_width, [result] + types)) <= self.vector_call_bits:
            return f"{fn}({', '.join(_unparen(a) for a in args)})"
        name = f"{self.helper_prefix}halves_{fn}_{result}" + "".join(f"_{t}" for t in types)
        if name not in self.helpers:
            half_fn = re.sub(r"^(convert_[a-z]+?)(\d+)", lambda m: m.group(1) + str(int(m.group(2)) // 2), fn)
            halves = [self.vcall(half_fn, _half(result), [f"p{i}.{h}" for i in range(len(types))], list(map(_half, types)))
                      for h in ("lo", "hi")]
            params = ", ".join(f"{t} p{i}" for i, t in enumerate(types))
            self.helpers[name] = (f"{self.func_prefix}{result} {name}({params}) {{ return ({result})({halves[0]}, "
                                  f"{halves[1]}); }}  // {fn} in halves (see vector_call_bits)")
        return f"{name}({', '.join(_unparen(a) for a in args)})"

    def _mask(self, code: str, bits: int, lanes: int) -> str:
        """A comparison result of ``bits``-wide lanes (a signed vector of that width) as an intN mask."""
        return code if bits == 32 else self.vcall(f"convert_int{lanes}", f"int{lanes}", [code], [f"{_SIGNED[bits]}{lanes}"])

    def _select_mask(self, mask: str, t: T.SimdType) -> str:
        """An intN mask as ``select``'s third operand for lanes of ``t`` (same width, signed)."""
        bits = 32 if t.is_bool else t.bits
        st = f"{_SIGNED[bits]}{t.lanes}"
        return mask if bits == 32 else self.vcall(f"convert_{st}", st, [mask], [f"int{t.lanes}"])

    def select(self, t: T.SimdType, if_false: str, if_true: str, mask: str) -> str:
        """Lanes of ``if_true`` where intN ``mask`` is set, else of ``if_false`` (OpenCL's select)."""
        vt = self.vtype(t)
        m = self._select_mask(mask, t)
        return self.vcall("select", vt, [if_false, if_true, m], [vt, vt, _SIGNED[32 if t.is_bool else t.bits] +
                                                                   str(t.lanes)])

    def _from_mask(self, mask: str, t: T.SimdType) -> str:
        """An intN mask as 1/0 lanes of ``t`` (a select: Oclgrind gets ``-mask`` wrong)."""
        vt = self.vtype(t)
        return self.select(t, f"(({vt})(0))", f"(({vt})(1))", mask)

    # ---- loads and stores -------------------------------------------------------------
    def vload_f16(self, lanes: int, ptr: str) -> str:
        raise Unsupported(f"f16 vloads are not supported by the {type(self).__name__} target")

    def vstore_f16(self, lanes: int, value: str, ptr: str) -> str:
        raise Unsupported(f"f16 vstores are not supported by the {type(self).__name__} target")

    def _wide(self, dtype: T.DType, n: int) -> bool:
        """Whether ``n`` lanes of storage ``dtype`` load and store in halves (vector_call_bits)."""
        bits = 32 if dtype.is_bool else dtype.compute.bits
        return bool(self.vector_call_bits) and bits * n > self.vector_call_bits

    def _vload_code(self, dtype: T.DType, n: int, ptr: str) -> str:
        """The lanes at ``ptr`` (storage ``dtype``) as a value of the compute type; a wide load reads
        ``ptr`` twice, so it is a parameter of a helper there."""
        vt = f"int{n}" if dtype.is_bool else f"{self.ctype(dtype.compute)}{n}"
        if self._wide(dtype, n):
            return f"({vt})({self._vload_code(dtype, n // 2, ptr)}, {self._vload_code(dtype, n // 2, f'{ptr} + {n // 2}')})"
        if dtype.name == "f16":
            return self.vload_f16(n, ptr)
        if dtype.name == "bf16":  # bf16 is the high half of an f32
            return f"as_float{n}({self.vcall(f'convert_uint{n}', f'uint{n}', [f'vload{n}(0, {ptr})'], [f'ushort{n}'])} << 16)"
        if dtype.is_bool:
            return self._mask(f"(vload{n}(0, {ptr}) != (uchar)0)", 8, n)
        return f"vload{n}(0, {ptr})"

    def _vstore_code(self, dtype: T.DType, n: int, value: str, ptr: str) -> str:
        """The statement storing ``value`` at ``ptr``; a wide store names both twice (pass names)."""
        if self._wide(dtype, n):
            return (self._vstore_code(dtype, n // 2, f"{value}.lo", ptr) + " "
                    + self._vstore_code(dtype, n // 2, f"{value}.hi", f"{ptr} + {n // 2}"))
        if dtype.name == "f16":
            return self.vstore_f16(n, value, ptr)
        if dtype.name == "bf16":
            return f"vstore{n}({self._vhelper_bf16(n)}({value}), 0, {ptr});"
        if dtype.is_bool:
            return f"vstore{n}({self._from_mask(value, T.SimdType(T.u8, n))}, 0, {ptr});"
        return f"vstore{n}({value}, 0, {ptr});"

    def _vload_helper(self, buf, n: int, checked: bool) -> str:
        """A helper ``(long o, pointer p)`` loading ``n`` lanes at ``p + o``; ``checked``: o < 0 reads nothing."""
        space = self._space_of(buf)
        stype = "half" if buf.dtype.name == "f16" else self.stype(buf.dtype)
        t = T.SimdType(buf.dtype.compute, n)
        name = (f"{self.helper_prefix}vload{'_checked' if checked else ''}_{ir_tag(buf.dtype)}{n}_"
                f"{space.strip('_ ') or 'private'}")
        if name not in self.helpers:
            vt = self.vtype(t)
            check = (f"  if (o < 0) return {self.vzero(t)};  // a failed bounds check reads nothing\n"
                     if checked else "")
            self.helpers[name] = (f"{self.func_prefix}{vt} {name}(long o, {space}const {stype}* p) {{\n{check}"
                                  f"  return {self._vload_code(buf.dtype, n, 'p + o')};\n}}")
        return name

    def _vptr(self, tensor: str, off: str) -> str:
        if not re.fullmatch(r"[\w.]+", off):
            off = f"({off})"
        return f"{self.pointer(tensor)} + {off}"

    def _space_of(self, buf) -> str:
        if isinstance(buf, ir.Scratch):
            return self.local_prefix
        return self.buffer_prefix if isinstance(buf, ir.TensorParam) else ""

    def _span(self, node, lanes: int, kind: str) -> str:
        """Debug mode: the offset of ``node``'s lanes, or -1 after recording its first lane out of range."""
        site = self.sites.add(node.tensor, kind, True, 1, node.loc if node.loc.line > 0 else self.cur_loc,
                              getattr(self.k, "func_name", ""))
        return (f"{self.helper('span', None, str(lanes))}({self.err_name}, {site}L, (long)({self.bare(node.index)}), "
                f"{self.size_name(node.tensor)})")

    def helper_span(self, name, t, dtype, extra):
        n = int(extra)
        at = self.helper("at", None, "1")
        return (f"{self.func_prefix}long {name}({self.buffer_prefix}long* err, long site, long i, long n) {{\n"
                f"  // debug mode: {n} lanes from i all in range, else the first lane out of range is recorded\n"
                f"  if (i >= 0 && i <= n - {n}) return i;\n"
                f"  return {at}(err, site, (i < 0 || i >= n) ? i : n, n);\n}}")

    def visit_VLoad(self, e: ir.VLoad) -> str:
        buf = self.k.buffer(e.tensor)
        n = e.type.lanes
        if self.debug:  # a failed check reads nothing: zeros (scalar loads read element 0 instead)
            return f"{self._vload_helper(buf, n, True)}({self._span(e, n, 'load')}, {self.pointer(e.tensor)})"
        if self._wide(buf.dtype, n):
            return f"{self._vload_helper(buf, n, False)}({self.bare(e.index)}, {self.pointer(e.tensor)})"
        return self._vload_code(buf.dtype, n, self._vptr(e.tensor, self.bare(e.index)))

    def visit_VStore(self, s: ir.VStore) -> None:
        buf = self.k.buffer(s.tensor)
        n = s.value.type.lanes
        wide = self._wide(buf.dtype, n)
        if not self.debug and not wide:
            self.emit(self._vstore_code(buf.dtype, n, self.bare(s.value), self._vptr(s.tensor, self.bare(s.index))))
            return
        off = self._span(s, n, "store") if self.debug else self.bare(s.index)
        self.emit(f"{{ const long opdsl_o = {off};")
        self.depth += 1
        value = self.bare(s.value)
        if wide:  # stored in halves: the value is named once
            self.emit(f"const {self.vtype(s.value.type)} opdsl_v = {value};")
            value = "opdsl_v"
        if self.debug:
            self.emit("if (opdsl_o >= 0)")
            self.depth += 1
        self.emit(self._vstore_code(buf.dtype, n, value, self._vptr(s.tensor, "opdsl_o")))
        self.depth -= 2 if self.debug else 1
        self.emit("}")

    def _vhelper_bf16(self, n: int) -> str:
        name = f"{self.helper_prefix}f32_to_bf16_{n}"
        if name not in self.helpers:
            nan = self.vcall("isnan", f"int{n}", ["f"], [f"float{n}"])
            self.helpers[name] = (
                f"{self.func_prefix}ushort{n} {name}(float{n} f) {{\n"
                f"  // round to nearest even lane by lane, NaN stays a quiet NaN (the scalar bf16 store's rule)\n"
                f"  uint{n} u = as_uint{n}(f);\n"
                f"  uint{n} r = (u + (uint)0x7fffu + ((u >> 16) & (uint)1u)) >> 16;\n"
                f"  r = {self.select(T.SimdType(T.u32, n), 'r', '((u >> 16) | (uint)0x40u)', nan)};\n"
                f"  return {self.vcall(f'convert_ushort{n}', f'ushort{n}', ['r'], [f'uint{n}'])};\n}}")
        return name

    # ---- values -------------------------------------------------------------------------
    def visit_Splat(self, e: ir.Splat) -> str:
        x = self.bare(e.value)
        if e.type.is_bool:
            return f"(({self.vtype(e.type)})(-(int)({x})))"
        return f"(({self.vtype(e.type)})({x}))"

    def visit_Lane(self, e: ir.Lane) -> str:
        return self._lane(self.expr(e.value), e.value.type, e.lane.value)

    @staticmethod
    def _lane(v: str, t: T.SimdType, k: int) -> str:
        return f"({v}.s{k:x} != 0)" if t.is_bool else f"{v}.s{k:x}"

    def visit_VReduce(self, e: ir.VReduce) -> str:
        t = e.value.type
        vt, et = self.vtype(t), self.ctype(t.elem)
        name = f"{self.helper_prefix}reduce_{e.op}_{vt}"
        if name not in self.helpers:
            if e.op == "add":
                def comb(a, b, n=1):
                    return f"{a} + {b}"
            else:
                fn = ("f" if t.is_float else "") + e.op

                def comb(a, b, n=1):
                    return self.vcall(fn, f"{et}{n}", [a, b], [f"{et}{n}"] * 2) if n > 1 else f"{fn}({a}, {b})"
            lines, cur, n = [], "v", t.lanes
            while n > 2:
                n //= 2
                lines.append(f"  {et}{n} h{n} = {comb(cur + '.lo', cur + '.hi', n)};")
                cur = f"h{n}"
            result = f"({et})({comb(cur + '.s0', cur + '.s1')})"
            why = "lanes combined in halves, then pairs"
            if e.op != "add" and t.is_float:
                # Python's max(v[0], v[1], ...) keeps a NaN first lane and skips later NaNs; f{op} skips every NaN
                result = f"isnan(v.s0) ? v.s0 : {result}"
                why = f"NaN lanes as the scalar {e.op}() fold: a NaN lane 0 wins, later NaNs are skipped"
            self.helpers[name] = (f"{self.func_prefix}{et} {name}({vt} v) {{\n  // dsl.reduce_{e.op}: {why}\n"
                                  + "".join(ln + "\n" for ln in lines) + f"  return {result};\n}}")
        return f"{name}({self.bare(e.value)})"

    def visit_VecOp(self, e: ir.VecOp) -> str:
        op, t = e.op, e.type
        args = [self.expr(a) for a in e.args]  # parenthesized: operands of infix operators
        bare = [_unparen(a) for a in args]      # call arguments
        n = t.lanes
        if op in _VEC_C:
            text = f"({args[0]} {_VEC_C[op]} {args[1]})"
            if op in ir.VEC_COMPARE:  # a signed vector of the operands' width
                at = e.args[0].type
                return self._mask(text, 32 if at.is_bool else at.bits, n)
            return text
        if op == "neg":
            return f"(-{args[0]})" if not args[0].startswith("-") else f"(- {args[0]})"
        if op in ("invert", "not"):
            return f"(~{args[0]})"
        if op == "where":
            return self.select(t, bare[2], bare[1], bare[0])
        if op == "cast":
            return self._vcast(args[0], e.args[0].type, t)
        if op in ("min", "max", "clamp"):
            ops = args if t.is_bool else bare  # bool lanes fold with | and &, others with calls
            if op == "clamp":
                return self._vfold("min", t, [self._vfold("max", t, ops[:2]), ops[2]])
            return self._vfold(op, t, ops)
        if op == "abs":
            vt = self.vtype(t)
            if t.is_float:
                return self.vcall("fabs", vt, bare, [vt])
            return f"as_{vt}({self.vcall('abs', 'u' + vt, bare, [vt])})" if t.kind == "i" else args[0]
        if op == "fma":
            if t.is_float:
                return self.vcall("fma", self.vtype(t), bare, [self.vtype(t)] * 3)
            if t.is_bool:
                return f"(({args[0]} & {args[1]}) | {args[2]})"
            return f"({args[0]} * {args[1]} + {args[2]})"  # vector lanes wrap at their width
        spelled = B.spelling(op, self.targets, e.loc)
        m = _CALL.match(spelled) if isinstance(spelled, str) else None
        if m and m.group(1) in VECTOR_MATH and t.is_float and all(a.type.is_float for a in e.args):
            return self.vcall(m.group(1), self.vtype(t), bare, [self.vtype(a.type) for a in e.args])
        return self._lanewise(e, spelled, bare)

    def _vcast(self, x: str, src: T.SimdType, dst: T.SimdType) -> str:
        """Scalar Cast semantics per lane: float->int truncates and saturates (NaN -> 0), ints wrap."""
        n, vt = dst.lanes, self.vtype(dst)
        if dst.is_bool:
            zero = "0" if src.is_bool else f"({self.ctype(src.elem)})0"
            return self._mask(f"({x} != {zero})", 32 if src.is_bool else src.bits, n)
        if src.is_bool:
            return self._from_mask(x, dst)
        if dst.is_int and src.is_float:
            return f"{self._vhelper_f2i(src, dst)}({_unparen(x)})"
        return self.vcall(f"convert_{vt}", vt, [x], [self.vtype(src)])

    def _vhelper_f2i(self, src: T.SimdType, dst: T.SimdType) -> str:
        vs, vd = self.vtype(src), self.vtype(dst)
        name = f"{self.helper_prefix}f2i_{vd}_{vs}"
        if name not in self.helpers:
            nan = self._mask(self.vcall("isnan", f"{_SIGNED[src.bits]}{src.lanes}", ["x"], [vs]), src.bits, src.lanes)
            sat = self.vcall(f"convert_{vd}_sat_rtz", vd, ["x"], [vs])
            self.helpers[name] = (
                f"{self.func_prefix}{vd} {name}({vs} x) {{\n"
                f"  // int(x) lane by lane: truncate, saturate, NaN -> 0 (the _sat conversion leaves NaN to the device)\n"
                f"  return {self.select(dst, sat, f'(({vd})(0))', nan)};\n}}")
        return name

    def _vfold(self, op: str, t: T.SimdType, args: List[str]) -> str:
        """Python's min()/max() lane by lane, folded left like the scalar helpers."""
        if t.is_bool:
            sym = "|" if op == "max" else "&"
            text = args[0]
            for a in args[1:]:
                text = f"({text} {sym} {a})"
            return text
        if t.is_float:
            fn = f"{self.helper_prefix}v{op}_{self.vtype(t)}"
            if fn not in self.helpers:
                vt, cmp = self.vtype(t), ">" if op == "max" else "<"
                st = f"{_SIGNED[t.bits]}{t.lanes}"  # what the comparison gives
                pick = self.vcall("select", vt, ["a", "b", f"(b {cmp} a)"], [vt, vt, st])
                self.helpers[fn] = (f"{self.func_prefix}{vt} {fn}({vt} a, {vt} b) {{ return {pick}; }}"
                                    f"  // Python {op}() lane by lane (a NaN a is kept, a NaN b skipped)")
            return self._fold(fn, args)
        vt = self.vtype(t)
        text = args[0]
        for a in args[1:]:  # OpenCL's integer min/max: no NaN to care about
            text = self.vcall(op, vt, [text, a], [vt, vt])
        return text

    def _lanewise(self, e: ir.VecOp, spelled, args: List[str]) -> str:
        """A builtin whose spelling has no vector form: a helper applying it to each lane."""
        t = e.type
        ats = [a.type for a in e.args]
        name = f"{self.helper_prefix}lanes_{e.op}_{self.vtype(t)}" + "".join(f"_{self.vtype(a)}" for a in ats)
        if name not in self.helpers:
            lines = []
            for k in range(t.lanes):
                lane_args = [self._lane(f"a{i}", a, k) for i, a in enumerate(ats)]
                if isinstance(spelled, B.Helper):
                    call = ir.Call(e.op, tuple(ir.Name(f"a{i}", type=a.elem) for i, a in enumerate(ats)), type=t.elem)
                    code = getattr(self, "builtin_" + spelled.name)(call, lane_args)
                else:
                    code = spelled.format(*lane_args, T=self.ctype(t.elem))
                lines.append(f"  r.s{k:x} = {f'-(int)({code})' if t.is_bool else code};\n")
            params = ", ".join(f"{self.vtype(a)} a{i}" for i, a in enumerate(ats))
            self.helpers[name] = (f"{self.func_prefix}{self.vtype(t)} {name}({params}) {{\n"
                                  f"  // {e.op}() lane by lane: its scalar spelling has no vector form\n"
                                  f"  {self.vtype(t)} r;\n" + "".join(lines) + "  return r;\n}")
        return f"{name}({', '.join(args)})"


def _unparen(text: str) -> str:
    """``text`` without parentheses around all of it."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for ch in text[1:-1]:
            depth += (ch == "(") - (ch == ")")
            if depth < 0:
                return text
        return text[1:-1] if depth == 0 else text
    return text


def ir_tag(dtype: T.DType) -> str:
    return dtype.name.rstrip("_")
