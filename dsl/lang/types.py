"""Data types, tensor bindings and promotion: the only place type rules live.

Promotion follows NumPy 2 (NEP 50) so that the interpreter, which runs the
kernel as plain Python on numpy scalars, and the compiled backends agree:
Python literals are *weak* (they take the other operand's type), strong types
promote with ``numpy.result_type``.  f16 and bf16 are storage types: loading
them yields f32 and arithmetic never happens in 16 bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

_BF16: list = []  # [numpy dtype of bfloat16, or None without ml_dtypes], filled on first use


def _bf16_np() -> Optional[np.dtype]:
    """bfloat16 as a numpy dtype (ml_dtypes; onnx depends on it, so it is present), imported on
    first use: importing ml_dtypes is about a sixth of ``import dsl``, which most programs never use."""
    if not _BF16:
        try:
            import ml_dtypes
            _BF16.append(np.dtype(ml_dtypes.bfloat16))
        except ImportError:  # pragma: no cover - ml_dtypes ships with onnx
            _BF16.append(None)
    return _BF16[0]


@dataclass(frozen=True)
class DType:
    """A scalar type. ``weak`` marks the type of a Python literal (NEP 50)."""

    name: str
    kind: str  # 'b' bool, 'i' signed, 'u' unsigned, 'f' float
    bits: int
    weak: bool = False

    @property
    def np(self) -> np.dtype:
        """The numpy dtype used for storage (bf16 through ml_dtypes)."""
        if self.name == "bf16":
            if _bf16_np() is None:
                raise TypeError("bf16 needs the ml_dtypes package")
            return _bf16_np()
        return np.dtype(_NP_NAMES[self.name])

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def is_storage_only(self) -> bool:
        """f16/bf16: loads widen to f32, stores narrow, no 16-bit arithmetic."""
        return self.name in ("f16", "bf16")

    @property
    def compute(self) -> "DType":
        """The type values of this storage type have once loaded."""
        return f32 if self.is_storage_only else self

    @property
    def strong(self) -> "DType":
        """The concrete type a weak literal type is stored as."""
        if not self.weak:
            return self
        return {"b": bool_, "i": i64, "f": f64}[self.kind]

    def __call__(self, value):
        """``f32(v)``: a cast in kernels; outside kernels a numpy scalar."""
        if self.is_storage_only:
            return np.float32(self.np.type(value))
        if self.is_int and isinstance(value, (float, np.floating)):
            return self.np.type(saturated_int(float(value), self))
        if self.is_int and isinstance(value, np.ndarray) and value.dtype.kind == "f":  # SIMD lanes, as one value
            x = value.astype(np.float64)
            lo, hi = int_range(self)
            top = float(hi + 1)
            out = np.where((x >= lo) & (x < top), x, 0).astype(self.np)
            out[x >= top] = hi
            out[x < lo] = lo
            return out.view(type(value))
        return self.np.type(value)

    def __repr__(self) -> str:
        return f"dsl.{self.name}" if not self.weak else f"<weak {self.kind}>"

    def __str__(self) -> str:
        return self.name if not self.weak else {"b": "bool", "i": "int", "f": "float"}[self.kind]


bool_ = DType("bool_", "b", 8)
i8 = DType("i8", "i", 8)
u8 = DType("u8", "u", 8)
i16 = DType("i16", "i", 16)
u16 = DType("u16", "u", 16)
i32 = DType("i32", "i", 32)
u32 = DType("u32", "u", 32)
i64 = DType("i64", "i", 64)
u64 = DType("u64", "u", 64)
f16 = DType("f16", "f", 16)
bf16 = DType("bf16", "f", 16)
f32 = DType("f32", "f", 32)
f64 = DType("f64", "f", 64)

WEAK_BOOL = DType("weak_bool", "b", 8, weak=True)
WEAK_INT = DType("weak_int", "i", 64, weak=True)
WEAK_FLOAT = DType("weak_float", "f", 64, weak=True)

_NP_NAMES = {
    "bool_": "bool", "i8": "int8", "u8": "uint8", "i16": "int16", "u16": "uint16",
    "i32": "int32", "u32": "uint32", "i64": "int64", "u64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64",
}

ALL_DTYPES = (bool_, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64)
BY_NAME = {t.name: t for t in ALL_DTYPES}
BY_NAME["bool"] = bool_


_FROM_NUMPY: dict = {}


def from_numpy(dt) -> DType:
    """The DType storing numpy dtype ``dt``; TypeError naming the accepted ones."""
    hit = _FROM_NUMPY.get(dt)
    if hit is not None:
        return hit
    t = _from_numpy(np.dtype(dt))
    _FROM_NUMPY[dt] = t
    return t


def _from_numpy(dt: np.dtype) -> DType:
    for t in ALL_DTYPES:
        if t.name != "bf16" and np.dtype(_NP_NAMES[t.name]) == dt:
            return t
    if dt.kind == "V" and _bf16_np() is not None and dt == _bf16_np():  # ml_dtypes' types are kind 'V'
        return bf16
    raise TypeError(
        f"numpy dtype {dt} has no opdsl type; accepted: "
        + ", ".join(str(t.np) for t in ALL_DTYPES if t.name != "bf16" or _bf16_np() is not None))


def as_dtype(x) -> DType:
    """Accept a DType, a name ('f32'), a numpy dtype or a Python type."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in BY_NAME:
        return BY_NAME[x]
    if x is bool:
        return bool_
    if x is int:
        return i64
    if x is float:
        return f64
    return from_numpy(x)


def promote(a: DType, b: DType) -> DType:
    """Result type of a binary arithmetic op on ``a`` and ``b`` (NEP 50)."""
    a, b = a.compute, b.compute
    if a == b:
        return a
    if a.weak and b.weak:
        order = "bif"
        return a if order.index(a.kind) >= order.index(b.kind) else b
    if a.weak or b.weak:
        weak, strong = (a, b) if a.weak else (b, a)
        if order_of(weak.kind) <= order_of(strong.kind):
            return strong
        return weak.strong  # int literal with a bool, float literal with an int
    return from_numpy(np.result_type(a.np, b.np))


def order_of(kind: str) -> int:
    return {"b": 0, "u": 1, "i": 1, "f": 2}[kind]


def join(a: Optional[DType], b: DType) -> DType:
    """Type of a local assigned values of types ``a`` then ``b``."""
    if a is None:
        return b
    return promote(a, b)


# ---------------------------------------------------------------------------
# Generic dtypes and tensor bindings
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TypeVar:
    """A dtype bound at launch: ``T = dsl.TypeVar("T")``; ``In[T]``, ``alpha: T``.

    Every use of one TypeVar in a signature must bind the same dtype; kernels
    are specialized per binding, so one source serves every dtype.
    """

    name: str
    allowed: tuple = ()

    def __repr__(self) -> str:
        return f"dsl.TypeVar({self.name!r})"


ANY = TypeVar("Any")  # a tensor annotated bare In/Out takes any dtype


@dataclass(frozen=True)
class TensorAnnotation:
    """The annotation ``In[f32, 2]``: access mode, dtype (or TypeVar), rank."""

    access: str  # 'in' | 'out' | 'inout' | 'zeroed' (InOut that every launch first sets to zero)
    dtype: Any = ANY  # DType or TypeVar
    ndim: Optional[int] = None

    @property
    def writable(self) -> bool:
        return self.access != "in"

    def __repr__(self) -> str:
        args = [repr(self.dtype)] + ([str(self.ndim)] if self.ndim is not None else [])
        return f"{_BINDING_NAMES[self.access]}[{', '.join(args)}]"


_BINDING_NAMES = {"in": "In", "out": "Out", "inout": "InOut", "zeroed": "Zeroed"}


class _Binding:
    """``In``, ``Out``, ``InOut``, ``Zeroed``: subscript with a dtype and optional rank."""

    def __init__(self, access: str):
        self.access = access

    def __getitem__(self, item) -> TensorAnnotation:
        if not isinstance(item, tuple):
            item = (item,)
        if not 1 <= len(item) <= 2:
            raise TypeError(f"{self!r}[dtype] or {self!r}[dtype, ndim], got {len(item)} items")
        dtype = item[0] if isinstance(item[0], TypeVar) else as_dtype(item[0])
        ndim = item[1] if len(item) == 2 else None
        if ndim is not None and (not isinstance(ndim, int) or ndim < 0):
            raise TypeError(f"{self!r}[dtype, ndim]: ndim must be an int >= 0, got {ndim!r}")
        return TensorAnnotation(self.access, dtype, ndim)

    def __repr__(self) -> str:
        return _BINDING_NAMES[self.access]


In = _Binding("in")
Out = _Binding("out")
InOut = _Binding("inout")
# Zeroed: an InOut tensor the launch sets to zero before any thread runs (every backend, every
# launch, a model's frozen ones included), so counters for a fetch-and-add work queue
# (old = dsl.atomic_add(t, 0, chunk)) start fresh whatever an earlier or interrupted launch left.
Zeroed = _Binding("zeroed")


@dataclass(frozen=True)
class VecSpec:
    """``dsl.Vec[i32, 4]``: a fixed-length vector scalar parameter."""

    dtype: Any
    length: int

    def __repr__(self) -> str:
        return f"Vec[{self.dtype!r}, {self.length}]"


class _VecFactory:
    def __getitem__(self, item) -> VecSpec:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int) and item[1] > 0):
            raise TypeError("dsl.Vec[dtype, length] with a positive int length")
        return VecSpec(as_dtype(item[0]), item[1])


Vec = _VecFactory()


@dataclass(frozen=True)
class ConstSpec:
    """``dsl.const[i32]``: a scalar the kernel is specialized on (value in the key)."""

    dtype: Any


class _ConstFactory:
    def __getitem__(self, item) -> ConstSpec:
        return ConstSpec(item if isinstance(item, TypeVar) else as_dtype(item))


const = _ConstFactory()


def int_range(t: "DType") -> "tuple[int, int]":
    """(lowest, highest) value of integer type ``t``: where a float-to-int conversion saturates."""
    if t.kind == "u":
        return 0, (1 << t.bits) - 1
    return -(1 << t.bits - 1), (1 << t.bits - 1) - 1


def saturated_int(x: float, t: "DType") -> int:
    """float -> int as every backend converts: truncate toward zero, saturate at ``t``'s range,
    NaN -> 0 (docs/language.md, Semantics; C and numpy leave these undefined)."""
    if x != x:
        return 0
    lo, hi = int_range(t)
    if x >= hi + 1:
        return hi
    if x < lo:
        return lo
    return int(x)


# ---------------------------------------------------------------------------
# SIMD values
# ---------------------------------------------------------------------------

SIMD_LANES = (2, 4, 8, 16)
"""Lane counts every backend supports: OpenCL C has float2..float16, LLVM any power of two."""


@dataclass(frozen=True)
class SimdType:
    """``dsl.simd(f32, 16)``: a value of ``lanes`` elements of a compute type, held in a vector
    register (an LLVM vector on numba, ``float16`` on OpenCL, a numpy array in the interpreter).

    It answers the scalar questions (``is_float``, ``strong``...) for its element type, so the
    checker's generic paths work; every place where vector-ness matters tests for it."""

    elem: DType
    lanes: int
    weak = False
    is_storage_only = False

    @property
    def name(self) -> str:
        return f"{self.elem.name.rstrip('_')}x{self.lanes}"

    @property
    def kind(self) -> str:
        return self.elem.kind

    @property
    def bits(self) -> int:
        return self.elem.bits

    @property
    def is_float(self) -> bool:
        return self.elem.is_float

    @property
    def is_int(self) -> bool:
        return self.elem.is_int

    @property
    def is_bool(self) -> bool:
        return self.elem.is_bool

    @property
    def strong(self) -> "SimdType":
        return self

    @property
    def compute(self) -> "SimdType":
        return self

    @property
    def np(self) -> np.dtype:
        return self.elem.np

    def __repr__(self) -> str:
        return f"dsl.simd({self.elem!r}, {self.lanes})"

    def __str__(self) -> str:
        return f"simd({self.elem}, {self.lanes})"


def simd(dtype, lanes: int) -> SimdType:
    """``dsl.simd(f32, 16)``: the type of a SIMD value (for ``dsl.local`` arrays of vectors)."""
    elem = as_dtype(dtype)
    if elem.is_storage_only:
        raise TypeError(f"dsl.simd({elem.name}, {lanes}): f16/bf16 are storage types; their lanes load as f32, "
                        "so use dsl.simd(f32, n)")
    if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)) or int(lanes) not in SIMD_LANES:
        raise TypeError(f"dsl.simd(dtype, lanes): lanes must be one of {', '.join(map(str, SIMD_LANES))}, "
                        f"got {lanes!r}")
    return SimdType(elem, int(lanes))


def is_simd(t) -> bool:
    return isinstance(t, SimdType)
