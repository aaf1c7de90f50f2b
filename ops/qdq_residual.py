"""QDQ rewrites of a residual block's nodes between quantized convolutions, so that they run on
the 8-bit integers (no float tensor and no Quantize/DequantizeLinear pair left between layers):

* DQ(x) -> BatchNormalization -> [Relu | Clip] -> Q  =>  QLinearBatchNormalization
  (ops/quant_batch_norm.py), a per-channel affine map of the integers.  ``quantize_static``
  leaves BN unfused when the model was not pre-processed; its parameters are often
  DequantizeLinear or ConstantOfShape outputs, so this rule runs after constant folding, when
  they are constants (the activations' Q/DQ pairs are not constant and survive folding).
* DQ(a), DQ(b) -> Add / Sum -> Q  =>  QLinearAdd; with a Relu or Clip before the Q,
  FusedQLinearAdd (ops/quant_add.py), the activation a clamp of the output integers.  These run
  before folding, as ops/qdq_fusion.py's rules do.

Every scale and zero point must be a per-tensor constant; the results equal the float QDQ path's
integers (the kernels compute its f32 steps in its order).  A DequantizeLinear left without
readers is dropped as dead.
"""
from __future__ import annotations

from typing import Optional

from dsl.opgraph.fusion import fusion_rule
from ops.binary import Sum, SumV6
from ops.elementwise import Add, Clip, ClipV6, Relu
from ops.norm import BatchNormalization, BatchNormalizationV6
from ops.qdq_data_movement import _output_quant, _part
from ops.qdq_fusion import _activation, _constant
from ops.quant import QuantizeLinear
from ops.quant_add import FusedQLinearAdd, QLinearAdd
from ops.quant_batch_norm import QLinearBatchNormalization

ADDS = (Add, Sum, SumV6)
BATCH_NORMS = (BatchNormalization, BatchNormalizationV6)


def _producer(t):
    return t.producer if t is not None and t.kind == "node" else None


def _single_reader(g, t) -> bool:
    """``t`` is read by one node and is not a graph output (it may be dropped once fused)."""
    return not any(o is t for o in g.outputs) and len(g.consumers(t)) == 1


def _batch_norm_inputs(g, bn, quant) -> Optional[list]:
    """QLinearBatchNormalization's inputs for DQ(x) -> ``bn`` -> ... -> ``quant``, else None."""
    out = _output_quant(quant)
    if out is None or type(bn.op) not in BATCH_NORMS or bn.op.training_mode or len(bn.inputs) != 5:
        return None
    x = _part(g, bn.inputs[0])
    params = bn.inputs[1:5]
    if x is None or not all(_constant(p) and p.spec.dtype.is_float for p in params):
        return None
    return [*x, *params, *out]


def qdq_batch_norm(g, bn, quant):
    """DQ(x) -> BatchNormalization -> Q  =>  QLinearBatchNormalization."""
    inputs = _batch_norm_inputs(g, bn, quant) if quant.inputs[0] is bn.outputs[0] else None
    if inputs is None:
        return None
    return QLinearBatchNormalization(epsilon=float(bn.op.epsilon)), inputs


def _through_activation(g, act, quant, kinds, inputs_of):
    """For node -> Relu/Clip (``act``) -> Q (``quant``), node one of ``kinds`` and read by the
    activation alone: (node, (activation name, params), the fused op's inputs), else None."""
    src = act.inputs[0]
    node = _producer(src)
    if node is None or type(node.op) not in kinds or quant.inputs[0] is not act.outputs[0]:
        return None
    bounds = _activation(act)
    inputs = inputs_of(g, node, quant) if _single_reader(g, src) else None
    if bounds is None or inputs is None:
        return None
    return node, bounds, inputs


def qdq_batch_norm_activation(g, act, quant):
    """DQ(x) -> BatchNormalization -> Relu/Clip -> Q  =>  QLinearBatchNormalization with the
    activation as a clamp of its output integers."""
    found = _through_activation(g, act, quant, BATCH_NORMS, _batch_norm_inputs)
    if found is None:
        return None
    bn, (name, values), inputs = found
    return QLinearBatchNormalization(epsilon=float(bn.op.epsilon), activation=name, activation_params=values), inputs


def _add_inputs(g, add, quant) -> Optional[list]:
    """QLinearAdd's inputs for DQ(a), DQ(b) -> ``add`` -> ... -> ``quant``, else None."""
    out = _output_quant(quant)
    if out is None or type(add.op) not in ADDS or len(add.inputs) != 2:
        return None
    a, b = (_part(g, t) for t in add.inputs)
    if a is None or b is None:
        return None
    return [*a, *b, *out]


def qdq_add(g, add, quant):
    """DQ(a), DQ(b) -> Add / Sum -> Q  =>  QLinearAdd."""
    inputs = _add_inputs(g, add, quant) if quant.inputs[0] is add.outputs[0] else None
    return None if inputs is None else (QLinearAdd(), inputs)


def qdq_add_activation(g, act, quant):
    """DQ(a), DQ(b) -> Add / Sum -> Relu/Clip -> Q  =>  FusedQLinearAdd."""
    found = _through_activation(g, act, quant, ADDS, _add_inputs)
    if found is None:
        return None
    _, (name, values), inputs = found
    return FusedQLinearAdd(activation=name, activation_params=values), inputs


for _bn in BATCH_NORMS:
    fusion_rule(_bn, QuantizeLinear)(qdq_batch_norm)
for _add in ADDS:
    fusion_rule(_add, QuantizeLinear, before_fold=True)(qdq_add)
for _act in (Relu, Clip, ClipV6):
    fusion_rule(_act, QuantizeLinear)(qdq_batch_norm_activation)
    fusion_rule(_act, QuantizeLinear, before_fold=True)(qdq_add_activation)
