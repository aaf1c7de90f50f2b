"""Checker rules of ``@dsl.func`` calls, mixed into the checker (dsl/lang/check.py): each call
specializes its function for the argument types (scalars or SIMD values) once per kernel, and
the arguments are converted to the specialization's parameter types."""
from __future__ import annotations

from typing import List, Tuple

from dsl.lang import ir
from dsl.lang import types as T


class FuncCalls:
    """``self`` is the checker (``expr``, ``cast``, ``error``, ``parsed``, ``func_parser``,
    ``funcs_done``, ``func_results``, ``func_stack``)."""

    def visit_FuncCall(self, e: ir.FuncCall):
        typed = [self.expr(a) for a in e.args]
        if any(t is None for _, t in typed):
            return ir.Const(0, type=None, loc=e.loc), None
        func = self.parsed.funcs[e.func]
        fn_ir, ret = self.specialize(func, [t for _, t in typed], e)
        for (a, t), p in zip(typed, fn_ir.params):
            if isinstance(t, T.SimdType) and (not isinstance(p.dtype, T.SimdType) or p.dtype.lanes != t.lanes):
                raise self.error(a, f"{func.__name__}() parameter '{p.name}' is {p.dtype}, got a SIMD value ({t})",
                                 "a scalar parameter takes one lane (v[k]); a dsl.simd parameter takes its lane count")
        args = tuple(self.cast(a, p.dtype) for (a, _), p in zip(typed, fn_ir.params))
        return ir.FuncCall(fn_ir.name, args, type=fn_ir.ret, loc=e.loc), ret

    def specialize(self, func, arg_types: List[T.DType], node) -> Tuple[ir.Function, T.DType]:
        if func in self.func_stack:
            raise self.error(node, f"@dsl.func '{func.__name__}' calls itself (directly or indirectly); recursion is "
                                   "not supported in kernels")
        parsed = self.func_parser(func)
        if len(arg_types) != len(parsed.params):
            raise self.error(node, f"{func.__name__}() takes {len(parsed.params)} argument(s), got {len(arg_types)}")
        ptypes = []
        for p, t in zip(parsed.params, arg_types):
            if p.kind != "scalar":
                raise self.error(node, f"@dsl.func parameter '{p.name}' must be a value; functions take and return "
                                       "scalars or SIMD values, never tensors")
            ann = p.annotation
            ptypes.append(t if ann is None or isinstance(ann, T.TypeVar) else ann)
        # one specialization per Func object (two closures of one def fold different captured
        # constants, so they differ though their FuncOrigin is the same) and argument types
        key = (func, tuple(ptypes))
        if key in self.funcs_done:
            f = self.funcs_done[key]
            return f, self.func_results[key]
        params = [ir.ScalarParam(p.name, t.strong) for p, t in zip(parsed.params, ptypes)]
        sub = type(self)(parsed, params, self.func_parser, is_kernel=False, funcs_done=self.funcs_done,
                       func_stack=self.func_stack + (func,), func_results=self.func_results)
        sub.scalar_types = {p.name: t for p, t in zip(parsed.params, ptypes)}  # keep weak args weak
        body, local_types = sub.run(parsed.body)
        ret = sub.func_return_type()
        if ret is None:
            raise self.error(node, f"@dsl.func '{func.__name__}' never returns a value")
        f = ir.Function(self.func_name(func, ptypes), tuple(params), ret.strong, body,
                        tuple((n, t) for n, t in local_types if n not in sub.scalar_types),
                        origin=ir.FuncOrigin.of(func.fn), arg_types=tuple(ptypes))
        self.funcs_done[key] = f
        self.func_results[key] = ret
        return f, ret

    def func_name(self, func, ptypes) -> str:
        """A valid identifier, unique among this kernel's specializations: the function's name
        and argument types (``smooth_f32_float``), numbered when two functions share them."""
        base = func.__name__ + "".join("_" + (t.name if isinstance(t, T.SimdType) else str(t)).replace("_", "")
                                       for t in ptypes)
        taken = {f.name for f in self.funcs_done.values()}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        return name
