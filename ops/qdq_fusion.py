"""Integer paths for QDQ-quantized models: DequantizeLinear -> MatMul / Conv -> QuantizeLinear
becomes one QLinearMatMul / QLinearConv, which accumulates in i32 and requantizes to the
QuantizeLinear's scale (as ONNX Runtime's QDQ transformer does); DequantizeLinear -> Conv ->
Relu / Clip -> QuantizeLinear becomes one FusedQLinearConv, the activation a clamp of the
output integers (ops/quant_conv_fused.py).  The data-movement nodes between layers (MaxPool,
Concat, Dropout) have their rules in ops/qdq_data_movement.py.

A QDQ model (what onnxruntime.quantization writes) keeps float MatMul/Conv nodes between
DequantizeLinear nodes (activations and i8 weights) and a QuantizeLinear of the result; run
as written that is float math on dequantized values.  The rewrite applies when every scale
and zero point is a constant, scales are f32, data are i8/u8, the output quantization is per
tensor, and (MatMul) ``a`` is per tensor and ``b`` per tensor or per column of a 2-D ``b``,
(Conv) ``x`` per tensor and ``w`` per tensor or per output channel.  A Conv bias must be a
float constant or ConstantOfShape of a constant shape (what onnx's "light" models write;
quantized here to i32 with scale x_scale·w_scale, zero point 0) or the DequantizeLinear of such
an i32 constant.

The rules run before constant folding (``before_fold=True``), which would otherwise fold the
weights' DequantizeLinear into float weights; the DequantizeLinear nodes left without readers
are then dropped as dead.  Results equal the float QDQ computation except where rounding the
float product lands on the other side of a .5 (one unit apart at most).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import dsl
from dsl.opgraph.fusion import fusion_rule
from ops.generate import ConstantOfShape
from ops.elementwise import Clip, ClipV6, Relu
from ops.matmul import MatMul
from ops.nn import Conv
from ops.quant import DequantizeLinear, QuantizeLinear
from ops.quant_conv import QLinearConv
from ops.quant_conv_fused import FusedQLinearConv
from ops.quant_matmul import QLinearMatMul

INT8 = (dsl.i8, dsl.u8)


def _constant(t) -> bool:
    return t is not None and t.kind == "constant"


def _dequantized(g, t, axes=(None,)):
    """(q, scale, zero point) tensors when ``t`` is produced by a DequantizeLinear of i8/u8
    data with constant f32 scale and zero point, quantized per tensor or along an axis in
    ``axes`` (normalized, or None for per tensor only); else None.  A missing zero point
    becomes a 0 constant of the data's dtype."""
    node = getattr(t, "producer", None) if t is not None and t.kind == "node" else None
    if node is None or type(node.op) is not DequantizeLinear or node.op.block_size:
        return None
    q, scale, zp = (list(node.inputs) + [None, None])[:3]
    if q is None or q.spec.dtype not in INT8 or not _constant(scale) or scale.spec.dtype != dsl.f32:
        return None
    if zp is not None and not _constant(zp):
        return None
    if scale.value.size != 1:
        axis = node.op.axis % max(q.spec.ndim, 1)
        if axis not in axes or scale.value.ndim != 1:
            return None
    if zp is None:
        zp = g.constant(g.unique_name(f"{q.name}.zero_point"), np.zeros(scale.value.shape, q.spec.dtype.np))
    return q, scale, zp


def _requantized(node) -> Optional[tuple]:
    """(scale, zero point) of a QuantizeLinear to i8/u8 with constant per-tensor f32 parameters."""
    x, scale, zp = (list(node.inputs) + [None, None])[:3]
    if not _constant(scale) or scale.spec.dtype != dsl.f32 or scale.value.size != 1:
        return None
    if not _constant(zp) or zp.spec.dtype not in INT8 or node.op.output_dtype or node.op.block_size:
        return None
    return scale, zp


@fusion_rule(MatMul, QuantizeLinear, before_fold=True)
def qdq_matmul(g, mm, quant):
    """DQ(a), DQ(b) -> MatMul -> Q  =>  QLinearMatMul(a, .., b, .., y_scale, y_zero_point)."""
    out = _requantized(quant)
    a_t, b_t = mm.inputs[:2]
    if out is None or quant.inputs[0] is not mm.outputs[0] or b_t is None:
        return None
    a = _dequantized(g, a_t)
    b = _dequantized(g, b_t, axes=(None, 1) if b_t.spec.ndim == 2 else (None,))
    if a is None or b is None:
        return None
    return QLinearMatMul(), [*a, *b, *out]


@fusion_rule(Conv, QuantizeLinear, before_fold=True)
def qdq_conv(g, conv, quant):
    """DQ(x), DQ(w), [bias] -> Conv -> Q  =>  QLinearConv(x, .., w, .., y_scale, y_zero_point, B)."""
    if quant.inputs[0] is not conv.outputs[0]:
        return None
    inputs = _qlinear_conv_inputs(g, conv, quant)
    if inputs is None:
        return None
    params = {k: v for k, v in conv.op.params.items() if k in QLinearConv.param_table()}
    return QLinearConv(**params), inputs


def _qlinear_conv_inputs(g, conv, quant) -> Optional[list]:
    """QLinearConv's inputs for a float Conv between DequantizeLinear nodes and ``quant``, else None."""
    out = _requantized(quant)
    x_t, w_t, b_t = (list(conv.inputs) + [None, None])[:3]
    if out is None:
        return None
    x = _dequantized(g, x_t)
    w = _dequantized(g, w_t, axes=(None, 0))
    if x is None or w is None:
        return None
    inputs = [*x, *w, *out]
    if b_t is not None:
        bias = _int_bias(g, b_t, x[1].value, w[1].value, w_t.spec.shape[0])
        if bias is None:
            return None
        inputs.append(bias)
    return inputs


def qdq_conv_activation(g, act, quant):
    """DQ(x), DQ(w), [bias] -> Conv -> Relu/Clip -> Q  =>  FusedQLinearConv: the activation is a
    clamp of the requantized integers (ops/quant_conv_fused.py).  The Conv must be read by the
    activation alone; left without readers, it is dropped as dead."""
    src = act.inputs[0]
    conv = src.producer if src is not None and src.kind == "node" else None
    if conv is None or type(conv.op) is not Conv or quant.inputs[0] is not act.outputs[0]:
        return None
    if any(o is src for o in g.outputs) or len(g.consumers(src)) != 1:
        return None
    bounds = _activation(act)
    inputs = _qlinear_conv_inputs(g, conv, quant)
    if bounds is None or inputs is None:
        return None
    params = {k: v for k, v in conv.op.params.items() if k in QLinearConv.param_table()}
    name, values = bounds
    return FusedQLinearConv(activation=name, activation_params=values, **params), inputs


def _activation(node) -> Optional[tuple]:
    """("Relu", ()) or ("Clip", (min, max)) of a Relu / Clip node with constant bounds, else None."""
    if type(node.op) is Relu:
        return "Relu", ()
    if type(node.op) is ClipV6:
        return "Clip", (float(node.op.min), float(node.op.max))
    lo, hi = (list(node.inputs) + [None, None])[1:3]
    bounds = []
    for t, default in ((lo, -np.inf), (hi, np.inf)):
        if t is None:
            bounds.append(default)
        elif _constant(t) and t.value.size == 1:
            bounds.append(float(np.asarray(t.value).reshape(-1)[0]))
        else:
            return None
    return "Clip", tuple(max(min(b, 3.4e38), -3.4e38) for b in bounds)  # an open side: the type's bound


for _act in (Relu, Clip, ClipV6):
    fusion_rule(_act, QuantizeLinear, before_fold=True)(qdq_conv_activation)


def _int_bias(g, b, x_scale: np.ndarray, w_scale: np.ndarray, channels: Optional[int]):
    """The Conv bias as the i32 constant QLinearConv adds to its i32 sums (scale x_scale·w_scale)."""
    found = _dequantized_i32(b)
    if found is not None:
        return found
    value = _constant_value(b)
    if value is None or not b.spec.dtype.is_float or value.ndim != 1:
        return None
    scale = (x_scale.astype(np.float32).reshape(-1) * w_scale.astype(np.float32).reshape(-1)).astype(np.float64)
    if channels is None or np.any(scale <= 0):
        return None
    q = np.rint(value.astype(np.float64) / scale)
    info = np.iinfo(np.int32)
    q = np.clip(q, info.min, info.max).astype(np.int32)
    return g.constant(g.unique_name(f"{b.name}.quantized"), q)


def _constant_value(t) -> Optional[np.ndarray]:
    """The value of a constant, or of a ConstantOfShape of a constant shape (these rules run before
    folding, which would make it a constant), else None."""
    if _constant(t):
        return t.value
    node = t.producer if t.kind == "node" else None
    if node is None or type(node.op) is not ConstantOfShape or not _constant(node.inputs[0]):
        return None
    fill = np.zeros(1, np.float32) if node.op.value is None else np.asarray(node.op.value).reshape(1)
    return np.full(tuple(int(d) for d in node.inputs[0].value), fill[0], fill.dtype)


def _dequantized_i32(b):
    """The i32 constant of a DequantizeLinear(i32 constant, scale, zero point 0) bias, else None."""
    node = b.producer if b.kind == "node" else None
    if node is None or type(node.op) is not DequantizeLinear:
        return None
    q, _, zp = (list(node.inputs) + [None, None])[:3]
    if not _constant(q) or q.spec.dtype != dsl.i32 or q.value.ndim != 1:
        return None
    if zp is not None and (not _constant(zp) or np.any(zp.value != 0)):
        return None
    return q
