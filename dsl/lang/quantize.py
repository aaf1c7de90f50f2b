"""``dsl.dequant`` and ``dsl.quant``: the quantization builtins, in f32 on every backend.

dequant(q, scale, zero_point) = (f32(q) - f32(zero_point)) * f32(scale)
quant(v, scale, zero_point, dtype) = dtype(clamp(rint(f32(v) / f32(scale)) + f32(zero_point), min, max))

Written out in kernels, ``(q - zp) * scale`` on an i8 ``q`` promotes to f64 under NEP 50 (and
OpenCL then computes in ``double``); these pin every step to f32, rounding ties to even and
saturating to the range of ``dtype`` (i8, u8, i16 or u16, a dtype named in the code).  The
frontend expands a call into that arithmetic (``lower``), so every backend computes the same
IR; ``dequant``/``quant`` here are the interpreter's faces, computing the same f32 steps.
"""
from __future__ import annotations

import ast

import numpy as np

from dsl.lang import ir
from dsl.lang import types as T

QUANT_DTYPES = (T.i8, T.u8, T.i16, T.u16)


def _target(dtype) -> T.DType:
    try:
        dt = dtype if isinstance(dtype, T.DType) else T.as_dtype(dtype)
    except TypeError:
        dt = None
    if dt not in QUANT_DTYPES:
        raise TypeError(f"dsl.quant(v, scale, zero_point, dtype): dtype must be one of "
                        f"{', '.join(map(str, QUANT_DTYPES))}, got {dtype!r}")
    return dt


def dequant(q, scale, zero_point):
    """(q - zero_point) * scale computed in f32: the real value a quantized integer stands for."""
    return (np.float32(q) - np.float32(zero_point)) * np.float32(scale)


def quant(v, scale, zero_point, dtype):
    """rint(v / scale) + zero_point in f32 (ties to even), saturated to ``dtype`` (i8, u8, i16, u16)."""
    dt = _target(dtype)
    info = np.iinfo(dt.np)
    r = np.rint(np.float32(v) / np.float32(scale)) + np.float32(zero_point)
    return dt.np.type(min(max(r, np.float32(info.min)), np.float32(info.max)))


def lower(visitor, call: ast.Call, name: str) -> ir.Expr:
    """The f32 IR of a ``dsl.dequant(...)`` / ``dsl.quant(...)`` call (frontend visitor)."""
    loc = visitor.loc(call)

    def f32(e):
        return ir.Cast(e, type=T.f32, loc=loc)

    if name == "dequant":
        a = visitor.call_args(call, ("q", "scale", "zero_point"), required=3)
        diff = ir.Binary("sub", f32(a["q"]), f32(a["zero_point"]), loc=loc)
        return ir.Binary("mul", diff, f32(a["scale"]), loc=loc)
    raw = visitor.call_args(call, ("v", "scale", "zero_point", "dtype"), required=4, raw=True)
    value = visitor.resolve.value(raw["dtype"]) if isinstance(raw["dtype"], (ast.Name, ast.Attribute)) else None
    if value not in QUANT_DTYPES:
        raise visitor.error(raw["dtype"], f"dsl.quant(v, scale, zero_point, dtype): dtype must be one of "
                                          f"{', '.join(map(str, QUANT_DTYPES))} named in the code, got "
                                          f"'{ast.unparse(raw['dtype'])}'")
    a = {k: visitor.expr(v) for k, v in raw.items() if k != "dtype"}
    info = np.iinfo(value.np)
    scaled = ir.Binary("truediv", f32(a["v"]), f32(a["scale"]), loc=loc)
    shifted = ir.Binary("add", ir.Call("rint", (scaled,), loc=loc), f32(a["zero_point"]), loc=loc)
    lo, hi = f32(ir.Const(float(info.min), loc=loc)), f32(ir.Const(float(info.max), loc=loc))
    return ir.Cast(ir.Call("clamp", (shifted, lo, hi), loc=loc), type=value, loc=loc)
