"""A kernel's or ``@dsl.func``'s parameters, read from its annotations (``In[f32, 2]``, ``f32``,
``dsl.Vec[i32, 4]``, ``dsl.const[i64]``): what the launch path binds arguments against and the
frontend types the body with.  A bad annotation is a CompileError at the parameter's position.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, List

from dsl.lang import types as T
from dsl.lang.errors import CompileError, SourceLoc, UnsupportedSyntax


@dataclass(frozen=True)
class ParamDecl:
    """A kernel/func parameter as annotated: kind 'tensor' | 'scalar' | 'vec'."""

    name: str
    kind: str
    annotation: Any  # TensorAnnotation | DType | TypeVar | VecSpec | ConstSpec
    default: Any = inspect.Parameter.empty
    loc: SourceLoc = None

    @property
    def is_const(self) -> bool:
        return isinstance(self.annotation, T.ConstSpec)


def param_decls(fn, filename: str, firstline: int, lines: List[str], require: bool = True) -> List[ParamDecl]:
    """Parameters from annotations; ``require=False`` (@dsl.func) lets scalars be generic."""
    sig = inspect.signature(fn)
    try:
        ann = inspect.get_annotations(fn, eval_str=True)
    except Exception as e:  # a name in an annotation that does not exist
        raise CompileError(f"cannot evaluate the annotations of {fn.__name__}: {e}",
                           SourceLoc(filename, firstline, 1, lines[0].rstrip() if lines else None)) from None
    decls = []
    for p in sig.parameters.values():
        loc = _param_loc(p.name, filename, firstline, lines)
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise UnsupportedSyntax(f"*{p.name} / **{p.name} parameters are not supported in kernels", loc)
        a = ann.get(p.name, inspect.Parameter.empty)
        if a is inspect.Parameter.empty and not require:
            decls.append(ParamDecl(p.name, "scalar", None, p.default, loc))
            continue
        if a is inspect.Parameter.empty:
            raise CompileError(f"parameter '{p.name}' needs an annotation: In[f32], Out[f32, 2], InOut[T], "
                               "a dtype like f32 or i32, dsl.Vec[i32, 4] or dsl.const[i32]", loc)
        if isinstance(a, T._Binding):
            a = a[T.ANY]
        if a in (int, float, bool):
            a = T.as_dtype(a)
        if isinstance(a, T.TensorAnnotation):
            kind = "tensor"
        elif isinstance(a, (T.DType, T.TypeVar, T.ConstSpec)):
            kind = "scalar"
        elif isinstance(a, T.VecSpec):
            kind = "vec"
        elif isinstance(a, T.SimdType) and not require:
            kind = "scalar"  # a value parameter of a @dsl.func, as a scalar is
        else:
            accepted = ("a dtype (f32, i32, ...), a dsl.TypeVar or dsl.simd(dtype, lanes)" if not require else
                        "In[dtype(, ndim)], Out[...], InOut[...], a dtype (f32, i32, ...), a dsl.TypeVar, "
                        "dsl.Vec[dtype, n], dsl.const[dtype]")
            hint = ("; SIMD values are passed to @dsl.func helpers, a kernel takes tensors and scalars"
                    if isinstance(a, T.SimdType) else "")
            raise CompileError(f"parameter '{p.name}' has annotation {a!r}; accepted: {accepted}{hint}", loc)
        if kind == "tensor" and p.default is not inspect.Parameter.empty:
            raise CompileError(f"tensor parameter '{p.name}' cannot have a default", loc)
        decls.append(ParamDecl(p.name, kind, a, p.default, loc))
    return decls


def _param_loc(name: str, filename: str, firstline: int, lines: List[str]) -> SourceLoc:
    for k, line in enumerate(lines):
        col = line.find(name)
        if col >= 0 and ("def " in line or k > 0):
            return SourceLoc(filename, firstline + k, col + 1, line.rstrip("\n"))
    return SourceLoc(filename, firstline, 1, lines[0].rstrip("\n") if lines else None)
