"""Values that are not tensors: ONNX sequences and optionals.

A sequence (ONNX ``seq(tensor)``) is a Python list of numpy arrays, an optional
(``optional(T)``) is ``None`` or a value of ``T``, as onnxruntime gives and takes them.  Their
length (and whether an optional holds anything) is known only when the model runs, so they
are *host values*: no buffer is planned for them, the graph runs node by node when it has
any (``Model``), and the ops that make or read them (``ops/sequence.py``,
``ops/optional.py``) define ``run_host(inputs, backend) -> outputs``, moving references to
tensors that DSL kernels computed.  ``SequenceSpec`` / ``OptionalSpec`` are what the
compiler knows of them, beside ``TensorSpec``; an op takes them only when its class sets
``host_values`` (``check_and_infer`` rejects them for every other op): ``True`` where a
node takes or gives one (Identity, If, Loop), ``"always"`` for ops that only ever run on
the host (the sequence and optional ops).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple, Union

import numpy as np

from dsl.lang.types import DType, as_dtype, from_numpy
from dsl.opgraph.spec import TensorSpec, VerifyError


HOST = "run_host"  # the `kernels` entry of host ops: their work is run_host, no kernel


@dataclass(frozen=True)
class SequenceSpec:
    """A sequence of tensors of one dtype; ``elem_shape`` is the shape every element has where
    known (``None`` dims vary or are unknown; ``None`` itself: even the rank is unknown).
    ``value`` (excluded from ==) is the list of arrays when known (while running)."""

    dtype: DType
    elem_shape: Optional[Tuple[Optional[int], ...]] = None
    value: Optional[tuple] = field(default=None, compare=False, repr=False)

    format = "plain"   # what passes reading a spec's storage see: nothing to convert
    quant = None
    known = False      # the length is a run-time fact: never planned as a buffer

    def __post_init__(self):
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if self.elem_shape is not None:
            object.__setattr__(self, "elem_shape", tuple(None if d is None else int(d) for d in self.elem_shape))
        if self.value is not None:
            object.__setattr__(self, "value", tuple(self.value))

    @property
    def spec(self) -> "SequenceSpec":
        return self.with_()

    @property
    def element(self) -> TensorSpec:
        """The spec of one element; a VerifyError when not even its rank is known."""
        if self.elem_shape is None:
            raise VerifyError(f"the tensors of {self} have an unknown rank; declare the sequence's element "
                              f"shape (at least its rank)")
        return TensorSpec(self.elem_shape, self.dtype)

    def with_(self, **changes) -> "SequenceSpec":
        return dataclasses.replace(self, **_host_changes(self, changes))

    def __str__(self) -> str:
        dims = "*" if self.elem_shape is None else ",".join("?" if d is None else str(d) for d in self.elem_shape)
        return f"seq({self.dtype}[{dims}])"


@dataclass(frozen=True)
class OptionalSpec:
    """An optional: no value (``None`` when the model runs) or a value of ``elem`` (a
    ``TensorSpec`` or ``SequenceSpec``)."""

    elem: Union[TensorSpec, SequenceSpec]
    value: Any = field(default=None, compare=False, repr=False)

    format = "plain"
    quant = None
    known = False

    def __post_init__(self):
        if not isinstance(self.elem, (TensorSpec, SequenceSpec)):
            raise TypeError(f"OptionalSpec element must be a TensorSpec or SequenceSpec, got {self.elem!r}")
        object.__setattr__(self, "elem", self.elem.with_())

    @property
    def dtype(self) -> DType:
        return self.elem.dtype

    @property
    def spec(self) -> "OptionalSpec":
        return self.with_()

    def with_(self, **changes) -> "OptionalSpec":
        return dataclasses.replace(self, **_host_changes(self, changes))

    def __str__(self) -> str:
        return f"optional({self.elem})"


HostSpec = Union[SequenceSpec, OptionalSpec]


def _host_changes(spec, changes: dict) -> dict:
    """``with_`` changes for a host spec: value dropped unless given; the tensor-only fields
    graph passes set on every spec (format, quant) accepted at their only value."""
    if changes.pop("format", "plain") != "plain" or changes.pop("quant", None) is not None:
        raise ValueError(f"{spec} is a host value: it has no storage format or quantization")
    changes.setdefault("value", None)
    return changes


def is_host(spec) -> bool:
    """Whether ``spec`` describes a host value (sequence or optional), not a tensor."""
    return isinstance(spec, (SequenceSpec, OptionalSpec))


def kind_name(spec) -> str:
    return "an optional" if isinstance(spec, OptionalSpec) else "a sequence" if isinstance(spec, SequenceSpec) \
        else "a tensor"


def runs_on_host(op, in_specs, out_specs) -> bool:
    """Whether a node runs through ``op.run_host``: its op always does (``host_values ==
    "always"``), or a value it takes or gives is a sequence or optional."""
    return type(op).host_values == "always" or any(is_host(s) for s in list(in_specs) + list(out_specs))


def merged_elem_shape(a, b):
    """One element shape covering both (differing dims None, differing ranks: unknown rank)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def spec_of(value):
    """The spec of an eager call's value, with the value attached: a sequence for a list (f32
    when empty: nothing says otherwise), a tensor for an array."""
    if isinstance(value, (list, tuple)):
        dtype, shape = (from_numpy(value[0].dtype), None) if value else (as_dtype("f32"), None)
        for k, a in enumerate(value):
            shape = a.shape if k == 0 else merged_elem_shape(shape, a.shape)
        return SequenceSpec(dtype, shape, value=list(value))
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    return TensorSpec.of(arr)


# --------------------------------------------------------------------------- checking values

def check_value(value, spec, what: str):
    """``value`` (a feed, or what a body gives back) as the kind ``spec`` declares: an array
    for a tensor, a list of arrays for a sequence, ``None`` or the element for an optional.
    Wrong kinds, dtypes and ranks raise errors naming ``what`` and what is accepted."""
    if isinstance(spec, OptionalSpec):
        return None if value is None else check_value(value, spec.elem, f"{what} (optional {spec.elem})")
    if isinstance(spec, SequenceSpec):
        if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
            raise TypeError(f"{what} is declared {spec}: pass a list of numpy {spec.dtype.np} arrays, "
                            f"got {type(value).__name__}")
        out = []
        for k, a in enumerate(value):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{what} element {k}: expected a numpy array, got {type(a).__name__}")
            if a.dtype != spec.dtype.np:
                raise TypeError(f"{what} element {k} has dtype {a.dtype}, expected {spec.dtype} ({spec.dtype.np})")
            es = spec.elem_shape
            if es is not None and (a.ndim != len(es) or any(d is not None and d != s for d, s in zip(es, a.shape))):
                raise ValueError(f"{what} element {k} has shape {a.shape}, expected elements of "
                                 f"{spec.element} (declared {spec})")
            out.append(a if a.flags.c_contiguous else a.copy(order="C"))  # (0-d stays 0-d)
        return out
    if value is None or isinstance(value, (list, tuple)):
        given = "None" if value is None else f"a {type(value).__name__}"
        raise TypeError(f"{what} is a tensor ({spec}): pass a numpy array, got {given}"
                        + ("" if value is None else " (sequences are only accepted where one is declared)"))
    return value


def reject_host_inputs(op, specs, where: str, describe) -> None:
    """Tensor ops take tensors only: a sequence or optional given to one is named here."""
    if type(op).host_values:
        return
    for k, s in enumerate(specs):
        if is_host(s):
            raise VerifyError(f"{describe(op)} ({where}): input {k} is {kind_name(s)} ({s}); {op.op_type} takes "
                              f"tensors only (SequenceAt / OptionalGetElement take a tensor out of one)")

