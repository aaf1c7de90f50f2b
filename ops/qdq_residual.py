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

* QLinearConv / FusedQLinearConv -> QLinearBatchNormalization, the convolution's integers read by
  the batch normalization alone  =>  QLinearConvBatchNormalization (ops/quant_conv_batch_norm.py),
  the map done in the convolution's store.  A whole-graph pass after the pairwise rules (the
  QLinearBatchNormalization is made by one of them, and the DequantizeLinear it replaced still
  reads the convolution's output until dead nodes are dropped).

Every scale and zero point must be a per-tensor constant; the results equal the float QDQ path's
integers (the kernels compute its f32 steps in its order).  A DequantizeLinear left without
readers is dropped as dead.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from dsl.opgraph.fusion import fusion_pass, fusion_rule
from dsl.opgraph.op import check_and_infer
from dsl.opgraph.spec import VerifyError
from ops.binary import Sum, SumV6
from ops.elementwise import Add, Clip, ClipV6, Relu
from ops.norm import BatchNormalization, BatchNormalizationV6
from ops.qdq_data_movement import _output_quant, _part
from ops.qdq_fusion import _activation, _constant
from ops.quant import QuantizeLinear
from ops.quant_add import FusedQLinearAdd, QLinearAdd
from ops.quant_batch_norm import QLinearBatchNormalization
from ops.quant_conv import QLinearConv
from ops.quant_conv_batch_norm import QLinearConvBatchNormalization
from ops.quant_conv_fused import FusedQLinearConv

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


CONVS = (QLinearConv, FusedQLinearConv)


def _conv_batch_norm(conv, bn) -> Optional[QLinearConvBatchNormalization]:
    """The fused op of ``conv`` -> ``bn``, or None when the pair does not fuse."""
    if type(conv.op) not in CONVS or type(bn.op) is not QLinearBatchNormalization:
        return None
    params = {k: v for k, v in conv.op.params.items() if k in QLinearConv.param_table()}
    if isinstance(conv.op, FusedQLinearConv):
        params.update(activation=conv.op.activation, activation_params=tuple(conv.op.activation_params))
    return QLinearConvBatchNormalization(**params, epsilon=float(bn.op.epsilon), bn_activation=bn.op.activation,
                                         bn_activation_params=tuple(bn.op.activation_params))


def _same_quantization(ours, theirs) -> bool:
    """The convolution's output (scale, zero point) is the one the batch normalization reads."""
    values = [None if t is None else t.spec.value for t in (*ours, *theirs)]
    if any(v is None for v in values):
        return False
    (s1, z1, s2, z2) = (np.asarray(v) for v in values)
    return s1.dtype == s2.dtype and z1.dtype == z2.dtype and np.array_equal(s1.reshape(-1), s2.reshape(-1)) \
        and np.array_equal(z1.reshape(-1), z2.reshape(-1))


def _live_readers(g) -> dict:
    """``id(tensor) -> the nodes reading it`` among the nodes some graph output depends on (the
    pairwise rules leave the nodes they replaced, DequantizeLinear and BatchNormalization, until
    dead nodes are dropped after the passes)."""
    live = {id(t) for t in g.outputs}
    found: dict = {}
    for n in reversed(g.nodes):
        if any(id(o) in live for o in n.outputs):
            for t in n.inputs:
                if t is not None:
                    live.add(id(t))
                    found.setdefault(id(t), []).append(n)
    return found


@fusion_pass
def fuse_conv_batch_norm(g) -> int:
    """QLinearConv -> QLinearBatchNormalization => QLinearConvBatchNormalization (module docstring)."""
    readers = _live_readers(g)
    outputs = {id(t) for t in g.outputs}
    merged = 0
    for bn in list(g.nodes):
        src = bn.inputs[0] if type(bn.op) is QLinearBatchNormalization else None
        conv = _producer(src)
        if conv is None or conv.outputs[0] is not src or len(conv.outputs) != 1 or id(src) in outputs:
            continue
        if [id(n) for n in readers.get(id(src), ())] != [id(bn)]:
            continue
        op = _conv_batch_norm(conv, bn)
        if op is None or not _same_quantization(conv.inputs[6:8], bn.inputs[1:3]):
            continue
        bias = conv.inputs[8] if len(conv.inputs) > 8 and conv.inputs[8] is not None else \
            g.constant(None, np.zeros(conv.inputs[3].spec.shape[0], np.int32))
        inputs = list(conv.inputs[:8]) + [bias] + list(bn.inputs[3:9])
        try:
            (spec,) = check_and_infer(op, [t.spec for t in inputs], where=f"fusing {conv.name!r} into {bn.name!r}")
        except VerifyError:
            continue
        z = bn.outputs[0]
        if spec.shape != z.spec.shape or spec.dtype != z.spec.dtype:
            continue
        conv.op, conv.inputs, conv.outputs = op, inputs, [z]
        z.producer, z.index = conv, 0
        g.tensors.pop(src.name, None)
        g.nodes = [conv if n is bn else n for n in g.nodes if n is not conv]
        merged += 1
    return merged
