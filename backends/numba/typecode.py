"""How generated numba code spells the IR's types and constants (``np.float32(...)``, uint16
storage of f16/bf16); shared by the scalar code generator and the SIMD one."""
from __future__ import annotations

from dsl.lang import types as T
from backends.spelling import special_float


def ctype(t: T.DType) -> T.DType:
    """The type values have in generated code (f16/bf16 compute in f32)."""
    return T.f32 if t.is_storage_only else t


def np_type(t: T.DType) -> str:
    """numpy constructor of a compute type, e.g. ``np.float32``."""
    t = ctype(t)
    return "np.bool_" if t.is_bool else f"np.{t.np.name}"


def storage_np(t: T.DType) -> str:
    """numpy dtype of an array holding ``t`` (f16/bf16 as their uint16 bits)."""
    return "np.uint16" if t.is_storage_only else np_type(t)


def const(value, t: T.DType) -> str:
    t = ctype(t)
    if t.is_bool:
        return "True" if value else "False"
    if t.is_float:
        v = float(value)
        special = special_float(v)
        if special is not None:
            lit = {"nan": "np.nan", "inf": "np.inf", "-inf": "(-np.inf)"}[special]
        else:
            lit = repr(v) if v >= 0 else f"({v!r})"
        return lit if t == T.f64 else f"np.float32({lit})"
    v = int(value)
    if t == T.i64:
        return repr(v) if v >= 0 else f"({v})"
    return f"{np_type(t)}({v})"
