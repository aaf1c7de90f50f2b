"""Checker rules of ``dsl.local`` arrays, mixed into the checker (dsl/lang/check.py), and the
storage limits of a kernel's local arrays and scratch (checked with exact Python integers).

An array whose every access has indexes known at compile time (after ``static_range``
unrolling) becomes plain locals ``name__k``, one per element, so it lives in registers; an
index known only at run time anywhere keeps the whole array (``Kernel.arrays``).  Which one is
decided by the checker's first passes (``self.dynamic``), before the final one rewrites."""
from __future__ import annotations

from typing import Optional

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from dsl.lang.fold import convert_const as _convert_const, fold as _fold


MAX_LOCAL_BYTES = 16384
"""Most bytes of ``dsl.local`` arrays one thread may declare (all of a kernel's arrays together).
They are registers or stack/private memory on every backend: past a few KiB they spill, and
PoCL crashes on private arrays of a few MiB; bigger per-thread data belongs in scratch or a tensor."""
MAX_SCRATCH_BYTES = 2 ** 31
"""Most bytes of ``dsl.scratch`` one team may declare on any backend (OpenCL devices allow far less:
their local memory size, checked when the kernel is built for one)."""


def size_of(shape) -> int:
    """Elements of ``shape``, an exact Python int (never wraps as an int64 product does)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def nbytes(shape, dtype) -> int:
    """Bytes of an array of ``shape`` and ``dtype`` (a DType or SimdType), exactly."""
    lanes = dtype.lanes if isinstance(dtype, T.SimdType) else 1
    return size_of(shape) * lanes * max(1, elem_of(dtype).bits // 8)


def check_storage(scratch, arrays) -> None:
    """A CompileError at the declaration that takes a kernel's scratch or dsl.local arrays past
    their limit (MAX_SCRATCH_BYTES per team, MAX_LOCAL_BYTES per thread), naming both sizes."""
    for decls, limit, what, per, instead in (
            (scratch, MAX_SCRATCH_BYTES, "scratch", "team", "split the work over more tiles, or use a tensor"),
            (arrays, MAX_LOCAL_BYTES, "dsl.local arrays", "thread",
             "use dsl.scratch (shared by the team) or an Out tensor for bigger per-thread data")):
        total = 0
        for d in decls:
            size = nbytes(d.shape, d.dtype)
            total += size
            if total > limit:
                shape = "x".join(map(str, d.shape))
                before = f"; with the earlier ones {total} bytes" if total != size else ""
                raise CompileError(f"{what.split()[0]} '{d.name}' ({d.dtype}[{shape}]) takes {size} bytes{before}: "
                                   f"more than the {limit} bytes a kernel's {what} may take per {per}", d.loc,
                                   note=instead)


def elem_of(t):
    return t.elem if isinstance(t, T.SimdType) else t


class LocalArrays:
    """``self`` is the checker (``expr``, ``error``, ``buffers``, ``ltypes``, ``seen``, ``dynamic``)."""

    def array_decl(self, a, binding) -> ir.LocalArray:
        dims = []
        for d in a.shape:
            e, t = self.expr(d)
            v = _fold(e)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise CompileError(f"dsl.local array '{a.name}': every dimension must be a positive integer known "
                                   "at compile time (a literal, a module-level constant or a dsl.const parameter)",
                                   d.loc)
            dims.append(v)
        if isinstance(a.dtype, T.DType) or isinstance(a.dtype, T.TypeVar):
            dtype = binding.dtype(a.dtype)
        else:  # frontend_decls.SimdDecl
            lanes = _fold(self.expr(a.dtype.lanes)[0])
            try:
                dtype = T.simd(a.dtype.elem, lanes)
            except TypeError as err:
                raise CompileError(str(err), a.dtype.loc) from None
        if not isinstance(dtype, T.SimdType) and dtype.is_storage_only:
            dtype = T.f32  # values compute in f32 anyway; a private array need not round them
        return ir.LocalArray(a.name, dtype, tuple(dims), loc=a.loc)

    def array_element(self, b, index, node) -> Optional[str]:
        """The local standing for element ``index`` of dsl.local array ``b`` when the index is known at
        compile time (None for other buffers); a run-time index keeps the whole array in memory."""
        if not isinstance(b, ir.LocalArray):
            return None
        consts = [_fold(i) for i in index]
        if any(not isinstance(k, int) or isinstance(k, bool) for k in consts):
            if isinstance(b.dtype, T.SimdType):
                raise self.error(node, f"'{b.name}' is an array of SIMD values: index it with values known at "
                                       "compile time (literals, dsl.static_range variables, dsl.const parameters)")
            self.dynamic.add(b.name)
            return None
        flat = 0
        size = 1
        shape = b.shape if len(consts) == len(b.shape) else (size_of(b.shape),)
        for k, n in zip(consts, shape):
            if not 0 <= k < n:
                raise self.error(node, f"index {k} is out of range for dimension of size {n} of dsl.local array "
                                       f"'{b.name}' {list(b.shape)}")
            flat = flat * n + k
            size *= n
        return None if b.name in self.dynamic else f"{b.name}__{flat}"

    def visit_LocalInit(self, s: ir.LocalInit):
        if not self.final:
            return None
        b = self.buffers[s.name]
        if b.name in self.dynamic:
            return s
        zero = ir.Const(_convert_const(0, elem_of(b.dtype)), type=elem_of(b.dtype), loc=s.loc)
        if isinstance(b.dtype, T.SimdType):
            zero = ir.Splat(zero, type=b.dtype, loc=s.loc)
        out = []
        for k in range(size_of(b.shape)):
            name = f"{b.name}__{k}"
            self.ltypes[name] = b.dtype
            self.seen.add(name)
            out.append(ir.Assign(name, zero, loc=s.loc))
        return out
