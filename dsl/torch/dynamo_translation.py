"""The ``custom_translation_table`` of ``torch.onnx.export(..., dynamo=True)`` for registered ops:
each opdsl operator becomes one node of its op's (domain, op_type), params as attributes.
Needs onnxscript, which the Dynamo exporter itself needs; imported only by that export."""
from __future__ import annotations

from typing import Callable, Dict

import torch

from dsl.opgraph.spec import TensorSpec
from dsl.torch import custom_op, onnx_symbolic


def translations() -> Dict[Callable, Callable]:
    import onnxscript
    table = {}
    for reg in custom_op.registered():
        overload = getattr(getattr(torch.ops.opdsl, reg.signature.name), "default")
        table[overload] = _translation(reg, onnxscript)
    return table


_ATTR_TYPES = {"float": "FLOAT", "int": "INT", "bool": "INT", "str": "STRING", "dtype": "STRING",
               "floats": "FLOATS", "ints": "INTS", "bools": "INTS"}
_TENSOR_TYPES = [f"tensor({t})" for t in ("float", "double", "float16", "bfloat16", "int8", "uint8", "int16",
                                         "uint16", "int32", "uint32", "int64", "uint64", "bool")]


def _schema(reg, name: str):
    """An onnx OpSchema for the op's node, which the exporter's node builder needs to bind
    inputs and attributes (a custom domain has none registered)."""
    from onnx.defs import OpSchema
    sig = reg.signature
    single, optional = OpSchema.FormalParameterOption.Single, OpSchema.FormalParameterOption.Optional
    inputs = [OpSchema.FormalParameter(n, f"T{i}", param_option=optional if n in sig.optional_inputs else single)
              for i, n in enumerate(sig.inputs)]
    outputs = [OpSchema.FormalParameter(f"output_{i}", f"O{i}") for i in range(reg.num_outputs)]
    constraints = [(f"T{i}", _TENSOR_TYPES, "") for i in range(len(inputs))] + [
        (f"O{i}", _TENSOR_TYPES, "") for i in range(len(outputs))]
    attributes = [OpSchema.Attribute(slot.name, getattr(OpSchema.AttrType, _ATTR_TYPES[slot.kind]), "", required=False)
                  for slot in sig.params]
    return OpSchema(name, reg.cls.domain, int(reg.cls.since or 1), inputs=inputs, outputs=outputs,
                    type_constraints=constraints, attributes=attributes)


def _spec(value):
    """The spec (rank and dtype, dims unknown) of a symbolic tensor of the exporter."""
    from dsl.lang.types import from_numpy
    return TensorSpec((None,) * len(value.shape), from_numpy(value.dtype.numpy()))


def _translation(reg, onnxscript) -> Callable:
    from onnxscript import values
    sig = reg.signature
    opset = values.Opset(domain=reg.cls.domain, version=int(reg.cls.since or 1))
    nodes = {}

    def node_named(name):
        if name not in nodes:
            nodes[name] = values.Op(opset, name, _schema(reg, name))
        return nodes[name]

    def translate(*inputs, **kwargs):
        op = sig.decode(reg.cls, {k: v for k, v in kwargs.items() if k != "backend"})
        attrs = {}
        for name, v in op.params.items():
            if v is None:
                continue
            if hasattr(v, "name") and not isinstance(v, (str, tuple)):
                v = v.name  # a dsl.DType, by name as on custom-domain nodes
            attrs[name] = list(v) if isinstance(v, tuple) else (int(v) if isinstance(v, bool) else v)
        present = list(inputs)
        while present and present[-1] is None:
            present.pop()
        name = op.op_type
        if getattr(reg.cls, "composed", False):  # its FunctionProto is added after the export
            name = onnx_symbolic.note_composed(op, [None if x is None else _spec(x) for x in present]) or name
        return node_named(name)(*present, **attrs)
    translate.__name__ = reg.signature.name
    return translate
