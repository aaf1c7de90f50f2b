"""ONNX attributes and constants written from op params: shared by the exporter (export.py) and
the lowering of opdsl ops to standard ones (lower.py)."""
from __future__ import annotations

from typing import List

import numpy as np

from dsl.lang.types import DType
from dsl.opgraph.host_values import SequenceSpec, is_host
from dsl.opgraph.op import Op
from dsl.opgraph.spec import TensorSpec


def tensor_type(dtype: DType) -> int:
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(dtype.np)


def attribute(name: str, value, standard: bool = False):
    """A param value as an AttributeProto (None when ONNX cannot hold it).  A value whose class
    has ``onnx_attribute()`` is written as what that returns (``from_onnx_attribute`` reads it
    back on import: dsl/onnx/load.py).  A DType is its
    name ("u8") on custom-domain ops and, as the standard requires (Cast's ``to``), its
    TensorProto element type code on ai.onnx ops."""
    from onnx import helper, numpy_helper
    if hasattr(type(value), "onnx_attribute"):  # a structured param (a FusedElementwise program) says its form
        value = value.onnx_attribute()
    if isinstance(value, (TensorSpec, SequenceSpec)):  # ONNX Optional's `type`
        from dsl.onnx.value_types import type_proto
        return helper.make_attribute(name, type_proto(value))
    if isinstance(value, DType):
        return helper.make_attribute(name, tensor_type(value) if standard else value.name)
    if isinstance(value, (bool, np.bool_)):
        return helper.make_attribute(name, int(value))
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(c_order(value), name))
    if isinstance(value, (tuple, list)):
        items = [int(v) if isinstance(v, (bool, np.bool_)) else v for v in value]
        if not items:
            return helper.make_attribute(name, [], attr_type=7)  # empty INTS
        return helper.make_attribute(name, items)
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return helper.make_attribute(name, value.item() if isinstance(value, np.generic) else value)
    raise TypeError(f"param {name!r} = {value!r} ({type(value).__name__}) has no ONNX attribute form")


def c_order(value) -> np.ndarray:
    """``value`` as a C-ordered array of the same shape (np.ascontiguousarray turns 0-d into 1-d,
    which would make a scalar scale look per-axis)."""
    a = np.asarray(value)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _same(a, b) -> bool:
    """Param value equality that also holds for tuples and arrays."""
    if isinstance(a, (tuple, list, np.ndarray)) or isinstance(b, (tuple, list, np.ndarray)):
        try:
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        except (TypeError, ValueError):
            return False
    return a == b


def node_attributes(op: Op, skip=()) -> List:
    """Attributes for the params of ``op`` that differ from its class defaults (but ``skip``)."""
    out = []
    table = type(op).param_table()
    for name, value in op.params.items():
        p = table[name]
        if name in skip or value is None or (not p.required and _same(value, p.default)):
            continue
        out.append(attribute(name, value, standard=not op.domain))
    return out


def value_info(name: str, spec, symbolic: bool, names=()):
    """Run-time dims of inputs become dim_params: the input's own names ("batch"), else <name>_d<i>."""
    from onnx import helper
    if is_host(spec):  # a sequence or optional
        from dsl.onnx.value_types import type_proto
        return helper.make_value_info(name, type_proto(spec))
    names = tuple(names) or (None,) * len(spec.shape)
    dims = [d if d is not None else ((names[i] or f"{name}_d{i}") if symbolic else None)
            for i, d in enumerate(spec.shape)]
    return helper.make_tensor_value_info(name, tensor_type(spec.dtype), dims)
