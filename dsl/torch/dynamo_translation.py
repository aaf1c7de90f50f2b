"""The ``custom_translation_table`` of ``torch.onnx.export(..., dynamo=True)`` for registered ops:
each opdsl operator becomes one node of its op's (domain, op_type), params as attributes.
Needs onnxscript, which the Dynamo exporter itself needs; imported only by that export."""
from __future__ import annotations

from typing import Callable, Dict

import torch

from dsl.torch import custom_op


def translations() -> Dict[Callable, Callable]:
    import onnxscript
    table = {}
    for reg in custom_op.registered():
        overload = getattr(getattr(torch.ops.opdsl, reg.signature.name), "default")
        table[overload] = _translation(reg, onnxscript)
    return table


def _translation(reg, onnxscript) -> Callable:
    sig = reg.signature
    opset = onnxscript.values.Opset(domain=reg.cls.domain, version=int(reg.cls.since or 1))

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
        return getattr(opset, reg.cls.op_type)(*present, _outputs=reg.num_outputs, **attrs)
    translate.__name__ = reg.signature.name
    return translate
