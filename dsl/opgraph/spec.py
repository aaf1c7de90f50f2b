"""What the op/graph compiler knows about a tensor before it exists (``TensorSpec``), the data
formats a tensor may be stored in, and the error ops raise when they reject their inputs.

The bottom of the op/graph layer: ops, formats, graphs and passes all speak in these terms.
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np

from dsl.lang.types import DType, as_dtype, from_numpy, i8, i16, u8, u16
from dsl.lang.errors import VerifyError  # noqa: F401  (every error: dsl/lang/errors.py)

FORMATS = ("plain", "nchwc16")


# --------------------------------------------------------------------------- quantization

QUANTIZABLE = (i8, u8, i16, u16)  # the integer types ONNX QuantizeLinear produces; never i32/i64


class Quant(NamedTuple):
    """What a quantized tensor's integers mean: real = (q - zero_point) * scale.

    Per tensor: a float ``scale`` and an int ``zero_point``, ``axis`` None.  Per axis: tuples
    with one entry per index along ``axis`` (a non-negative axis of the tensor).  It is the
    type of ``TensorSpec.quant``; a plain ``(scale, zero_point)`` tuple given there is
    converted, so ``q[0]``, ``q[1]`` read the same either way."""

    scale: Union[float, Tuple[float, ...]]
    zero_point: Union[int, Tuple[int, ...]]
    axis: Optional[int] = None

    @property
    def per_axis(self) -> bool:
        return self.axis is not None

    def __str__(self) -> str:
        where = "" if self.axis is None else f" along axis {self.axis}"
        return f"scale {_short(self.scale)}, zero point {_short(self.zero_point)}{where}"


def _short(v) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(f"{x:g}" for x in v[:4]) + (", ..." if len(v) > 4 else "") + ")"
    return f"{v:g}"


def as_quant(q, dtype: DType, shape: Tuple[Optional[int], ...]) -> Quant:
    """``q`` (a Quant or a (scale, zero_point[, axis]) tuple, per tensor or per axis) checked
    against the tensor it describes, as a Quant of Python floats and ints."""
    where = f"TensorSpec quant {q!r} of a {dtype} tensor"
    if dtype not in QUANTIZABLE:
        raise ValueError(f"{where}: only {', '.join(map(str, QUANTIZABLE))} tensors may be quantized "
                         f"(index types like i32/i64 never are)")
    if not isinstance(q, tuple) or len(q) not in (2, 3):
        raise TypeError(f"{where}: expected dsl.Quant(scale, zero_point, axis=None)")
    scale, zp, axis = (tuple(q) + (None,))[:3]
    lo, hi = int(np.iinfo(dtype.np).min), int(np.iinfo(dtype.np).max)

    def one_scale(s):
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, float, np.integer, np.floating)) \
                or not np.isfinite(s) or s <= 0:
            raise ValueError(f"{where}: scale must be a positive finite float, got {s!r}")
        return float(s)

    def one_zp(z):
        if isinstance(z, (bool, np.bool_)) or not isinstance(z, (int, np.integer)) and not (
                isinstance(z, (float, np.floating)) and float(z).is_integer()):
            raise TypeError(f"{where}: zero point must be an int, got {z!r}")
        if not lo <= int(z) <= hi:
            raise ValueError(f"{where}: zero point {int(z)} is outside the range of {dtype} [{lo}, {hi}]")
        return int(z)

    if axis is None:
        if isinstance(scale, (tuple, list, np.ndarray)) or isinstance(zp, (tuple, list, np.ndarray)):
            raise ValueError(f"{where}: per-axis scales and zero points need an axis")
        return _same(q, Quant(one_scale(scale), one_zp(zp)))
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)) or not 0 <= axis < len(shape):
        raise ValueError(f"{where}: axis must be an int in 0..{len(shape) - 1} (rank {len(shape)}), got {axis!r}")
    scales = tuple(one_scale(s) for s in np.ravel(scale).tolist())
    zps = tuple(one_zp(z) for z in np.ravel(zp).tolist()) if np.ndim(zp) else (one_zp(zp),) * len(scales)
    if len(zps) != len(scales):
        raise ValueError(f"{where}: {len(scales)} scales but {len(zps)} zero points")
    n = shape[axis]
    if n is not None and len(scales) != n:
        raise ValueError(f"{where}: {len(scales)} scales for axis {axis} of size {n}")
    return _same(q, Quant(scales, zps, int(axis)))


def _same(given, checked: Quant) -> Quant:
    """``given`` itself when it already is ``checked``: a spec copied with ``with_`` keeps the
    very Quant object, which is how propagate_quant tells a passed-through one from a new one."""
    if type(given) is not Quant:
        return checked
    try:
        return given if bool(given == checked) else checked
    except ValueError:  # arrays given for per-axis scales: a new Quant of tuples
        return checked


# --------------------------------------------------------------------------- tensor specs

@dataclass(frozen=True)
class TensorSpec:
    """What the compiler knows about a tensor before it exists.

    ``shape`` is logical (NCHW even when stored NCHWc16); a ``None`` dim is known at
    run time.  ``value`` (excluded from ==) is the content when known at compile time.
    ``quant`` is a ``Quant`` (scale, zero point, per tensor or per axis) for quantized
    i8/u8/i16/u16 tensors, else ``None``; graphs carry it through ops that only move data.
    """

    shape: Tuple[Optional[int], ...]
    dtype: DType
    format: str = "plain"
    quant: Optional[Quant] = None
    value: Optional[np.ndarray] = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        try:  # operator.index: 2.5 (or 2.0) is refused rather than truncated to 2
            shape = tuple(None if d is None else operator.index(d) for d in self.shape)
            if any(isinstance(d, (bool, np.bool_)) for d in self.shape):
                raise TypeError
        except TypeError:
            raise TypeError(f"TensorSpec shape must be a tuple of int or None, got {self.shape!r}") from None
        if any(d is not None and d < 0 for d in shape):
            raise ValueError(f"TensorSpec shape has a negative dim: {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if self.format not in FORMATS:
            raise ValueError(f"unknown tensor format {self.format!r}; known: {', '.join(FORMATS)}")
        if self.quant is not None:
            object.__setattr__(self, "quant", as_quant(self.quant, self.dtype, shape))

    @property
    def spec(self) -> "TensorSpec":
        """This spec without ``value`` (an output with the same shape and dtype does not
        have the same content), so ``infer`` can ``return x.spec``."""
        return self.with_() if self.value is not None else self

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def known(self) -> bool:
        """Every dim is known."""
        return all(d is not None for d in self.shape)

    @property
    def size(self) -> Optional[int]:
        """Number of elements, ``None`` when a dim is unknown (0 if any dim is 0)."""
        if 0 in self.shape:
            return 0
        if not self.known:
            return None
        return int(np.prod(self.shape, dtype=np.int64))

    def with_(self, **changes) -> "TensorSpec":
        """A copy with fields changed: ``x.with_(dtype=dsl.u8)``.  Drops ``value``
        unless given, since a changed spec no longer describes the same content, and
        ``quant`` when the dtype changes or a per-axis quantization's axis would not fit."""
        changes.setdefault("value", None)
        if "quant" not in changes and self.quant is not None:
            if as_dtype(changes.get("dtype", self.dtype)) != self.dtype or (
                    self.quant.axis is not None and "shape" in changes and not axis_kept(
                        self.shape, tuple(changes["shape"]), self.quant.axis)):
                changes["quant"] = None
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, array: np.ndarray, with_value: bool = True) -> "TensorSpec":
        """The plain spec of a numpy array (its value attached when ``with_value``)."""
        return cls(array.shape, from_numpy(array.dtype), "plain", None, array if with_value else None)

    def __str__(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        fmt = "" if self.format == "plain" else f" {self.format}"
        return f"{self.dtype}[{dims}]{fmt}"


def axis_kept(before, after, axis: int) -> bool:
    """A per-axis quantization along ``axis`` of a tensor of shape ``before`` still describes
    one of shape ``after`` (same rank, same or unknown size along the axis)."""
    return len(after) == len(before) and (after[axis] == before[axis] or None in (after[axis], before[axis]))


class Symbolic:
    """A tensor of a graph under construction.  Applying an op to one adds a node to
    ``self.graph`` (``graph.apply(op, inputs)``) instead of running the op now; ``dsl.Graph``'s
    tensors are the one implementation.  Op sits below Graph, so it knows only this."""

    graph: object


def describe(op) -> str:
    """``domain::op_type`` of an op instance or class (``op_type`` alone in the ONNX domain)."""
    dom = f"{op.domain}::" if op.domain else ""
    return f"{dom}{op.op_type}"
