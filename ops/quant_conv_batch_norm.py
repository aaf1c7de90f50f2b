"""QLinearConvBatchNormalization: a QLinearConv whose integers only a QLinearBatchNormalization
reads, as one node (what resnet50 quantized by ``quantize_static`` without pre-processing has 53
times: DQ -> Conv -> Q -> DQ -> BatchNormalization -> [Relu] -> Q; ops/qdq_residual.py's pass).

The convolution's requantized integers q (in f32, before they would be stored) go through the
batch normalization's per-channel map in the convolution's store,

    y = clamp(rint(((q - y_zp)·y_scale·a[m] + b[m]) / z_scale) + z_zp, lo, hi)

(ops/quant_batch_norm.py's f32 steps, in its order: both roundings kept), so y equals the two
nodes' integers and the image of q is neither written nor read again.  The direct int8 kernel
(ops/conv_int8_direct.py: stride-1 and 1×1 convolutions, the strided stems through
space-to-depth) does it in its epilogue; any other convolution (im2col GEMM, the portable
kernel) writes q to a scratch buffer that QLinearBatchNormalization's kernel then maps, the two
launches declared as the node's plan.  A ``com.opdsl`` op: inputs QLinearConv's nine (B
required: the pass supplies zeros) then the batch normalization's scale, B, mean, var and its
output's Z_scale, Z_zero_point; ``activation`` / ``activation_params`` clamp q (a
FusedQLinearConv's), ``bn_activation`` / ``bn_activation_params`` clamp y.  An export writes
QLinearConv [+ Clip] and DequantizeLinear -> BatchNormalization -> [Relu | Clip] ->
QuantizeLinear.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl.onnx.attributes import node_attributes
from dsl.onnx.lower import names, register
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.conv_int8 import STRIDED_MAX_CHANNELS, conv_int8
from ops.conv_int8_direct import SecondRequantization, conv_int8_direct, direct_conv_ok, launched
from ops.conv_int8_strided import conv_int8_strided, strided_geometry_ok
from ops.gemm_int8 import qgemm_packed
from ops.quant_batch_norm import channel_affine, emit_dequantized_batch_norm, requantize_channels
from ops.quant_conv import QLinearConv
from ops.quant_conv_fused import check_activation, quantized_bounds
from ops.quant_conv_plan import packed_conv_plan

BN_PARAMS = 4  # scale, B, mean, var


def conv_batch_norm_plan(op, impl, inputs, outputs, backend):
    """Every launch of run() declared (the scratch image of q included), when every input but x
    is a constant; else None (run() at every run)."""
    return packed_conv_plan(op, impl, inputs, outputs, backend, range(1, len(inputs)))


@dsl.op("QLinearConvBatchNormalization", domain="com.opdsl", since=1)
class QLinearConvBatchNormalization(QLinearConv):
    """z = QLinearBatchNormalization(QLinearConv(x, ...)): the convolution's integers mapped per
    output channel in its store (module docstring)."""

    activation: str = ""
    activation_params: Tuple[float, ...] = ()
    epsilon: float = 1e-5
    bn_activation: str = ""
    bn_activation_params: Tuple[float, ...] = ()
    plan = conv_batch_norm_plan

    def select(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
               scale, bn_b, mean, var, z_scale, z_zero_point, backend=None):
        return self._select(x, w, backend, x_scale, w_scale, y_scale)

    def verify(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
               scale, bn_b, mean, var, z_scale, z_zero_point):
        super().verify(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B)
        name = "QLinearConvBatchNormalization"
        check_activation(name, self.activation, self.activation_params, optional=True)
        check_activation(f"{name} bn_activation:", self.bn_activation, self.bn_activation_params, optional=True)
        for label, s in (("y_scale", y_scale), ("y_zero_point", y_zero_point), ("Z_scale", z_scale),
                         ("Z_zero_point", z_zero_point)):
            if s.size not in (None, 1):
                raise VerifyError(f"{name} {label} must be a scalar (per tensor), got {s}")
        if z_scale.dtype != dsl.f32 or z_zero_point.dtype not in (dsl.i8, dsl.u8):
            raise VerifyError(f"{name} needs an f32 Z_scale and an i8/u8 Z_zero_point, got {z_scale} and {z_zero_point}")
        m = w.shape[0]
        for label, p in (("scale", scale), ("B", bn_b), ("mean", mean), ("var", var)):
            if not p.dtype.is_float or p.ndim != 1 or (m is not None and p.shape[0] not in (None, m)):
                raise VerifyError(f"{name} batch normalization {label} must be a float ({m},) tensor, got {p}")

    def infer(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
              scale, bn_b, mean, var, z_scale, z_zero_point):
        return TensorSpec(self._out_shape(x, w), z_zero_point.dtype)

    def clamp(self, y_scale, y_zp) -> Optional[Tuple[int, int]]:
        return quantized_bounds(self.activation, self.activation_params, y_scale, y_zp) if self.activation else None

    def second_stage(self, y_scale, scale, bn_b, mean, var, z_scale, z_zp, dtype) -> SecondRequantization:
        """The batch normalization's map of q as the direct kernel's store takes it."""
        a, b = channel_affine(scale, bn_b, mean, var, self.epsilon)
        info = np.iinfo(dtype)
        lo, hi = float(info.min), float(info.max)
        if self.bn_activation:
            lo, hi = (float(v) for v in quantized_bounds(self.bn_activation, self.bn_activation_params, z_scale, z_zp))
        return SecondRequantization(np.ascontiguousarray(np.stack([a, b]), np.float32), _scalar(y_scale),
                                    _scalar(z_scale), _scalar(z_zp), lo, hi)

    def run(self, impl, inputs, outputs, backend, launch=None):
        """``launch``: a recorder of every launch (the node's plan, conv_batch_norm_plan)."""
        x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = inputs[:9]
        z = outputs[0]
        post = self.second_stage(y_scale, *inputs[9:], z.dtype)
        clamp = self.clamp(y_scale, y_zp)
        if impl == qgemm_packed:
            geom, mult, b32, zy = self._packed_args(x, w, x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp, z, True)
            lo, hi = clamp or (None, None)
            if direct_conv_ok(w, w_zp, geom):
                conv_int8_direct(x, w, z, x_zp, geom, mult, b32, zy, lo, hi, backend=backend, w_zp=w_zp, launch=launch,
                                 post=post, arithmetic=self.int8_arithmetic)
                return
            if strided_geometry_ok(geom) and x.shape[1] <= STRIDED_MAX_CHANNELS:
                conv_int8_strided(x, w, z, x_zp, w_zp, geom, mult, b32, zy, lo, hi, backend=backend, launch=launch,
                                  post=post, arithmetic=self.int8_arithmetic)
                return
        q = np.empty(z.shape, np.asarray(y_zp).dtype)  # the convolution's integers: a scratch buffer of the plan
        if impl == qgemm_packed:
            conv_int8(x, w, q, x_zp, w_zp, geom, mult, b32, zy, backend, impl, clamp=clamp, launch=launch)
        else:
            self._launch(impl, x, w, x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp, q, True, backend,
                         clamp=clamp, launch=launch)
        rows = z.shape[0] * z.shape[1]
        a, b = post.table
        launched(requantize_channels, launch)(q.reshape(rows, -1), a, b, z.reshape(rows, -1), float(_scalar(y_zp)),
                                              post.s1, post.s2, post.z2, post.lo, post.hi, backend=backend)


def _scalar(v) -> float:
    return float(np.asarray(v).reshape(-1)[0])


@register("com.opdsl", "QLinearConvBatchNormalization", everywhere=True)
def _qlinear_conv_batch_norm(node, opset, emit) -> bool:
    """QLinearConv [+ Clip of its integers], then DequantizeLinear -> BatchNormalization ->
    [Relu | Clip] -> QuantizeLinear (opset 13+)."""
    op = node.op
    if opset < 13:
        return False
    ins, specs, (z,) = names(node)
    q = emit.temp("qconv")
    emit("QLinearConv", ins[:9], [q])
    emit.nodes[-1].attribute.extend(a for a in node_attributes(op) if a.name in QLinearConv.param_table())
    if op.activation:
        consts = [getattr(s, "value", None) for s in specs[6:8]]
        if any(v is None for v in consts):
            return False
        lo, hi = quantized_bounds(op.activation, op.activation_params, *consts)
        dt = np.asarray(consts[1]).dtype
        clamped = emit.temp("clamped")
        emit("Clip", [q, emit.constant(np.array(lo, dt), "min"), emit.constant(np.array(hi, dt), "max")], [clamped])
        q = clamped
    emit_dequantized_batch_norm(emit, [q, *ins[6:8], *ins[9:15]], op.epsilon, op.bn_activation,
                                op.bn_activation_params, z)
    return True
