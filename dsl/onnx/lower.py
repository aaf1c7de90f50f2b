"""Standard-ONNX forms of opdsl's own ``com.opdsl`` ops, so other runtimes can run an export:
the registry of lowerings, and what a lowering writes with.

Two kinds of ops are lowered:

* What the graph compiler makes (FusedMatMul, FusedElementwise, FusedConv, FusedConvPool, the format Reorder,
  and RecurrentScan, the time loop an inlined RNN/GRU/LSTM leaves): a compiled graph
  (``model.graph.to_onnx()``) is written wherever it appears as standard ops.
* Ops a user writes (FullyConnected, DataConvert): they keep their ``com.opdsl`` node in a graph
  (``dsl.load_onnx`` maps it back to the same op) and are written as standard ops only inside
  the FunctionProto of a composed op, whose body other runtimes expand.

Each lowering lives with its op (ops/matmul.py, ops/matmul_fusion.py, ops/conv_fusion.py,
ops/fused_elementwise_export.py, ops/recurrent_export.py, ops/data_convert_export.py,
dsl/opgraph/reorder.py) and registers here with ``register``.  The first ``lower`` of a ``com.opdsl``
node with no lowering yet loads the built-in op library (``registry.load_builtin_library``), as
the op registry's first lookup does, so this module never imports it.  An op with no lowering, or one whose configuration the model's
ai.onnx opset cannot express, stays a ``com.opdsl`` node.

``lower(node, opset, fresh, in_function)`` -> list of NodeProtos, or None.
``register(domain, op_type, everywhere)`` adds a lowering (a function ``(node, opset, emit)
-> bool``; ``emit(op_type, inputs, outputs, **attrs)`` writes one standard node and
``emit.constant(array)`` / ``emit.temp(hint)`` give new tensor names).

This module sits low (below the op layer, above the op registry) so that any op's module may
register its lowering; it imports onnx only when a lowering runs.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from dsl.lang.types import DType
from dsl.opgraph import registry

QUANT_NAMES = ("i8", "u8", "i16", "u16")
OPDSL_DOMAIN = "com.opdsl"

_LOWERINGS: Dict[Tuple[str, str], Tuple[Callable, bool]] = {}


def register(domain: str, op_type: str, everywhere: bool = False):
    """Decorator: ``fn(node, opset, emit) -> bool`` writes ``node`` as standard ops (False: cannot).
    ``everywhere``: in graphs too (the compiler's own ops), not only in function bodies."""
    def deco(fn):
        _LOWERINGS[(domain, op_type)] = (fn, everywhere)
        return fn
    return deco


class _Emitter:
    """Collects the standard nodes of one lowered node, with names unique in the body."""

    def __init__(self, node, fresh: Callable[[str], str]):
        self.node, self.fresh, self.nodes = node, fresh, []

    def __call__(self, op_type: str, inputs, outputs, **attrs) -> None:
        from onnx import helper
        name = self.fresh(f"{self.node.name}/{op_type}")
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=name,
                                           **{k: v for k, v in attrs.items() if v is not None}))

    def temp(self, hint: str) -> str:
        return self.fresh(f"{self.node.name}/{hint}")

    def constant(self, value: np.ndarray, hint: str) -> str:
        from onnx import numpy_helper
        name = self.temp(hint)
        value = np.asarray(value)  # C order of the same shape (ascontiguousarray makes 0-d 1-d)
        value = value if value.flags.c_contiguous else value.copy(order="C")
        self("Constant", [], [name], value=numpy_helper.from_array(value, name))
        return name


def lower(node, opset: int, fresh: Callable[[str], str], in_function: bool = True) -> Optional[List]:
    """``node`` as standard ai.onnx nodes (``opset``: the model's ai.onnx version), or None.
    ``in_function``: the node is in a FunctionProto's body (else in a graph)."""
    key = (node.op.domain, node.op.op_type)
    if key not in _LOWERINGS and node.op.domain == OPDSL_DOMAIN:
        registry.load_builtin_library()  # opdsl's own ops register their lowerings as the library loads
    found = _LOWERINGS.get(key)
    if found is None or not (in_function or found[1]):
        return None
    fn = found[0]
    emit = _Emitter(node, fresh)
    return emit.nodes if fn(node, opset, emit) else None


def onnx_type(dtype: DType) -> int:
    from onnx import helper
    return int(helper.np_dtype_to_tensor_dtype(dtype.np))


def names(node):
    """(input names, input specs, output names) of a node; None for an absent input."""
    return ([None if t is None else t.name for t in node.inputs],
            [None if t is None else t.spec for t in node.inputs],
            [t.name for t in node.outputs])
