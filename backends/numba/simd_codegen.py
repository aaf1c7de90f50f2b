"""Generated code for SIMD values and ``dsl.local`` arrays on numba (mixed into codegen.Gen).

Vector operations become calls of the intrinsics in backends/numba/simd.py (``sm.*``), which
LLVM sees as plain vector instructions.  What has no vector instruction with the language's
semantics (f16 stores on a CPU without half conversions, float -> int conversion, most math builtins, every access in debug
mode) is spelled lane by lane from the scalar code, so it means exactly what the scalar does.
"""
from __future__ import annotations

from typing import List

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from backends.host import host
from backends.numba.typecode import const, ctype, np_type, storage_np

# VecOp names with a vector instruction (backends/numba/simd.py); the rest go lane by lane
_NATIVE_BINARY = {"add", "sub", "mul", "truediv", "bitand", "bitor", "bitxor", "min", "max"}
_NATIVE_UNARY = {"neg", "invert", "not"}
_COMPARE = {"lt", "le", "gt", "ge", "eq", "ne"}

WIDE_REGISTERS = "    sm.wide_registers()  # SIMD values: keep 512-bit vectors whole"


def numba_name(t: T.DType) -> str:
    """numba's name of a scalar type (``sm.vconvert``'s literal)."""
    return "bool" if t.is_bool else t.np.name


def dot4_lowering(features, lanes: int) -> str:
    """How ``dsl.dot4`` on ``lanes`` i32 lanes is lowered for a CPU with ``features``: ``vpdpbusd``
    (AVX512-VNNI with VL, or AVX-VNNI for 4 and 8 lanes), the exact AVX2 pair (backends/numba/simd.py), or plain i32 arithmetic."""
    if lanes in (4, 8, 16) and (("avx512vnni" in features and ("avx512vl" in features or lanes == 16))
                                or ("avxvnni" in features and lanes in (4, 8))):
        return "vnni"
    if lanes in (8, 16) and "avx2" in features or lanes == 4 and "sse2" in features:
        return "avx2"
    return "generic"


def _pairwise_lowering(features, lanes: int, sse: str, whole: str, halves: str) -> str:
    """``whole`` where one instruction covers ``lanes`` i32 lanes (``sse`` for 4, AVX2 for 8,
    AVX512BW for 16), ``halves`` for 16 lanes on AVX2 (two 256-bit halves), else "generic"."""
    if lanes == 16 and "avx512bw" in features or lanes == 8 and "avx2" in features \
            or lanes == 4 and sse in features:
        return whole
    if lanes == 16 and "avx2" in features:
        return halves
    return "generic"


def dot4_sat_lowering(features, lanes: int) -> str:
    """How ``dsl.dot4_sat`` on ``lanes`` i32 lanes is lowered: ``vpmaddubsw`` + ``vpmaddwd`` (SSSE3
    for 4 lanes, AVX2 for 8, AVX512BW for 16, or AVX2 on two halves), or plain i32 arithmetic."""
    return _pairwise_lowering(features, lanes, "ssse3", "maddubs", "maddubs256")


def dot2_i16_lowering(features, lanes: int) -> str:
    """How ``dsl.dot2_i16`` on ``lanes`` i32 lanes is lowered: ``vpmaddwd`` (SSE2 for 4 lanes, AVX2
    for 8, AVX512BW for 16, or AVX2 on two halves), or plain i32 arithmetic."""
    return _pairwise_lowering(features, lanes, "sse2", "pmaddwd", "pmaddwd256")


def uses_simd(stmts) -> bool:
    return any(isinstance(getattr(n, "type", None), T.SimdType) or isinstance(n, ir.VStore)
               for n in ir.walk(list(stmts)))


class SimdGen:
    """``visit_*`` for the SIMD IR nodes and LocalInit; ``self`` is a codegen.Gen."""

    def _lanes(self, t: T.SimdType, lane_code) -> str:
        """A vector of type ``t`` built from one scalar code per lane (``lane_code(k)``)."""
        code = f"sm.vsplat({const(0, t.elem)}, {t.lanes})"
        for k in range(t.lanes):
            code = f"sm.vset({code}, {k}, {lane_code(k)})"
        return code

    def _lane_index(self, index: ir.Expr, k: int) -> ir.Expr:
        return index if k == 0 else ir.Binary("add", index, ir.Const(k, type=T.i64), type=T.i64, loc=index.loc)

    def visit_VLoad(self, e, scope):
        st = self.storage(e.tensor)
        n = e.type.lanes
        if self.debug:  # checked per lane, as element loads are
            return self._lanes(e.type, lambda k: self.visit(
                ir.Load(e.tensor, (self._lane_index(e.index, k),), True, type=e.type.elem, loc=e.loc), scope))
        code = f"sm.vload({self.names[e.tensor]}, ix({self.visit(e.index, scope)}), {n})"
        # half lanes widen in one vector instruction: a lane-by-lane load made numba's IR (and its
        # cold compile) of an f16 kernel several times that of the f32 one
        return f"sm.{st.name}_to_f32({code})" if st.name in ("bf16", "f16") else code

    def visit_VStore(self, s, scope):
        st = self.storage(s.tensor)
        value = self.visit(s.value, scope)
        if self.debug or st.name == "f16" and "f16" not in host().features:
            tmp = f"_v{len(self.out)}_{self.depth}"
            self.emit(f"{tmp} = {value}")
            lane_t = s.value.type.elem
            for k in range(s.value.type.lanes):
                lane = ir.Lane(ir.Name(tmp, type=s.value.type), ir.Const(k, type=T.i64), type=lane_t)
                self.visit(ir.Store(s.tensor, (self._lane_index(s.index, k),), lane, True, loc=s.loc), scope)
            return
        if st.name in ("bf16", "f16"):
            value = f"sm.f32_to_{st.name}({value})"
        self.emit(f"sm.vstore({self.names[s.tensor]}, ix({self.visit(s.index, scope)}), {value})")

    def visit_Splat(self, e, scope):
        v = self.typed(e.value, e.type.elem, scope)
        if isinstance(e.value, ir.Const) and ctype(e.type.elem) in (T.i64, T.f64):
            v = f"{np_type(e.type.elem)}({v})"  # a bare literal: numba would type it as a literal or wider
        return f"sm.vsplat({v}, {e.type.lanes})"

    def visit_Lane(self, e, scope):
        return f"sm.vget({self.visit(e.value, scope)}, {e.lane.value})"

    def visit_VReduce(self, e, scope):
        return f'sm.vreduce("{e.op}", {self.visit(e.value, scope)})'

    def visit_VecOp(self, e, scope):
        args = [self.visit(a, scope) for a in e.args]
        op = e.op
        if op in _NATIVE_BINARY:
            return f'sm.vbinary("{op}", {args[0]}, {args[1]})'
        if op in _COMPARE:
            return f'sm.vcompare("{op}", {args[0]}, {args[1]})'
        if op in _NATIVE_UNARY or (op in ("abs", "sqrt", "rint", "floor", "ceil") and e.type.is_float) \
                or (op == "abs" and e.type.is_int):
            return f'sm.vunary("{op}", {args[0]})'
        if op == "where":
            return f"sm.vselect({args[0]}, {args[1]}, {args[2]})"
        if op == "fma":
            return f"sm.vfma({args[0]}, {args[1]}, {args[2]})"
        if op == "dot4":
            how = dot4_lowering(host().features, e.type.lanes)
            return f'sm.dot4({args[0]}, {args[1]}, {args[2]}, "{how}")'  # lowering for this CPU
        if op == "dot4_sat":
            how = dot4_sat_lowering(host().features, e.type.lanes)
            return f'sm.dot4_sat({args[0]}, {args[1]}, {args[2]}, "{how}")'
        if op == "dot2_i16":
            how = dot2_i16_lowering(host().features, e.type.lanes)
            return f'sm.dot2_i16({args[0]}, {args[1]}, {args[2]}, "{how}")'
        if op == "clamp":
            return f'sm.vbinary("min", sm.vbinary("max", {args[0]}, {args[1]}), {args[2]})'
        if op == "cast" and not (e.args[0].type.is_float and e.type.elem.is_int):
            return f'sm.vconvert({args[0]}, "{numba_name(e.type.elem)}")'
        if op == "cast" and e.type.elem.bits <= 32:  # float -> int: range-checked, saturating
            return f'sm.vf2i({args[0]}, "{numba_name(e.type.elem)}")'
        return self._lanewise(e, args, scope)

    def _lanewise(self, e: ir.VecOp, args: List[str], scope) -> str:
        """``e`` lane by lane with the scalar spelling; the operands are bound to temporaries by a
        generated helper function so each is computed once."""
        name = f"_lanes_{e.op}_{'_'.join(a.type.name for a in e.args)}_{e.type.name}"
        if name not in self.simd_helpers:
            params = [f"a{j}" for j in range(len(e.args))]

            def lane(k):
                lanes = tuple(ir.Lane(ir.Name(p, type=a.type), ir.Const(k, type=T.i64), type=a.type.elem)
                              for p, a in zip(params, e.args))
                if e.op == "cast":
                    return self.visit(ir.Cast(lanes[0], type=e.type.elem), scope)
                return self.visit(ir.Call(e.op, lanes, type=e.type.elem, loc=e.loc), scope)
            if e.op != "cast" and e.op not in B.BUILTINS:
                raise CompileError(f"the numba backend has no SIMD form of {e.op!r}", e.loc)
            self.simd_helpers[name] = ["@njit(**BODY)", f"def {name}({', '.join(params)}):",
                                       f"    return {self._lanes(e.type, lane)}"]
        return f"{name}({', '.join(args)})"

    def visit_LocalInit(self, s, scope):
        a = self.k.buffer(s.name)
        size = 1
        for d in a.shape:
            size *= d
        self.emit(f"{self.names[s.name]} = np.zeros({size}, {storage_np(a.dtype)})  # dsl.local, run-time indexed")


def check_regions(kernel: ir.Kernel, region_stmts) -> None:
    """On numba a region between two sync() calls is its own function: a SIMD local or a run-time
    indexed dsl.local array must not be live across one (it has no per-thread home there)."""
    arrays = {a.name for a in kernel.arrays}
    simd_locals = {n for n, t in kernel.locals if isinstance(t, T.SimdType)}
    seen = {}
    for k, stmts in enumerate(region_stmts):
        for n in ir.walk(list(stmts)):
            name = getattr(n, "tensor", None) if isinstance(n, (ir.Load, ir.Store)) else \
                n.name if isinstance(n, (ir.Name, ir.Assign, ir.LocalInit)) else None
            if name in arrays or name in simd_locals:
                if seen.setdefault(name, k) != k:
                    what = "dsl.local array" if name in arrays else "SIMD local"
                    raise CompileError(f"{what} '{name}' is used on both sides of a dsl.sync(); on the numba "
                                       "backend it must be set and used between two barriers",
                                       getattr(n, "loc", None),
                                       "recompute it after the barrier, or pass values through dsl.scratch")
