"""Standard-ONNX forms of opdsl's own ``com.opdsl`` ops, so other runtimes can run an export.

Two kinds of ops are lowered:

* What the graph compiler makes (FusedMatMul, FusedElementwise, FusedConv, the format
  Reorder, and RecurrentScan, the time loop an inlined RNN/GRU/LSTM leaves): a compiled graph
  (``model.graph.to_onnx()``) is written wherever it appears as MatMul + Add, the fused
  elementwise ops (lower_program.py), Conv + Add + Relu / Clip / LeakyRelu, Identity (formats
  are a storage detail; values are logical) and the RNN/GRU/LSTM node (lower_recurrent.py).
* Ops a user writes (FullyConnected, DataConvert): they keep their ``com.opdsl`` node in a
  graph (``dsl.load_onnx`` maps it back to the same op) and are written as Gemm or MatMul,
  QuantizeLinear / DequantizeLinear / Cast only inside the FunctionProto of a composed op,
  whose body other runtimes expand.

An op with no lowering here, or one whose configuration the model's ai.onnx opset cannot
express, stays a ``com.opdsl`` node.

``lower(node, opset, fresh, in_function)`` -> list of NodeProtos, or None.
``register(domain, op_type, everywhere)`` adds a lowering (a function ``(node, opset, emit)
-> bool``; ``emit(op_type, inputs, outputs, **attrs)`` writes one standard node and
``emit.constant(array)`` / ``emit.temp(hint)`` give new tensor names).  Lowerings read params
by name, so they never import the op library.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from dsl.lang.types import DType
from dsl.onnx.lower_program import lower_fused_elementwise
from dsl.onnx.lower_recurrent import lower_recurrent_scan

QUANT_NAMES = ("i8", "u8", "i16", "u16")

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

        from dsl.onnx.attributes import c_order
        name = self.temp(hint)
        self("Constant", [], [name], value=numpy_helper.from_array(c_order(value), name))
        return name


def lower(node, opset: int, fresh: Callable[[str], str], in_function: bool = True) -> Optional[List]:
    """``node`` as standard ai.onnx nodes (``opset``: the model's ai.onnx version), or None.
    ``in_function``: the node is in a FunctionProto's body (else in a graph)."""
    found = _LOWERINGS.get((node.op.domain, node.op.op_type))
    if found is None or not (in_function or found[1]):
        return None
    fn = found[0]
    emit = _Emitter(node, fresh)
    return emit.nodes if fn(node, opset, emit) else None


def onnx_type(dtype: DType) -> int:
    from onnx import helper
    return int(helper.np_dtype_to_tensor_dtype(dtype.np))


def _names(node):
    return ([None if t is None else t.name for t in node.inputs],
            [None if t is None else t.spec for t in node.inputs],
            [t.name for t in node.outputs])


# --------------------------------------------------------------------------- FullyConnected

@register("com.opdsl", "FullyConnected")
def _fully_connected(node, opset, emit) -> bool:
    """y = x·wᵀ + b: Gemm(transB=1) for 2-D float x, else MatMul with the transposed weights."""
    (x, w, *rest), (xs, *_), (y,) = _names(node)
    b = rest[0] if rest else None
    if opset < 13:
        return False
    if xs.ndim == 2 and xs.dtype.is_float:
        emit("Gemm", [x, w] + ([b] if b else []), [y], transB=1)
        return True
    wt = emit.temp("w_t")
    emit("Transpose", [w], [wt], perm=[1, 0])
    if b is None:
        emit("MatMul", [x, wt], [y])
        return True
    xw = emit.temp("xw")
    emit("MatMul", [x, wt], [xw])
    emit("Add", [xw, b], [y])
    return True


# --------------------------------------------------------------------------- DataConvert

@register("com.opdsl", "DataConvert")
def _data_convert(node, opset, emit) -> bool:
    """Quantize (float -> i8/u8/i16/u16) as QuantizeLinear on f32, dequantize (those -> float with
    a scale) as DequantizeLinear, anything else as Cast: the three modes of DataConvert."""
    op = node.op
    (x,), (xs,), (y,) = _names(node)
    to: DType = op.dtype
    if opset < 13:
        return False
    scale = np.float32(1.0 if op.scale is None else op.scale)
    if xs.dtype.is_float and to.name in QUANT_NAMES:
        if to.name in ("i16", "u16") and opset < 21:
            return False
        if xs.dtype.name != "f32":  # DataConvert divides in f32 whatever the float input
            xf = emit.temp("x_f32")
            emit("Cast", [x], [xf], to=onnx_type(_f32()))
            x = xf
        s = emit.constant(np.array(scale, np.float32), "scale")
        z = emit.constant(np.array(op.zero_point, to.np), "zero_point")
        emit("QuantizeLinear", [x, s, z], [y])
        return True
    if xs.dtype.name in QUANT_NAMES and to.is_float and op.scale is None:
        return False  # dequantized with its input's own quantization, which a function body does not know
    if xs.dtype.name in QUANT_NAMES and to.is_float:
        if xs.dtype.name in ("i16", "u16") and opset < 21:
            return False
        s = emit.constant(np.array(scale, np.float32), "scale")
        f = y if to.name == "f32" else emit.temp("dequantized")
        info = np.iinfo(xs.dtype.np)
        if info.min <= op.zero_point <= info.max:
            z = emit.constant(np.array(op.zero_point, xs.dtype.np), "zero_point")
            emit("DequantizeLinear", [x, s, z], [f])
        else:  # an offset outside the dtype (the guide's u8 with -127): (f32(x) - offset) * scale
            xf, d = emit.temp("x_f32"), emit.temp("centered")
            emit("Cast", [x], [xf], to=onnx_type(_f32()))
            z = emit.constant(np.array(op.zero_point, np.float32), "zero_point")
            emit("Sub", [xf, z], [d])
            emit("Mul", [d, s], [f])
        if f != y:
            emit("Cast", [f], [y], to=onnx_type(to))
        return True
    emit("Cast", [x], [y], to=onnx_type(to))
    return True


def _f32() -> DType:
    from dsl.lang.types import f32
    return f32


# --------------------------------------------------------------------------- FusedConv

_CONV_PARAMS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@register("com.opdsl", "FusedConv", everywhere=True)
def _fused_conv(node, opset, emit) -> bool:
    """activation(Conv(X, W, B) + Z) as Conv, Add and Relu / Clip / LeakyRelu."""
    from dsl.onnx.attributes import node_attributes
    op = node.op
    names, specs, (y,) = _names(node)
    x, w, b, z = (names + [None, None])[:4]
    if opset < 7:  # Add broadcasts from opset 7
        return False
    attrs = {a.name: a for a in node_attributes(op) if a.name in _CONV_PARAMS}
    steps = [s for s in (z is not None, op.activation != "") if s]
    out = emit.temp("conv") if steps else y
    conv = [x, w] + ([b] if b else [])
    emit("Conv", conv, [out])
    emit.nodes[-1].attribute.extend(attrs.values())
    if z is not None:
        added = emit.temp("sum") if op.activation else y
        emit("Add", [out, z], [added])
        out = added
    if op.activation == "Relu":
        emit("Relu", [out], [y])
    elif op.activation == "LeakyRelu":
        emit("LeakyRelu", [out], [y], alpha=float(op.activation_params[0]))
    elif op.activation == "Clip" and opset < 11:  # bounds were attributes before opset 11
        lo, hi = (float(v) for v in op.activation_params)
        emit("Clip", [out], [y], min=lo, max=hi)
    elif op.activation == "Clip":
        dt = specs[0].dtype.np
        lo = emit.constant(np.array(op.activation_params[0], dt), "min")
        hi = emit.constant(np.array(op.activation_params[1], dt), "max")
        emit("Clip", [out, lo, hi], [y])
    elif op.activation:
        return False
    return True


# --------------------------------------------------------------------------- FusedMatMul, Reorder

@register("com.opdsl", "FusedMatMul", everywhere=True)
def _fused_matmul(node, opset, emit) -> bool:
    """numpy.matmul(A, B) + bias as MatMul and Add (bias along the last axis broadcasts)."""
    (a, b, *rest), _, (y,) = _names(node)
    bias = rest[0] if rest else None
    if opset < 7:  # Add broadcasts from opset 7
        return False
    if bias is None:
        emit("MatMul", [a, b], [y])
        return True
    ab = emit.temp("matmul")
    emit("MatMul", [a, b], [ab])
    emit("Add", [ab, bias], [y])
    return True


@register("com.opdsl", "Reorder", everywhere=True)
def _reorder(node, opset, emit) -> bool:
    """A format change (plain <-> nchwc16) keeps the logical values: Identity."""
    (x,), _, (y,) = _names(node)
    emit("Identity", [x], [y])
    return True


register("com.opdsl", "FusedElementwise", everywhere=True)(lower_fused_elementwise)
register("com.opdsl", "RecurrentScan", everywhere=True)(lower_recurrent_scan)
