"""QLinearConv with its Relu or Clip done in the requantization: what a QDQ graph's
DequantizeLinear -> Conv -> Relu/Clip -> QuantizeLinear becomes (ops/qdq_fusion.py).

Quantizing is monotone, so Q(relu(v)) = max(Q(v), Q(0)) and Q(clip(v, a, b)) =
clamp(Q(v), Q(a), Q(b)): the activation is a clamp of the output integers to
[rint(a / y_scale) + y_zero_point, rint(b / y_scale) + y_zero_point] (a Relu's lower bound is
the zero point), within the output type.  The convolution kernels apply that clamp in their
store, so the activation costs nothing.  ``FusedQLinearConv`` is a ``com.opdsl`` op (as
FusedConv is for float): QLinearConv's inputs and params plus ``activation`` ("Relu", "Clip")
and ``activation_params`` (Clip's (min, max), in float); an export writes QLinearConv and a
Clip of its integers (opset 12+).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl.onnx.attributes import node_attributes
from dsl.onnx.lower import names, register
from dsl.opgraph.spec import VerifyError
from ops.quant_conv import QLinearConv

ACTIVATION_PARAMS = {"Relu": 0, "Clip": 2}


@dsl.op("FusedQLinearConv", domain="com.opdsl", since=1)
class FusedQLinearConv(QLinearConv):
    """y = Q(activation(DQ(QLinearConv's sum))): QLinearConv whose output integers are clamped
    to where the activation's bounds quantize."""

    activation: str = "Relu"
    activation_params: Tuple[float, ...] = ()

    def verify(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None):
        super().verify(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B)
        check_activation("FusedQLinearConv", self.activation, self.activation_params)

    def clamp(self, y_scale, y_zp) -> Optional[Tuple[int, int]]:
        return quantized_bounds(self.activation, self.activation_params, y_scale, y_zp)


def check_activation(op_name: str, activation: str, params, optional: bool = False) -> None:
    """The activation attributes every fused quantized op takes (``optional``: "" for none), checked
    in one place so the ops accept and word them alike."""
    if not (optional and not activation) and activation not in ACTIVATION_PARAMS:
        accepted = ("'', " if optional else "") + ", ".join(repr(a) for a in ACTIVATION_PARAMS)
        raise VerifyError(f"{op_name} activation {activation!r}; accepted: {accepted}")
    wanted = ACTIVATION_PARAMS.get(activation, 0)
    if len(params) != wanted:
        raise VerifyError(f"{op_name} activation {activation!r} takes {wanted} activation_params, got {list(params)}")
    if wanted and not params[0] <= params[1]:
        raise VerifyError(f"{op_name} Clip bounds {list(params)} need min <= max")


def quantized_bounds(activation: str, params, y_scale, y_zp) -> Tuple[int, int]:
    """(lo, hi) output integers of ``activation`` for an output quantized with (y_scale, y_zp), within
    its type's range; computed in f32 as QuantizeLinear rounds (half to even)."""
    zp = np.asarray(y_zp).reshape(-1)
    info = np.iinfo(zp.dtype)
    z = int(zp[0])
    if activation == "Relu":
        return max(z, info.min), info.max
    s = np.float32(np.asarray(y_scale).reshape(-1)[0])
    with np.errstate(over="ignore"):  # an open bound (±3.4e38) is past the type's range anyway
        lo, hi = (int(np.clip(np.rint(np.float32(v) / s), -1e9, 1e9)) + z for v in params)
    return min(max(lo, info.min), info.max), max(min(hi, info.max), info.min)


@register("com.opdsl", "FusedQLinearConv", everywhere=True)
def _fused_qlinear_conv(node, opset, emit) -> bool:
    """QLinearConv, then a Clip of its integers to the activation's quantized bounds (Clip takes
    8-bit integers from opset 12)."""
    op = node.op
    if opset < 12:
        return False
    ins, specs, (y,) = names(node)
    consts = [getattr(s, "value", None) for s in specs[6:8]]
    if any(v is None for v in consts):
        return False  # the bounds need the output's scale and zero point
    lo, hi = quantized_bounds(op.activation, op.activation_params, *consts)
    raw = emit.temp("qconv")
    emit("QLinearConv", ins, [raw])
    emit.nodes[-1].attribute.extend(a for a in node_attributes(op) if a.name in QLinearConv.param_table())
    dt = np.asarray(consts[1]).dtype
    emit("Clip", [raw, emit.constant(np.array(lo, dt), "min"), emit.constant(np.array(hi, dt), "max")], [y])
    return True
