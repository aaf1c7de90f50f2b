"""QDQ rewrites of the nodes between quantized layers, so that a QDQ graph stays in 8-bit integers
from one convolution to the next (no DequantizeLinear / QuantizeLinear pair left between them).

* DQ(q, s, z) -> MaxPool -> Q(s, z): MaxPool of q itself.  Quantizing is monotone and exact on
  dequantized values when the scale and zero point match, so max commutes with it (padding
  never wins a window, on either side).  With another output scale the float path stays.
* DQ(q, s, z) -> Dropout / Identity -> Q(s, z): Identity of q (inference Dropout passes through).
* DQ(q_i, s_i, z_i)... -> Concat -> Q(s, z): Concat of the q_i when every part has (s, z), which
  the producers then write in place (dsl/opgraph/concat_inplace.py); else QLinearConcat
  (ops/quant_concat.py), each part requantized as DequantizeLinear -> QuantizeLinear would.
  A part on another scale that a QLinearConv makes for this Concat alone (squeezenet's fire
  modules: the 1x1 expand on a finer scale than the 3x3 one) is retargeted first: the
  convolution requantizes straight to (s, z), its integers clamped to where its own range lands
  on (s, z), so the Concat is a plain one written in place.  Skipping the intermediate rounding
  moves a value by at most one unit of s when s_i <= s (a coarser part would move more, and
  keeps QLinearConcat).

The rules run before constant folding, as ops/qdq_fusion.py's do; a DequantizeLinear left
without readers is dropped as dead.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from dsl.opgraph.fusion import fusion_rule
from dsl.opgraph.op import check_and_infer
from dsl.opgraph.spec import VerifyError
from ops.generate import Dropout, DropoutV1, DropoutV10
from ops.pool import MaxPool, MaxPoolV1, MaxPoolV8, MaxPoolV10, MaxPoolV12
from ops.qdq_fusion import INT8, _constant, _dequantized
from ops.quant import QuantizeLinear
from ops.quant_conv import QLinearConv
from ops.quant_conv_fused import FusedQLinearConv
from ops.quant_concat import QLinearConcat
from ops.shape import Identity
from ops.slicing import Concat, ConcatV1


def _output_quant(quant) -> Optional[tuple]:
    """(scale constant, zero point constant) of a per-tensor QuantizeLinear to i8/u8, else None."""
    x, scale, zp = (list(quant.inputs) + [None, None])[:3]
    if quant.op.output_dtype or quant.op.block_size or not _constant(scale) or scale.value.size != 1:
        return None
    if not _constant(zp) or zp.spec.dtype not in INT8 or zp.value.size != 1:
        return None
    return scale, zp


def _part(g, t) -> Optional[tuple]:
    """(q, scale, zero point) of a per-tensor DequantizeLinear of i8/u8 data, else None."""
    found = _dequantized(g, t)
    if found is None or found[1].value.size != 1 or found[2].value.size != 1:
        return None
    return found


def _same(part, scale, zp) -> bool:
    """The part is quantized with (scale, zp) exactly: the same f32 scale, zero point and dtype."""
    q, s, z = part
    return (q.spec.dtype == zp.spec.dtype and np.float32(s.value.reshape(-1)[0]) == np.float32(scale.value.reshape(-1)[0])
            and int(z.value.reshape(-1)[0]) == int(zp.value.reshape(-1)[0]))


def qdq_max_pool(g, pool, quant):
    """DQ(q, s, z) -> MaxPool -> Q(s, z)  =>  MaxPool(q) (the opset-12+ MaxPool, which takes 8-bit data)."""
    out = _output_quant(quant)
    part = _part(g, pool.inputs[0]) if out is not None else None
    if part is None or not _same(part, *out):
        return None
    return MaxPool(**pool.op.params), [part[0]]


def qdq_identity(g, node, quant):
    """DQ(q, s, z) -> Dropout / Identity -> Q(s, z)  =>  Identity(q)."""
    out = _output_quant(quant)
    part = _part(g, node.inputs[0]) if out is not None else None
    if part is None or not _same(part, *out):
        return None
    return Identity(), [part[0]]


def qdq_concat(g, concat, quant):
    """DQ(q_i, s_i, z_i)... -> Concat -> Q(s, z)  =>  Concat(q_i...) when every (s_i, z_i) is (s, z),
    else QLinearConcat(s, z, q_0, s_0, z_0, ...)."""
    out = _output_quant(quant)
    if out is None:
        return None
    parts = [_part(g, t) for t in concat.inputs]
    if any(p is None or p[0].spec.dtype != out[1].spec.dtype for p in parts):
        return None
    retargets = [None if _same(p, *out) else _retarget(g, p, t, concat, *out) for p, t in zip(parts, concat.inputs)]
    if all(_same(p, *out) or r is not None for p, r in zip(parts, retargets)):
        op = Concat(axis=concat.op.axis)
        try:  # the retargets change the graph: only for a Concat that will replace the node
            (spec,) = check_and_infer(op, [p[0].spec for p in parts], where=f"fusing {concat.name!r}")
        except VerifyError:
            return None
        if spec.shape != quant.outputs[0].spec.shape or spec.dtype != quant.outputs[0].spec.dtype:
            return None
        for r in retargets:
            if r is not None:
                r()
        return op, [p[0] for p in parts]
    return QLinearConcat(axis=concat.op.axis), [*out, *(t for p in parts for t in p)]


def _retarget(g, part, dq_out, concat, scale, zp) -> Optional[Callable[[], None]]:
    """A function that makes the QLinearConv producing ``part`` requantize to (scale, zp), or None
    when it cannot: another producer, another reader of its integers or of their dequantized
    values, a coarser scale than the Concat's, or a node that would not verify."""
    q, s, z = part
    node = q.producer if q.kind == "node" else None
    if node is None or type(node.op) not in (QLinearConv, FusedQLinearConv) or len(node.inputs) < 8:
        return None
    if any(o is q or o is dq_out for o in g.outputs) or len(g.consumers(q)) != 1 or g.consumers(dq_out) != [concat]:
        return None
    if np.float32(s.value.reshape(-1)[0]) > np.float32(scale.value.reshape(-1)[0]):
        return None
    info = np.iinfo(q.spec.dtype.np)
    lo, hi = node.op.clamp(s.value, z.value) or (info.min, info.max)
    zf, sf = np.float32(z.value.reshape(-1)[0]), np.float32(s.value.reshape(-1)[0])
    bounds = tuple(float((np.float32(v) - zf) * sf) for v in (lo, hi))  # the part's range, dequantized in f32
    params = {k: v for k, v in node.op.params.items() if k in QLinearConv.param_table()}
    op = FusedQLinearConv(activation="Clip", activation_params=bounds, **params)
    inputs = list(node.inputs[:6]) + [scale, zp] + list(node.inputs[8:])
    try:
        (spec,) = check_and_infer(op, [t.spec for t in inputs], where=f"retargeting {node.name!r} to {concat.name!r}")
    except VerifyError:
        return None

    def apply():
        node.op, node.inputs = op, inputs
        q.spec = spec
    return apply


for _pool in (MaxPoolV1, MaxPoolV8, MaxPoolV10, MaxPoolV12, MaxPool):
    fusion_rule(_pool, QuantizeLinear, before_fold=True)(qdq_max_pool)
for _pass in (Dropout, DropoutV1, DropoutV10, Identity):
    fusion_rule(_pass, QuantizeLinear, before_fold=True)(qdq_identity)
for _concat in (Concat, ConcatV1):
    fusion_rule(_concat, QuantizeLinear, before_fold=True)(qdq_concat)
