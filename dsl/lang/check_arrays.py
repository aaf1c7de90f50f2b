"""Checker rules of ``dsl.local`` arrays, mixed into the checker (dsl/lang/check.py).

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


def size_of(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


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
