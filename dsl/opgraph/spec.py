"""What the op/graph compiler knows about a tensor before it exists (``TensorSpec``), the data
formats a tensor may be stored in, and the error ops raise when they reject their inputs.

The bottom of the op/graph layer: ops, formats, graphs and passes all speak in these terms.
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np

from dsl.lang.types import DType, as_dtype, from_numpy

FORMATS = ("plain", "nchwc16")


class VerifyError(ValueError):
    """An op rejects its inputs or params (raised by ``Op.verify``)."""


# --------------------------------------------------------------------------- tensor specs

@dataclass(frozen=True)
class TensorSpec:
    """What the compiler knows about a tensor before it exists.

    ``shape`` is logical (NCHW even when stored NCHWc16); a ``None`` dim is known at
    run time.  ``value`` (excluded from ==) is the content when known at compile time.
    ``quant`` is ``(scale, zero_point)`` for quantized i8/u8 tensors, else ``None``.
    """

    shape: Tuple[Optional[int], ...]
    dtype: DType
    format: str = "plain"
    quant: Optional[Tuple[float, int]] = None
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
        unless given, since a changed spec no longer describes the same content."""
        changes.setdefault("value", None)
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, array: np.ndarray, with_value: bool = True) -> "TensorSpec":
        """The plain spec of a numpy array (its value attached when ``with_value``)."""
        return cls(array.shape, from_numpy(array.dtype), "plain", None, array if with_value else None)

    def __str__(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        fmt = "" if self.format == "plain" else f" {self.format}"
        return f"{self.dtype}[{dims}]{fmt}"


class Symbolic:
    """A tensor of a graph under construction.  Applying an op to one adds a node to
    ``self.graph`` (``graph.apply(op, inputs)``) instead of running the op now; ``dsl.Graph``'s
    tensors are the one implementation.  Op sits below Graph, so it knows only this."""

    graph: object


def describe(op) -> str:
    """``domain::op_type`` of an op instance or class (``op_type`` alone in the ONNX domain)."""
    dom = f"{op.domain}::" if op.domain else ""
    return f"{dom}{op.op_type}"
