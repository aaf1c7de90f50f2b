"""The launch fast path: a small argument binder generated per kernel.

A launch whose argument dtypes and ranks were seen (and fully checked) before only needs the
rules that types cannot tell -- exact ndarrays, C-contiguity, writable outputs, overlapping
outputs, scalar kinds and ranges -- so each kernel gets a generated function with the kernel's
own signature: Python binds the arguments natively and the body runs those rules inline, pasted
from dsl/runtime/arg_check.py (where they are written once, with their error messages).
``Vec`` parameters pass through when they already are what ``Kernel.bind`` would make of them (a
writable 1-d array of the exact dtype and length: e.g. gemm_packed's geometry).  Anything
unusual makes it return None and ``Kernel.bind`` runs, so every error message comes from one
place.  This is what keeps launch overhead near a plain ``njit`` call.
"""
from __future__ import annotations

import inspect
from typing import Callable, Optional

import numpy as np

from dsl.lang import types as T
from dsl.runtime import arg_check

_FAIL = "return None"


def build(params) -> Optional[Callable]:
    """``fast(*args, **kwargs) -> (values, key) | None`` for these ParamDecls, or None if unsupported."""
    env = dict(arg_check.GUARD_ENV, MISSING=inspect.Parameter.empty)
    sig, body, values, key = [], [], [], []
    tensors = [p for p in params if p.kind == "tensor"]
    for p in params:
        if p.kind == "vec":  # bind converts anything else (lists, other dtypes) and checks each element
            env[f"V_{p.name}"] = np.dtype(p.annotation.dtype.np)
            env[f"D_{p.name}"] = p.default
            sig.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}=D_{p.name}")
            body += arg_check.tensor_lines(p.name, True, _FAIL)
            body.append(f"    if {p.name}.dtype != V_{p.name} or {p.name}.shape != ({p.annotation.length},): {_FAIL}")
        elif p.kind == "scalar":
            ann = p.annotation.dtype if isinstance(p.annotation, T.ConstSpec) else p.annotation
            if not isinstance(ann, T.DType):
                return None  # TypeVar scalars: the slow path infers their dtype
            env[f"D_{p.name}"] = p.default
            sig.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}=D_{p.name}")
            body += arg_check.scalar_lines(p.name, ann, env, _FAIL, convert=True)
            if isinstance(p.annotation, T.ConstSpec):
                key.append(f"{p.name}.item()")
        else:
            sig.append(p.name)
        values.append(p.name)
    if not tensors:
        return None
    # a required parameter after a defaulted one (dsl.grad appends grad_<name> tensors after the
    # forward's scalars): Python forbids that order, so it defaults to MISSING and falls back
    defaulted, missing = False, []
    for k, text in enumerate(sig):
        if "=" in text:
            defaulted = True
        elif defaulted:
            sig[k] = f"{text}=MISSING"
            missing.append(f"    if {text} is MISSING: {_FAIL}")
    checks = []
    for p in tensors:
        checks += arg_check.tensor_lines(p.name, p.annotation.writable, _FAIL)
    key = [f"{p.name}.dtype, {p.name}.ndim" for p in tensors] + key
    src = "\n".join([f"def fast({', '.join(sig)}):", *missing, *checks,
                     *arg_check.overlap_lines([(p.name, p.annotation.writable) for p in tensors], _FAIL),
                     *body,
                     f"    return [{', '.join(values)}], ({', '.join(key)},)"])
    exec(compile(src, "<opdsl fast launch>", "exec"), env)
    return env["fast"]


class LazyBinder:
    """``kernel._fast``, built by ``build`` on first read and kept in the instance's ``__dict__``
    (found before this non-data descriptor from then on, so a launch pays nothing for it).
    Generating and compiling ~100 binders cost ~0.15 s of importing the op library, most of
    them for kernels a given model never launches."""

    def __set_name__(self, owner, name):
        self._name = name

    def __get__(self, kernel, owner=None):
        if kernel is None:
            return self
        fast = build(kernel.params)
        kernel.__dict__[self._name] = fast
        return fast
