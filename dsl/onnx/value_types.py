"""ONNX value types <-> opdsl specs: tensor types are ``TensorSpec``s, ``sequence(tensor)``
a ``SequenceSpec`` and ``optional(T)`` an ``OptionalSpec`` (dsl/opgraph/host_values.py).

Graph inputs and outputs, body inputs and the ``type`` attribute of ONNX Optional all
declare types; the importer reads them here and the exporter writes them back from here.
"""
from __future__ import annotations

from typing import Optional, Tuple

from dsl.onnx.errors import OnnxImportError
from dsl.opgraph.host_values import OptionalSpec, SequenceSpec
from dsl.opgraph.spec import TensorSpec

ACCEPTED = "tensor, sequence(tensor) or optional(tensor / sequence(tensor))"


def tensor_dims(tt, where: str) -> Optional[Tuple]:
    """The dims of a TypeProto.Tensor (ints, dim_param names, None for unnamed unknowns), or
    None when it declares no shape at all."""
    if not tt.HasField("shape"):
        return None
    dims = []
    for axis, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value < 0:
            raise OnnxImportError(f"{where}: shape.dim[{axis}].dim_value is {d.dim_value}; dimensions "
                                  "are >= 0 (or a dim_param name for a size known at run time)")
        dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return tuple(dims)


def value_spec(tp, where: str, dtype_of):
    """The spec a TypeProto declares; ``dtype_of(elem_type, where)`` maps element types
    (load.onnx_dtype).  A tensor needs a shape (at least its rank); a sequence's element
    shape may be left out (rank unknown)."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        dtype = dtype_of(tp.tensor_type.elem_type, where)
        dims = tensor_dims(tp.tensor_type, where)
        if dims is None:
            raise OnnxImportError(f"{where} has no shape (not even a rank); opdsl needs the rank")
        return TensorSpec(tuple(None if isinstance(d, str) else d for d in dims), dtype)
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise OnnxImportError(f"{where}: a sequence of {elem.WhichOneof('value')} is not supported; "
                                  f"accepted: {ACCEPTED}")
        dims = tensor_dims(elem.tensor_type, where)
        return SequenceSpec(dtype_of(elem.tensor_type.elem_type, where),
                            None if dims is None else tuple(None if isinstance(d, str) else d for d in dims))
    if kind == "optional_type":
        inner = value_spec(tp.optional_type.elem_type, f"{where} (optional element)", dtype_of)
        if isinstance(inner, OptionalSpec):
            raise OnnxImportError(f"{where}: an optional of an optional is not an ONNX type; accepted: {ACCEPTED}")
        return OptionalSpec(inner)
    raise OnnxImportError(f"{where}: type {kind or 'none'} is not supported; accepted: {ACCEPTED}")


def type_proto(spec, symbolic_dims=None):
    """The TypeProto of a spec (the exporter's side); ``symbolic_dims(shape)`` names unknown dims."""
    from onnx import helper

    def tensor_type(dtype):
        return helper.np_dtype_to_tensor_dtype(dtype.np)
    if isinstance(spec, OptionalSpec):
        return helper.make_optional_type_proto(type_proto(spec.elem, symbolic_dims))
    if isinstance(spec, SequenceSpec):
        shape = None if spec.elem_shape is None else list(spec.elem_shape)
        return helper.make_sequence_type_proto(helper.make_tensor_type_proto(tensor_type(spec.dtype), shape))
    shape = list(spec.shape) if symbolic_dims is None else symbolic_dims(spec.shape)
    return helper.make_tensor_type_proto(tensor_type(spec.dtype), shape)
