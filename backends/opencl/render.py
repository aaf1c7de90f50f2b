"""OpenCL C 1.2 spellings of the C-family emitter (backends/cstyle/emitter.py).

The team is a work-group: ``get_local_id(0)`` is the thread, ``get_group_id(axis)`` the tile (an n-d
grid is an n-d NDRange of work-groups ``threads x 1 x 1``);
sync is a work-group barrier, scratch is ``__local``, tensors are ``__global``.  Everything
OpenCL-specific about the generated text lives here: address spaces, work-item queries, the
barrier, half loads and stores, atomics, printf, extension pragmas and OpenCL's reserved names.
"""
from __future__ import annotations

import re
from typing import List

from backends.base import CompileRequest
from backends.cstyle.emitter import CStyleRenderer, Rendered
from backends.cstyle.helpers import Unsupported, printf_args
from backends.naming import C_RESERVED, OPENCL_RESERVED, OPENCL_VECTOR_TYPES
from dsl.lang import ir
from dsl.lang import types as T

# Built-ins the vector spellings (backends/cstyle/simd.py) call: user names must not take them.
_SIMD_RESERVED = frozenset("select fma isnan fmax fmin as_int as_ushort".split())
# Prefixes of the macros OpenCL C predefines (CLK_LOCAL_MEM_FENCE, FLT_MAX, M_PI_F, INT_MIN...): a
# user name such as ``CLK_GLOBAL_MEM_FENCE`` would be replaced by the preprocessor.
OPENCL_MACRO_PREFIXES = ("CL_", "CLK_", "FLT_", "DBL_", "HALF_", "M_", "FP_", "CHAR_", "SCHAR_", "UCHAR_", "SHRT_",
                         "USHRT_", "INT_", "UINT_", "LONG_", "ULONG_", "MAXFLOAT", "HUGE_VAL")
_SIMD_PATTERN = re.compile(OPENCL_VECTOR_TYPES.pattern + r"|^(vload|vstore)(_half)?\d+(_rte)?$|^(convert|as)_\w+$")


class OpenCLRenderer(CStyleRenderer):
    kernel_prefix = "void"
    buffer_prefix = "__global "
    local_prefix = "__local "
    func_prefix = "static "
    reserved = C_RESERVED | OPENCL_RESERVED | _SIMD_RESERVED
    owned_prefixes = ("opdsl_", "__", "get_") + OPENCL_MACRO_PREFIXES  # work-item queries are get_*
    reserved_pattern = _SIMD_PATTERN
    vector_dialect = True  # OpenCL C's own vectors: backends/cstyle/simd.py
    vector_call_bits = 256  # PoCL 3.0 passes 512-bit vectors to its built-ins wrongly (simd.py)
    # Vec params of 16+ elements are a __global buffer: as scalars, N=10,000 took 168 s to compile
    # and 100,000 exceeded the device's argument limit (CL_DEVICE_MAX_PARAMETER_SIZE, >= 1 KiB)
    vec_buffer_min = 16
    targets = ("opencl", "c")  # builtin spellings (dsl/lang/builtins.py): OpenCL's own, else C's
    barrier = "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
    scratch_storage = {"f16": "ushort"}  # no half variables without cl_khr_fp16, half pointers are fine
    code_for_team = {"thread_id": "(long)get_local_id(0)", "num_threads": "(long)get_local_size(0)",
                     "tile_id": "(long)get_group_id({axis})", "num_tiles": "(long)get_num_groups({axis})",
                     "flat_tile_id": "(long)(get_group_id(0) + get_num_groups(0) * (get_group_id(1) + "
                                     "get_num_groups(1) * get_group_id(2)))"}

    def sync(self) -> str:
        return self.barrier

    def bits_to_float(self, bits: str) -> str:
        return f"as_float({bits})"

    def float_to_bits(self, value: str) -> str:
        return f"as_uint({value})"

    def preamble(self) -> List[str]:
        # Python rounds every operation: no fused multiply-add behind the user's back.
        lines = super().preamble() + ["#pragma OPENCL FP_CONTRACT OFF"]
        if "fp64" in self.features:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if "int64_atomics" in self.features:
            lines.append("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable")
        return lines + [""]

    def kernel_header(self) -> List[str]:
        return [f"__kernel __attribute__((reqd_work_group_size({self.k.threads}, 1, 1)))"]

    def claim(self, record: str) -> str:
        return f"atomic_cmpxchg((volatile __global int*){record}, 0, 1)"  # the low half of slot 0

    def read_claim(self, record: str) -> str:
        return f"atomic_or((volatile __global int*){record}, 0)"  # an atomic read of what claim wrote

    def load_f16(self, ptr: str, off: str) -> str:
        return f"vload_half({off}, {ptr})"

    def store_f16(self, ptr: str, off: str, value: str) -> str:
        return f"vstore_half_rte({value}, {off}, {ptr});"

    def vload_f16(self, lanes: int, ptr: str) -> str:
        return f"vload_half{lanes}(0, {ptr})"

    def vstore_f16(self, lanes: int, value: str, ptr: str) -> str:
        return f"vstore_half{lanes}_rte({value}, 0, {ptr});"

    def helper_round_f16(self, name, t, dtype, extra):
        return (f"{self.func_prefix}float {name}(float f) {{\n"
                f"  // round to half precision (nearest even) without cl_khr_fp16 arithmetic\n"
                f"  ushort h;\n"
                f"  vstore_half_rte(f, 0, (__private half*)&h);\n"
                f"  return vload_half(0, (__private const half*)&h);\n}}")

    def address_space(self, space: str) -> str:
        return {"tensor": "volatile __global ", "scratch": "volatile __local "}[space]

    def atomic_fetch_add(self, ptr: str, dtype: T.DType, value: str, space: str) -> str:
        """OpenCL 1.2's atomic_add / atom_add return the old value; floats: a compare-and-swap helper."""
        name = dtype.name
        if name in ("i32", "u32"):
            return f"atomic_add({ptr}, {value})"
        if name in ("i64", "u64"):
            self.features.add("int64_atomics")
            return f"atom_add({ptr}, {value})"
        if name in ("f32", "f64"):
            if name == "f64":
                self.features.add("int64_atomics")
            return f"{self.helper('atomic_add', dtype, space)}({ptr}, {value})"
        raise Unsupported(f"dsl.atomic_add on {dtype} is not supported by the opencl backend; "
                          f"accepted: i32, u32, i64, u64, f32, f64")

    def helper_atomic_add(self, name, t, dtype, space):
        space = {"tensor": "global", "scratch": "local"}[space]  # OpenCL's address spaces
        bits, cas = ("uint", "atomic_cmpxchg") if dtype.bits == 32 else ("ulong", "atom_cmpxchg")
        as_bits, as_t = f"as_{bits}", f"as_{t}"
        return (f"{self.func_prefix}{t} {name}(volatile __{space} {t}* p, {t} v) {{\n"
                f"  // floating-point atomic add returning the old value: compare-and-swap on the bits\n"
                f"  // (every access atomic: no data race)\n"
                f"  {bits} seen = {cas}((volatile __{space} {bits}*)p, ({bits})0, ({bits})0), old;\n"
                f"  do {{\n"
                f"    old = seen;\n"
                f"    seen = {cas}((volatile __{space} {bits}*)p, old, {as_bits}({as_t}(old) + v));\n"
                f"  }} while (seen != old);\n"
                f"  return {as_t}(old);\n}}")

    def log(self, s: ir.Log) -> str:
        """printf; dsl.log lines carry the interpreter's "[kernel t=.. tile=..]" prefix, print() lines do not."""
        self.features.add("printf")
        team = ["(int)get_local_id(0)", f"(int){self.code_for_team['flat_tile_id']}"] if s.level != "print" else []
        fmt, cargs = printf_args(s.pieces, [(self.bare(a), a.type) for a in s.args],
                                 fp64="fp64" in self.features)  # pieces: dsl/lang/log_format.py
        prefix = f"[{self.k.name} t=%d tile=%d] " if team else ""
        args = "".join(", " + a for a in team + cargs)
        return f'printf("{prefix}{fmt}\\n"{args});'


def render(request: CompileRequest) -> Rendered:
    return OpenCLRenderer(request.log_level, request.debug, request.interrupt).render(request.kernel)
