"""SIMD values on numba: an LLVM vector type and the intrinsics generated code calls.

Why intrinsics and not loops for LLVM's vectorizer: in a register-tiled micro-kernel the
vectorizer picks the reduction axis and spills the accumulators (5-7 GFLOP/s measured),
while explicit ``<16 x float>`` values stay in registers (238 GFLOP/s on one AVX-512 core).
A ``Simd`` value is an SSA vector (``PrimitiveModel``), so LLVM allocates registers and
never sees memory for it.

Everything here is generic over the element type and lane count; lane counts and operation
names arrive as literals (``prefer_literal``), so ``sm.vload(a, i, 16)`` types itself.
"""
from __future__ import annotations

from llvmlite import ir as llir
from numba import types
from numba.core.datamodel import models
from numba.extending import intrinsic, register_model


class Simd(types.Type):
    """A vector of ``lanes`` values of numba scalar type ``elem`` (boolean: a lane mask)."""

    def __init__(self, elem, lanes: int):
        self.elem = elem
        self.lanes = lanes
        super().__init__(name=f"simd({elem}, {lanes})")


@register_model(Simd)
class _SimdModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        elem = dmm.lookup(fe_type.elem).get_value_type()
        super().__init__(dmm, fe_type, llir.VectorType(elem, fe_type.lanes))


def _literal(t):
    return getattr(t, "literal_value", None)


def _is_float(t) -> bool:
    return isinstance(t, types.Float)


def _signed(t) -> bool:
    return isinstance(t, types.Integer) and t.signed


def _vec(builder, ty: llir.VectorType, scalar):
    """``scalar`` in every lane of a vector of type ``ty``."""
    one = builder.insert_element(llir.Constant(ty, llir.Undefined), scalar, llir.Constant(llir.IntType(32), 0))
    mask = llir.Constant(llir.VectorType(llir.IntType(32), ty.count), [0] * ty.count)
    return builder.shuffle_vector(one, llir.Constant(ty, llir.Undefined), mask)


def _llvm_intrinsic(builder, base: str, ty, nargs: int):
    """Declare ``llvm.<base>`` overloaded on ``ty`` (scalar or vector: llvm.fma.v16f32)."""
    if isinstance(ty, llir.VectorType):
        el = ty.element
        suffix = f"v{ty.count}{'f32' if isinstance(el, llir.FloatType) else 'f64' if isinstance(el, llir.DoubleType) else f'i{el.width}'}"
    else:
        suffix = "f32" if isinstance(ty, llir.FloatType) else "f64"
    name = f"llvm.{base}.{suffix}"
    fnty = llir.FunctionType(ty, [ty] * nargs)
    fn = builder.module.globals.get(name)
    return fn if fn is not None else llir.Function(builder.module, fnty, name)


def _element_pointer(context, builder, arrty, arr, offset, vty):
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [offset]), vty.as_pointer())


# --------------------------------------------------------------------------- memory

@intrinsic(prefer_literal=True)
def vload(typingctx, arr, offset, lanes):
    """``lanes`` consecutive elements of 1-d array ``arr`` from ``offset`` (unaligned)."""
    n = _literal(lanes)
    if not isinstance(arr, types.Array) or n is None:
        return None
    sig = Simd(arr.dtype, n)(arr, offset, lanes)

    def codegen(context, builder, sig, args):
        vty = context.get_value_type(sig.return_type)
        if arr.dtype == types.boolean:  # bool arrays hold bytes
            bytes_ty = llir.VectorType(llir.IntType(8), n)
            raw = builder.load(_element_pointer(context, builder, arr, args[0], args[1], bytes_ty), align=1)
            return builder.icmp_unsigned("!=", raw, llir.Constant(bytes_ty, [0] * n))
        ptr = _element_pointer(context, builder, arr, args[0], args[1], vty)
        return builder.load(ptr, align=context.get_abi_sizeof(vty.element))
    return sig, codegen


@intrinsic
def prefetch(typingctx, arr, offset):
    """``llvm.prefetch`` (read, keep in all cache levels: x86 ``prefetcht0``) of ``arr[offset]``'s
    address; the address is computed without an in-bounds promise, so any offset is allowed."""
    if not isinstance(arr, types.Array) or not isinstance(offset, types.Integer):
        return None
    sig = types.void(arr, offset)

    def codegen(context, builder, sig, args):
        data = context.make_array(arr)(context, builder, args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), llir.IntType(8).as_pointer())
        i32 = llir.IntType(32)
        fn = builder.module.globals.get("llvm.prefetch.p0")
        if fn is None:
            fn = llir.Function(builder.module, llir.FunctionType(llir.VoidType(), [ptr.type, i32, i32, i32]),
                               "llvm.prefetch.p0")
        builder.call(fn, [ptr, llir.Constant(i32, 0), llir.Constant(i32, 3), llir.Constant(i32, 1)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def vstore(typingctx, arr, offset, value):
    """The lanes of ``value`` into ``arr[offset:offset + lanes]`` (unaligned)."""
    if not isinstance(arr, types.Array) or not isinstance(value, Simd):
        return None
    sig = types.void(arr, offset, value)

    def codegen(context, builder, sig, args):
        v = args[2]
        if arr.dtype == types.boolean:
            v = builder.zext(v, llir.VectorType(llir.IntType(8), value.lanes))
        ptr = _element_pointer(context, builder, arr, args[0], args[1], v.type)
        builder.store(v, ptr, align=context.get_abi_sizeof(v.type.element))
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def bf16_to_f32(typingctx, v):
    """bfloat16 bits (uint16 lanes) -> float32 lanes, exact."""
    if not isinstance(v, Simd):
        return None
    sig = Simd(types.float32, v.lanes)(v)

    def codegen(context, builder, sig, args):
        wide = builder.zext(args[0], llir.VectorType(llir.IntType(32), v.lanes))
        wide = builder.shl(wide, _vec(builder, wide.type, llir.Constant(llir.IntType(32), 16)))
        return builder.bitcast(wide, llir.VectorType(llir.FloatType(), v.lanes))
    return sig, codegen


@intrinsic
def f16_to_f32(typingctx, v):
    """IEEE half bits (uint16 lanes) -> float32 lanes, exact: one vector ``fpext half``
    (``vcvtph2ps`` with F16C), as the scalar ``rt.f16_to_f32`` is for one lane."""
    if not isinstance(v, Simd):
        return None
    sig = Simd(types.float32, v.lanes)(v)

    def codegen(context, builder, sig, args):
        halves = builder.bitcast(args[0], llir.VectorType(llir.HalfType(), v.lanes))
        return builder.fpext(halves, llir.VectorType(llir.FloatType(), v.lanes))
    return sig, codegen


@intrinsic
def f32_to_f16(typingctx, v):
    """float32 lanes -> IEEE half bits, round half to even, overflow to inf (one vector ``fptrunc``:
    ``vcvtps2ph`` with F16C), and every NaN the quiet NaN ``sign | 0x7E00``, as ``rt.f32_to_f16``
    gives (the instruction would keep part of the payload).  Only for hosts that convert halves in
    hardware: elsewhere LLVM would call a runtime routine numba may not link."""
    if not isinstance(v, Simd):
        return None
    sig = Simd(types.uint16, v.lanes)(v)

    def codegen(context, builder, sig, args):
        i16 = llir.VectorType(llir.IntType(16), v.lanes)

        def k(c):
            return _vec(builder, i16, llir.Constant(llir.IntType(16), c))
        x = args[0]
        bits = builder.bitcast(builder.fptrunc(x, llir.VectorType(llir.HalfType(), v.lanes)), i16)
        nan = builder.fcmp_unordered("uno", x, x)
        quiet = builder.or_(builder.and_(bits, k(0x8000)), k(0x7E00))
        return builder.select(nan, quiet, bits)
    return sig, codegen


@intrinsic
def f32_to_bf16(typingctx, v):
    """float32 lanes -> bfloat16 bits, round half to even, NaN kept quiet (as rt.f32_to_bf16)."""
    if not isinstance(v, Simd):
        return None
    sig = Simd(types.uint16, v.lanes)(v)

    def codegen(context, builder, sig, args):
        i32 = llir.VectorType(llir.IntType(32), v.lanes)

        def k(c):
            return _vec(builder, i32, llir.Constant(llir.IntType(32), c))
        x = builder.bitcast(args[0], i32)
        rounded = builder.add(builder.add(x, k(0x7FFF)), builder.and_(builder.lshr(x, k(16)), k(1)))
        quiet = builder.or_(builder.lshr(x, k(16)), k(0x40))
        nan = builder.icmp_unsigned(">", builder.and_(x, k(0x7FFFFFFF)), k(0x7F800000))
        bits = builder.select(nan, quiet, builder.lshr(rounded, k(16)))
        return builder.trunc(bits, llir.VectorType(llir.IntType(16), v.lanes))
    return sig, codegen


# --------------------------------------------------------------------------- lanes

@intrinsic(prefer_literal=True)
def vsplat(typingctx, value, lanes):
    """``value`` in each of ``lanes`` lanes."""
    n = _literal(lanes)
    if n is None or not isinstance(value, (types.Number, types.Boolean)):
        return None
    elem = types.unliteral(value)
    sig = Simd(elem, n)(value, lanes)

    def codegen(context, builder, sig, args):
        vty = context.get_value_type(sig.return_type)
        scalar = context.cast(builder, args[0], value, elem)
        if elem == types.boolean:
            scalar = builder.trunc(scalar, llir.IntType(1)) if scalar.type != llir.IntType(1) else scalar
        return _vec(builder, vty, scalar)
    return sig, codegen


@intrinsic
def vget(typingctx, v, k):
    """Lane ``k`` of ``v``."""
    if not isinstance(v, Simd):
        return None
    sig = v.elem(v, k)

    def codegen(context, builder, sig, args):
        lane = builder.extract_element(args[0], args[1])
        if v.elem == types.boolean:
            return context.cast(builder, lane, types.boolean, types.boolean)
        return lane
    return sig, codegen


@intrinsic
def vset(typingctx, v, k, x):
    """``v`` with lane ``k`` replaced by ``x`` (converted to the lane type)."""
    if not isinstance(v, Simd):
        return None
    sig = v(v, k, x)

    def codegen(context, builder, sig, args):
        return builder.insert_element(args[0], context.cast(builder, args[2], x, v.elem), args[1])
    return sig, codegen


# --------------------------------------------------------------------------- arithmetic

def _min_max(builder, name: str, elem, a, b):
    """Python's min(a, b) (b only if b < a) and max(a, b) (b only if b > a), lane by lane."""
    if _is_float(elem):
        pick_b = builder.fcmp_ordered("<" if name == "min" else ">", b, a)
    elif _signed(elem):
        pick_b = builder.icmp_signed("<" if name == "min" else ">", b, a)
    else:
        pick_b = builder.icmp_unsigned("<" if name == "min" else ">", b, a)
    return builder.select(pick_b, b, a)


def _binary(builder, op: str, elem, a, b):
    if op in ("min", "max"):
        return _min_max(builder, op, elem, a, b)
    if op in ("bitand", "bitor", "bitxor"):
        return {"bitand": builder.and_, "bitor": builder.or_, "bitxor": builder.xor}[op](a, b)
    if _is_float(elem):
        return {"add": builder.fadd, "sub": builder.fsub, "mul": builder.fmul, "truediv": builder.fdiv}[op](a, b)
    return {"add": builder.add, "sub": builder.sub, "mul": builder.mul}[op](a, b)


@intrinsic(prefer_literal=True)
def vbinary(typingctx, op, a, b):
    """Element-wise ``a op b`` (op: add sub mul truediv min max bitand bitor bitxor)."""
    name = _literal(op)
    if name is None or not isinstance(a, Simd) or a != b:
        return None
    sig = a(op, a, b)

    def codegen(context, builder, sig, args):
        return _binary(builder, name, a.elem, args[1], args[2])
    return sig, codegen


_FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}


@intrinsic(prefer_literal=True)
def vcompare(typingctx, op, a, b):
    """Element-wise comparison -> bool lanes (``!=`` is true for NaN, as in Python)."""
    name = _literal(op)
    if name is None or not isinstance(a, Simd) or a != b:
        return None
    sig = Simd(types.boolean, a.lanes)(op, a, b)
    sym = {**_FCMP, "ne": "!="}[name]

    def codegen(context, builder, sig, args):
        x, y = args[1], args[2]
        if _is_float(a.elem):
            return builder.fcmp_unordered("!=", x, y) if name == "ne" else builder.fcmp_ordered(sym, x, y)
        if _signed(a.elem):
            return builder.icmp_signed(sym, x, y)
        return builder.icmp_unsigned(sym, x, y)
    return sig, codegen


_FLOAT_UNARY = {"abs": "fabs", "sqrt": "sqrt", "rint": "rint", "floor": "floor", "ceil": "ceil"}  # exact LLVM forms


@intrinsic(prefer_literal=True)
def vunary(typingctx, op, a):
    """Element-wise ``neg`` / ``invert`` / ``not`` (bool lanes) / ``abs`` / ``sqrt`` / ``rint`` /
    ``floor`` / ``ceil`` (the last three for floats: llvm.rint rounds half to even, as np.rint)."""
    name = _literal(op)
    if name is None or not isinstance(a, Simd):
        return None
    sig = a(op, a)

    def codegen(context, builder, sig, args):
        x = args[1]
        vty = x.type
        if name == "neg":
            return builder.fneg(x) if _is_float(a.elem) else builder.sub(llir.Constant(vty, None), x)
        if name in ("invert", "not"):
            return builder.xor(x, _vec(builder, vty, llir.Constant(vty.element, -1)))
        if name in _FLOAT_UNARY and _is_float(a.elem):
            return builder.call(_llvm_intrinsic(builder, _FLOAT_UNARY[name], vty, 1), [x])
        if name == "abs":  # integers: wraps at the minimum, as the scalar abs does
            if not _signed(a.elem):
                return x
            neg = builder.icmp_signed("<", x, llir.Constant(vty, None))
            return builder.select(neg, builder.sub(llir.Constant(vty, None), x), x)
        raise AssertionError(name)
    return sig, codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """a * b + c per lane, one rounding for floats (llvm.fma: vfmadd where the CPU has FMA)."""
    if not isinstance(a, Simd) or not (a == b == c):
        return None
    sig = a(a, b, c)

    def codegen(context, builder, sig, args):
        if _is_float(a.elem):
            return builder.call(_llvm_intrinsic(builder, "fma", args[0].type, 3), args)
        return builder.add(builder.mul(args[0], args[1]), args[2])
    return sig, codegen


@intrinsic
def fma(typingctx, a, b, c):
    """Scalar a * b + c with one rounding for floats (llvm.fma)."""
    if not (a == b == c) or not isinstance(a, (types.Float, types.Integer)):
        return None
    sig = a(a, b, c)

    def codegen(context, builder, sig, args):
        if _is_float(a):
            return builder.call(_llvm_intrinsic(builder, "fma", args[0].type, 3), args)
        return builder.add(builder.mul(args[0], args[1]), args[2])
    return sig, codegen


@intrinsic
def vselect(typingctx, mask, a, b):
    """Lane by lane: ``a`` where ``mask`` is true, else ``b``."""
    if not (isinstance(mask, Simd) and isinstance(a, Simd) and a == b and mask.lanes == a.lanes):
        return None
    sig = a(mask, a, b)

    def codegen(context, builder, sig, args):
        return builder.select(args[0], args[1], args[2])
    return sig, codegen


@intrinsic(prefer_literal=True)
def vconvert(typingctx, v, dtype):
    """Lanes converted to numba type named ``dtype`` ("float32", "int64", "bool"...), as numpy's
    astype does for the exact conversions; float -> int lanes are converted by the caller per lane
    (they saturate, which LLVM's fptosi does not)."""
    name = _literal(dtype)
    if name is None or not isinstance(v, Simd):
        return None
    to = types.boolean if name == "bool" else getattr(types, name)
    if _is_float(v.elem) and isinstance(to, types.Integer):
        return None
    sig = Simd(to, v.lanes)(v, dtype)

    def codegen(context, builder, sig, args):
        x = args[0]
        src, vty = v.elem, context.get_value_type(sig.return_type)
        if to == types.boolean:
            zero = llir.Constant(x.type, None)
            return builder.fcmp_unordered("!=", x, zero) if _is_float(src) else builder.icmp_unsigned("!=", x, zero)
        if src == types.boolean:
            return builder.uitofp(x, vty) if _is_float(to) else builder.zext(x, vty)
        if _is_float(src):
            return builder.fpext(x, vty) if to.bitwidth > src.bitwidth else builder.fptrunc(x, vty)
        if _is_float(to):
            return builder.sitofp(x, vty) if _signed(src) else builder.uitofp(x, vty)
        if to.bitwidth == src.bitwidth:
            return x
        if to.bitwidth < src.bitwidth:
            return builder.trunc(x, vty)
        return builder.sext(x, vty) if _signed(src) else builder.zext(x, vty)
    return sig, codegen


@intrinsic(prefer_literal=True)
def vf2i(typingctx, v, dtype):
    """Float lanes -> integer lanes of at most 32 bits named ``dtype``, as ``int()`` converts one
    value: truncated toward zero, saturated at the type's range, NaN -> 0 (LLVM's fptosi alone is
    undefined outside the range, so the lanes are range-checked first)."""
    name = _literal(dtype)
    if name is None or not isinstance(v, Simd) or not _is_float(v.elem):
        return None
    to = getattr(types, name, None)
    if not isinstance(to, types.Integer) or to.bitwidth > 32:
        return None
    sig = Simd(to, v.lanes)(v, dtype)
    info = (0, (1 << to.bitwidth) - 1) if not to.signed else (-(1 << to.bitwidth - 1), (1 << to.bitwidth - 1) - 1)

    def codegen(context, builder, sig, args):
        x = args[0]
        fty, n = x.type.element, v.lanes
        # the range-checked lanes fit i32 unless the target is u32: converting to i32 keeps the
        # vector form (AVX2 has no f32 -> i64 lane conversion; LLVM would go lane by lane)
        bits = 64 if to.bitwidth == 32 and not to.signed else 32
        wty = llir.VectorType(llir.IntType(bits), n)
        below = builder.fcmp_ordered("<", x, _vec(builder, x.type, llir.Constant(fty, float(info[0]))))
        above = builder.fcmp_ordered(">=", x, _vec(builder, x.type, llir.Constant(fty, float(info[1] + 1))))
        nan = builder.fcmp_unordered("uno", x, x)
        safe = builder.select(builder.or_(builder.or_(below, above), nan), llir.Constant(x.type, None), x)
        wide = builder.fptosi(safe, wty)
        wide = builder.select(below, _vec(builder, wty, llir.Constant(llir.IntType(bits), info[0])), wide)
        wide = builder.select(above, _vec(builder, wty, llir.Constant(llir.IntType(bits), info[1])), wide)
        out = context.get_value_type(sig.return_type)
        return wide if out.element.width == bits else builder.trunc(wide, out)
    return sig, codegen


@intrinsic(prefer_literal=True)
def vreduce(typingctx, op, v):
    """Sum / largest / smallest lane: a tree of halvings (add reassociates: lanes summed in pairs;
    max/min give what max(v[0], v[1], ...) gives, NaN only when lane 0 is NaN)."""
    name = _literal(op)
    if name is None or not isinstance(v, Simd):
        return None
    sig = v.elem(op, v)

    nan_aware = name in ("max", "min") and _is_float(v.elem)

    def codegen(context, builder, sig, args):
        x = args[1]
        n = v.lanes
        i32 = llir.IntType(32)
        while n > 1:
            half = n // 2
            lo = builder.shuffle_vector(x, x, llir.Constant(llir.VectorType(i32, half), list(range(half))))
            hi = builder.shuffle_vector(x, x, llir.Constant(llir.VectorType(i32, half), list(range(half, n))))
            if nan_aware:  # NaN lanes lose every pairing, so the tree equals the left-to-right fold
                better = builder.fcmp_ordered(">" if name == "max" else "<", hi, lo)
                x = builder.select(builder.or_(better, builder.fcmp_unordered("uno", lo, lo)), hi, lo)
            else:
                x = _binary(builder, name, v.elem, lo, hi)
            n = half
        out = builder.extract_element(x, llir.Constant(i32, 0))
        if nan_aware:  # ... except that max(v[0], ...) is NaN when v[0] is
            first = builder.extract_element(args[1], llir.Constant(i32, 0))
            out = builder.select(builder.fcmp_unordered("uno", first, first), first, out)
        return out
    return sig, codegen


# --------------------------------------------------------------------------- int8 dot products

DOT4_LOWERINGS = ("vnni", "avx2", "generic")


def _declared(builder, name: str, ret, params):
    fn = builder.module.globals.get(name)
    return fn if fn is not None else llir.Function(builder.module, llir.FunctionType(ret, params), name)


def _dot4_generic(builder, acc, a, b):
    """acc + Σ_j zext(byte j of a)·sext(byte j of b) in i32 arithmetic (scalars or vectors)."""
    def k(c):
        c = llir.Constant(llir.IntType(32), c)
        return _vec(builder, acc.type, c) if isinstance(acc.type, llir.VectorType) else c
    for j in range(4):
        ua = builder.and_(builder.lshr(a, k(8 * j)), k(0xFF))
        sb = builder.ashr(builder.shl(b, k(24 - 8 * j)), k(24))
        acc = builder.add(acc, builder.mul(ua, sb))
    return acc


def _dot4_pmaddwd(builder, acc, a, b):
    """The exact AVX2 form: the even and odd bytes widened to i16 in place (a zero-, b
    sign-extended: two shifts or a mask each), then ``vpmaddwd`` twice, whose i16 products and
    pair sums are exact in i32.  (``vpmaddubsw`` would add the u8·i8 pairs in saturating i16:
    255·-128·2 does not fit, so it is not used.)"""
    n = acc.type.count
    if n == 16:  # two 256-bit halves
        i32 = llir.IntType(32)

        def half(v, h):
            return builder.shuffle_vector(v, v, llir.Constant(llir.VectorType(i32, 8), list(range(8 * h, 8 * h + 8))))
        lo = _dot4_pmaddwd(builder, half(acc, 0), half(a, 0), half(b, 0))
        hi = _dot4_pmaddwd(builder, half(acc, 1), half(a, 1), half(b, 1))
        return builder.shuffle_vector(lo, hi, llir.Constant(llir.VectorType(i32, 16), list(range(16))))
    w = llir.VectorType(llir.IntType(16), 2 * n)
    eight = _vec(builder, w, llir.Constant(llir.IntType(16), 8))
    a16, b16 = builder.bitcast(a, w), builder.bitcast(b, w)
    a_even = builder.and_(a16, _vec(builder, w, llir.Constant(llir.IntType(16), 0xFF)))
    a_odd = builder.lshr(a16, eight)
    b_even = builder.ashr(builder.shl(b16, eight), eight)
    b_odd = builder.ashr(b16, eight)
    name = "llvm.x86.avx2.pmadd.wd" if n == 8 else "llvm.x86.sse2.pmadd.wd"
    pmadd = _declared(builder, name, acc.type, [w, w])
    return builder.add(acc, builder.add(builder.call(pmadd, [a_even, b_even]), builder.call(pmadd, [a_odd, b_odd])))


def _dot4_vnni(builder, acc, a, b):
    n = acc.type.count
    fn = _declared(builder, f"llvm.x86.avx512.vpdpbusd.{32 * n}", acc.type, [acc.type] * 3)
    return builder.call(fn, [acc, a, b])


def _dot4_sat_generic(builder, acc, a, b):
    """acc + sat16(a0·b0 + a1·b1) + sat16(a2·b2 + a3·b3) in i32 arithmetic (``vpmaddubsw``'s pairs)."""
    def k(c):
        c = llir.Constant(llir.IntType(32), c)
        return _vec(builder, acc.type, c) if isinstance(acc.type, llir.VectorType) else c
    for pair in range(2):
        s = None
        for j in (2 * pair, 2 * pair + 1):
            ua = builder.and_(builder.lshr(a, k(8 * j)), k(0xFF))
            sb = builder.ashr(builder.shl(b, k(24 - 8 * j)), k(24))
            p = builder.mul(ua, sb)
            s = p if s is None else builder.add(s, p)
        lo, hi = k(-32768), k(32767)
        s = builder.select(builder.icmp_signed("<", s, lo), lo, s)
        s = builder.select(builder.icmp_signed(">", s, hi), hi, s)
        acc = builder.add(acc, s)
    return acc


def _on_256_bit_halves(builder, lowering, acc, a, b):
    """``lowering`` on 16 i32 lanes as two 8-lane halves (AVX2 without AVX512BW), joined again."""
    i32 = llir.IntType(32)

    def half(v, h):
        return builder.shuffle_vector(v, v, llir.Constant(llir.VectorType(i32, 8), list(range(8 * h, 8 * h + 8))))
    lo = lowering(builder, half(acc, 0), half(a, 0), half(b, 0))
    hi = lowering(builder, half(acc, 1), half(a, 1), half(b, 1))
    return builder.shuffle_vector(lo, hi, llir.Constant(llir.VectorType(i32, 16), list(range(16))))


def _dot4_maddubs(builder, acc, a, b, halves=False):
    """``vpmaddubsw`` (u8·i8 pairs summed in saturating i16), then ``vpmaddwd`` by ones (the two
    pairs of a lane summed in i32, exact), then the add: three instructions per vector; 16 lanes
    as two 256-bit halves with ``halves`` (AVX2 without AVX512BW)."""
    n = acc.type.count
    if n == 16 and halves:
        return _on_256_bit_halves(builder, _dot4_maddubs, acc, a, b)
    bytes_t = llir.VectorType(llir.IntType(8), 4 * n)
    words = llir.VectorType(llir.IntType(16), 2 * n)
    ubs, wd = {4: ("llvm.x86.ssse3.pmadd.ub.sw.128", "llvm.x86.sse2.pmadd.wd"),
               8: ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"),
               16: ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512")}[n]
    pairs = builder.call(_declared(builder, ubs, words, [bytes_t, bytes_t]),
                         [builder.bitcast(a, bytes_t), builder.bitcast(b, bytes_t)])
    ones = _vec(builder, words, llir.Constant(llir.IntType(16), 1))
    return builder.add(acc, builder.call(_declared(builder, wd, acc.type, [words, words]), [pairs, ones]))


DOT4_SAT_LOWERINGS = ("maddubs", "maddubs256", "generic")


def _byte_dot_signature(acc, a, b, lowering, known_lowering: bool):
    """The typing rule dot4 and dot4_sat share: a known lowering, and acc, a, b all the same i32
    scalar or i32 SIMD type (4 bytes packed in each lane).  None: numba tries other templates."""
    if not known_lowering or not (acc == a == b):
        return None
    if (acc.elem if isinstance(acc, Simd) else acc) != types.int32:
        return None
    return acc(acc, a, b, lowering)


def _byte_dot_intrinsic(name: str, lowerings, generic, vector, doc: str):
    """A numba intrinsic ``name(acc, a, b, lowering)`` on i32 scalars or SIMD values: ``generic``
    (plain arithmetic) for scalars and the "generic" lowering, else ``vector(builder, acc, a, b,
    how)`` for the named one of ``lowerings``.  dot4, dot4_sat and dot2_i16 differ only there."""
    def typer(typingctx, acc, a, b, lowering):
        how = _literal(lowering)
        sig = _byte_dot_signature(acc, a, b, lowering, how in lowerings)
        if sig is None:
            return None

        def codegen(context, builder, sig, args):
            x, y, z = args[:3]
            if not isinstance(x.type, llir.VectorType) or how == "generic":
                return generic(builder, x, y, z)
            return vector(builder, x, y, z, how)
        return sig, codegen
    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(prefer_literal=True)(typer)


dot4_sat = _byte_dot_intrinsic(
    "dot4_sat", DOT4_SAT_LOWERINGS, _dot4_sat_generic,
    lambda builder, x, y, z, how: _dot4_maddubs(builder, x, y, z, halves=how == "maddubs256"),
    """``dsl.dot4_sat`` on i32 scalars or SIMD values: ``dot4`` with each pair of byte products
    summed in saturating i16 first, as ``vpmaddubsw`` does.  ``lowering`` is one of
    DOT4_SAT_LOWERINGS (backends/numba/simd_codegen.py ``dot4_sat_lowering``).""")

dot4 = _byte_dot_intrinsic(
    "dot4", DOT4_LOWERINGS, _dot4_generic,
    lambda builder, x, y, z, how: (_dot4_vnni if how == "vnni" else _dot4_pmaddwd)(builder, x, y, z),
    """``dsl.dot4`` on i32 scalars or SIMD values: per lane, acc + the dot product of a's 4 bytes
    (unsigned) and b's 4 bytes (signed), wrapping.  ``lowering`` is one of DOT4_LOWERINGS
    (backends/numba/simd_codegen.py ``dot4_lowering``); scalars always use plain arithmetic.""")


DOT2_I16_LOWERINGS = ("pmaddwd", "pmaddwd256", "generic")


def _dot2_i16_generic(builder, acc, a, b):
    """acc + Σ_h sext(i16 half h of a)·sext(i16 half h of b) in i32 arithmetic (scalars or vectors)."""
    def k(c):
        c = llir.Constant(llir.IntType(32), c)
        return _vec(builder, acc.type, c) if isinstance(acc.type, llir.VectorType) else c
    for h in range(2):
        sa = builder.ashr(builder.shl(a, k(16 - 16 * h)), k(16))
        sb = builder.ashr(builder.shl(b, k(16 - 16 * h)), k(16))
        acc = builder.add(acc, builder.mul(sa, sb))
    return acc


def _dot2_i16_pmaddwd(builder, acc, a, b, halves=False):
    """``vpmaddwd`` (i16 pairs multiplied and summed into i32 lanes), then the add; 16 lanes as two
    256-bit halves with ``halves`` (AVX2 without AVX512BW)."""
    n = acc.type.count
    names = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd", 16: "llvm.x86.avx512.pmaddw.d.512"}
    if n == 16 and halves:
        return _on_256_bit_halves(builder, _dot2_i16_pmaddwd, acc, a, b)
    words = llir.VectorType(llir.IntType(16), 2 * n)
    fn = _declared(builder, names[n], acc.type, [words, words])
    return builder.add(acc, builder.call(fn, [builder.bitcast(a, words), builder.bitcast(b, words)]))


dot2_i16 = _byte_dot_intrinsic(
    "dot2_i16", DOT2_I16_LOWERINGS, _dot2_i16_generic,
    lambda builder, x, y, z, how: _dot2_i16_pmaddwd(builder, x, y, z, halves=how == "pmaddwd256"),
    """``dsl.dot2_i16`` on i32 scalars or SIMD values: per lane, acc + the products of the two
    signed i16 halves of a and b, wrapping (``vpmaddwd``).  ``lowering`` is one of
    DOT2_I16_LOWERINGS (backends/numba/simd_codegen.py ``dot2_i16_lowering``).""")


@intrinsic
def wide_registers(typingctx):
    """Let the calling function keep 512-bit vectors whole: LLVM would split them into 256-bit
    halves on AVX-512 CPUs, whose default preferred width is 256 (no effect elsewhere)."""
    def codegen(context, builder, sig, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        set.add(builder.function.attributes, '"min-legal-vector-width"="512"')
        return context.get_dummy_value()
    return types.void(), codegen


__all__ = ["Simd", "vload", "vstore", "prefetch", "bf16_to_f32", "f32_to_bf16", "vsplat", "vget", "vset", "vbinary",
           "vcompare", "vunary", "vfma", "fma", "vselect", "vconvert", "vf2i", "vreduce", "wide_registers", "dot4",
           "DOT4_LOWERINGS", "dot4_sat", "DOT4_SAT_LOWERINGS",
           "dot2_i16", "DOT2_I16_LOWERINGS"]
