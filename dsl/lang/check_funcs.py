"""Checker rules of ``@dsl.func`` calls, mixed into the checker (dsl/lang/check.py): each call
specializes its function for the argument types (scalars, SIMD values or tensors) once per
kernel, and the value arguments are converted to the specialization's parameter types.

A tensor argument (``ir.TensorRef``) is typed by an ``ir.TensorArg``: its dtype, rank, the
access the function gets (an annotated parameter's, else the argument's own) and its address
space (kernel tensors are 'global', team scratch 'local' with its compile-time shape).  Inside
the function the parameter is a ``TensorParam`` or ``Scratch`` like the kernel's own, so every
tensor rule of the checker and every backend's tensor code applies unchanged."""
from __future__ import annotations

from typing import List, Tuple

from dsl.lang import ir
from dsl.lang import types as T


class FuncCalls:
    """``self`` is the checker (``expr``, ``cast``, ``error``, ``parsed``, ``func_parser``,
    ``funcs_done``, ``func_results``, ``func_stack``, ``buffers``, ``readonly``)."""

    def visit_FuncCall(self, e: ir.FuncCall):
        return self.func_call(e, statement=False)

    def func_call(self, e: ir.FuncCall, statement: bool):
        """The typed call; ``statement``: its result is unused, so a function without one is fine."""
        typed = [self.tensor_arg(a) if isinstance(a, ir.TensorRef) else self.expr(a) for a in e.args]
        if any(t is None for _, t in typed):
            return ir.Const(0, type=None, loc=e.loc), None
        func = self.parsed.funcs[e.func]
        fn_ir, ret = self.specialize(func, [t for _, t in typed], e, [a for a, _ in typed])
        for (a, t), p in zip(typed, fn_ir.params):
            if isinstance(t, T.SimdType) and (not isinstance(p.dtype, T.SimdType) or p.dtype.lanes != t.lanes):
                raise self.error(a, f"{func.__name__}() parameter '{p.name}' is {p.dtype}, got a SIMD value ({t})",
                                 "a scalar parameter takes one lane (v[k]); a dsl.simd parameter takes its lane count")
        if ret is None and not statement:
            raise self.error(e, f"@dsl.func '{func.__name__}' returns no value (it has no 'return value'), so its "
                                "call cannot be used as a value",
                             f"call it as a statement: {func.__name__}(...)")
        args = tuple(a if isinstance(t, ir.TensorArg) else self.cast(a, p.dtype)
                     for (a, t), p in zip(typed, fn_ir.params))
        return ir.FuncCall(fn_ir.name, args, type=fn_ir.ret, loc=e.loc), ret

    def tensor_arg(self, a: ir.TensorRef) -> Tuple[ir.TensorRef, ir.TensorArg]:
        """The type of a whole tensor passed to a function: what the callee may do with it."""
        b = self.buffer(a.tensor, a)
        if isinstance(b, ir.LocalArray):
            raise self.error(a, f"'{a.tensor}' is a dsl.local array, which belongs to one thread and may live in "
                                "registers; a @dsl.func takes kernel tensors and scratch",
                             "pass its elements as values, or use scratch")
        if isinstance(b, ir.VecParam):
            raise self.error(a, f"'{a.tensor}' is a dsl.Vec parameter; a @dsl.func takes kernel tensors and scratch",
                             f"pass its elements as values ({a.tensor}[k])")
        read_only = a.tensor in self.readonly or (isinstance(b, ir.TensorParam) and b.access == "in")
        access = "in" if read_only else "out" if isinstance(b, ir.TensorParam) and b.access == "out" else "inout"
        if isinstance(b, ir.Scratch):
            return a, ir.TensorArg(b.dtype, len(b.shape), access, "local", b.shape)
        return a, ir.TensorArg(b.dtype, b.ndim, access)

    def param_types(self, func, parsed, arg_types, node, args) -> list:
        """The type of each parameter of this specialization, checking tensors against values."""
        out, bound = [], {}
        for p, t, a in zip(parsed.params, arg_types, args):
            ann = p.annotation
            if p.kind == "tensor" and not isinstance(t, ir.TensorArg):
                raise self.error(a, f"{func.__name__}() parameter '{p.name}' is a tensor ({ann!r}), got a value ({t})",
                                 "pass a tensor or scratch buffer by its name")
            if p.kind != "tensor" and isinstance(t, ir.TensorArg):
                raise self.error(a, f"{func.__name__}() parameter '{p.name}' takes a value ({ann!r}), got tensor "
                                    f"'{a.tensor}'",
                                 f"read an element ({a.tensor}[i]) or annotate the parameter In[...]/Out[...]")
            if isinstance(t, ir.TensorArg):
                out.append(self.tensor_param_type(func, p, t, a, bound))
            else:
                out.append(t if ann is None or isinstance(ann, T.TypeVar) else ann)
        return out

    def tensor_param_type(self, func, p, t: ir.TensorArg, a: ir.TensorRef, bound: dict) -> ir.TensorArg:
        ann = p.annotation
        if ann is None:
            return t
        where = f"{func.__name__}() parameter '{p.name}' ({ann!r})"
        if ann.access == "zeroed":
            raise self.error(a, f"{where}: Zeroed is a kernel's launch-time promise; a @dsl.func parameter is "
                                "In, Out or InOut")
        if ann.access != "in" and t.access == "in":
            raise self.error(a, f"{where} writes its tensor, but '{a.tensor}' is read-only here (an In tensor or a "
                                "read-only parameter)",
                             "pass an Out or InOut tensor or scratch, or annotate the parameter In[...]")
        if ann.ndim is not None and ann.ndim != t.ndim:
            raise self.error(a, f"{where} has {ann.ndim} dimension(s), got '{a.tensor}' with {t.ndim}")
        dt = ann.dtype
        if isinstance(dt, T.TypeVar):
            if dt is not T.ANY and bound.setdefault(dt, t.dtype) != t.dtype:
                raise self.error(a, f"{where}: TypeVar {dt!r} is already {bound[dt]} in this call, got '{a.tensor}' "
                                    f"of {t.dtype}")
        elif dt != t.dtype:
            raise self.error(a, f"{where} takes {dt} tensors, got '{a.tensor}' of {t.dtype}")
        access = "in" if ann.access == "in" else t.access
        return ir.TensorArg(t.dtype, t.ndim, access, t.space, t.shape)

    def specialize(self, func, arg_types: List[T.DType], node, args=None) -> Tuple[ir.Function, T.DType]:
        if func in self.func_stack:
            raise self.error(node, f"@dsl.func '{func.__name__}' calls itself (directly or indirectly); recursion is "
                                   "not supported in kernels")
        tensors = frozenset(k for k, t in enumerate(arg_types) if isinstance(t, ir.TensorArg))
        parsed = self.func_parser(func, tensors)
        if len(arg_types) != len(parsed.params):
            raise self.error(node, f"{func.__name__}() takes {len(parsed.params)} argument(s), got {len(arg_types)}")
        ptypes = self.param_types(func, parsed, arg_types, node, args or [node] * len(arg_types))
        # one specialization per Func object (two closures of one def fold different captured
        # constants, so they differ though their FuncOrigin is the same) and argument types
        key = (func, tuple(ptypes))
        if key in self.funcs_done:
            f = self.funcs_done[key]
            return f, self.func_results[key]
        params = [_param(p.name, t) for p, t in zip(parsed.params, ptypes)]
        sub = type(self)(parsed, [p for p in params if not isinstance(p, ir.Scratch)], self.func_parser,
                         is_kernel=False, funcs_done=self.funcs_done, func_stack=self.func_stack + (func,),
                         func_results=self.func_results)
        sub.buffers.update({p.name: p for p in params if isinstance(p, ir.Scratch)})
        sub.readonly = {p.name: f"read-only in @dsl.func '{func.__name__}' (its parameter '{p.name}' is given a "
                                f"tensor it may only read)"
                        for p, t in zip(parsed.params, ptypes) if isinstance(t, ir.TensorArg) and t.access == "in"}
        sub.scalar_types = {p.name: t for p, t in zip(parsed.params, ptypes)
                            if not isinstance(t, ir.TensorArg)}  # keep weak args weak
        body, local_types = sub.run(parsed.body)
        ret = sub.func_return_type() if parsed.returns_value else None
        if parsed.returns_value and ret is None:
            raise self.error(node, f"@dsl.func '{func.__name__}' never returns a value")
        f = ir.Function(self.func_name(func, ptypes), tuple(params), ret.strong if ret is not None else None, body,
                        tuple((n, t) for n, t in local_types if n not in sub.scalar_types),
                        origin=ir.FuncOrigin.of(func.fn), arg_types=tuple(ptypes))
        self.funcs_done[key] = f
        self.func_results[key] = ret
        return f, ret

    def func_name(self, func, ptypes) -> str:
        """A valid identifier, unique among this kernel's specializations: the function's name
        and argument types (``smooth_f32_float``), numbered when two functions share them."""
        base = func.__name__ + "".join("_" + (t.name if isinstance(t, (T.SimdType, ir.TensorArg))
                                              else str(t)).replace("_", "") for t in ptypes)
        taken = {f.name for f in self.funcs_done.values()}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        return name


def _param(name: str, t) -> object:
    """The IR parameter of one specialization: a value, a kernel-like tensor, or scratch."""
    if not isinstance(t, ir.TensorArg):
        return ir.ScalarParam(name, t.strong)
    if t.space == "local":
        return ir.Scratch(name, t.dtype, t.shape)
    return ir.TensorParam(name, t.dtype, t.ndim, t.access)
