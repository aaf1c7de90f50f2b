"""QLinearBatchNormalization: an inference BatchNormalization on 8-bit data, what a QDQ graph's
DequantizeLinear -> BatchNormalization -> QuantizeLinear becomes (ops/qdq_residual.py).

``onnxruntime.quantization.quantize_static`` leaves BatchNormalization unfused when the model
was not pre-processed (resnet50's 53 BNs sit between a QuantizeLinear / DequantizeLinear pair on
each side), and onnxruntime then runs them in float.  Here each becomes a per-channel affine
map of the integers, u8/i8 in and u8/i8 out, one pass over bytes instead of three over floats:

    y = saturate(rint(((f32(x) - x_zp) · x_scale · a[c] + b[c]) / y_scale) + y_zp)

with a = scale · (1 / sqrt(var + ε)) and b = B - mean · a computed in f32 in that order, which
is how onnxruntime's CPU BatchNormalization computes (checked bit for bit against it), and no
fused multiply-add, so the integers equal the float DQ -> BN -> Q path's.  Where a channel has
128 elements or more per image, the map is a table instead: 256 output integers per channel,
computed once per model by numpy with the same f32 steps, and the kernel one byte load per
element (0.60-0.67 of the arithmetic's time from 64 × 112×112 down to 1024 × 14×14, tables
warm); 7×7 channels (up to 2048 of them) keep the arithmetic, whose two scalars per channel do
not outweigh the data when the 256-byte rows come cold.  ``activation``
("Relu" or "Clip" with ``activation_params``) clamps the output integers as
ops/quant_conv_fused.py explains.  A ``com.opdsl`` op; an export writes the
DequantizeLinear -> BatchNormalization -> QuantizeLinear it came from.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

import dsl
from dsl import In, Out, f32, i64
from dsl.onnx.lower import names, register
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.quant_conv_fused import check_activation, quantized_bounds

X = dsl.TypeVar("X")
Y = dsl.TypeVar("Y")

INT8 = (dsl.i8, dsl.u8)
LANES = 16  # f32 lanes per step: two AVX2 registers
TABLE_MIN_INNER = 128  # elements per channel and image from which the table kernel runs


@dsl.kernel
def requantize_channels(x: In[X, 2], a: In[f32, 1], b: In[f32, 1], y: Out[Y, 2], x_zp: f32, x_scale: f32,
                        y_scale: f32, y_zp: f32, qmin: f32, qmax: f32):
    """x, y viewed as (N·C, inner): row r is channel r % C.  Each work item walks its range row
    stretch by row stretch, the channel's a and b loaded once, 16 lanes at a time (a scalar loop
    narrowing f32 to 8 bits does not vectorize by itself)."""
    inner = x.shape[1]
    channels = a.shape[0]
    lo, hi = dsl.split(x.size)
    i = lo
    while i < hi:
        r = i // inner
        end = i + min(inner - (i - r * inner), hi - i)
        c = r % channels
        ac = a[c]
        bc = b[c]
        while i + LANES <= end:
            lanes = (dsl.f32(x.vload(i, LANES)) - x_zp) * x_scale * ac + bc
            y.vstore(i, dsl.clamp(dsl.rint(lanes / y_scale) + y_zp, qmin, qmax))
            i += LANES
        for j in range(i, end):
            v = (f32(x.flat[j]) - x_zp) * x_scale * ac + bc
            y.flat[j] = dsl.clamp(dsl.rint(v / y_scale) + y_zp, qmin, qmax)
        i = end


@dsl.kernel
def lookup_channels(x: In[X, 2], table: In[Y, 1], y: Out[Y, 2], offset: i64):
    """y = table[256·c + x - min(X)] with x, y viewed as (N·C, inner), row r being channel r % C:
    the channel's whole map tabulated once per model (a byte load per element, no arithmetic)."""
    inner = x.shape[1]
    channels = table.shape[0] // 256
    lo, hi = dsl.split(x.size)
    i = lo
    while i < hi:
        r = i // inner
        end = i + min(inner - (i - r * inner), hi - i)
        base = (r % channels) * 256 + offset
        for j in range(i, end):
            y.flat[j] = table[base + i64(x.flat[j])]
        i = end


def requantization_table(x_dtype, x_scale, x_zp, a, b, y_scale, y_zp, lo: float, hi: float, y_dtype) -> np.ndarray:
    """(C·256,) the output integer of every input integer of every channel, computed with numpy's
    f32 steps in the kernels' order (so every backend gives onnxruntime's float path's integers)."""
    f = np.float32
    info = np.iinfo(x_dtype)
    q = np.arange(info.min, info.max + 1, dtype=np.int64).astype(f)
    deq = (q - f(_scalar(x_zp))) * f(_scalar(x_scale))
    v = deq[None, :] * np.asarray(a, f)[:, None] + np.asarray(b, f)[:, None]
    out = np.clip(np.rint(v / f(_scalar(y_scale))) + f(_scalar(y_zp)), f(lo), f(hi))
    return out.astype(y_dtype).reshape(-1)


def channel_affine(scale, bias, mean, var, epsilon: float) -> Tuple[np.ndarray, np.ndarray]:
    """(a, b) of y = x·a + b per channel, in f32 in onnxruntime's order of operations."""
    f = np.float32
    a = (f(1) / np.sqrt(np.asarray(var, f) + f(epsilon))).astype(f) * np.asarray(scale, f)
    return a.astype(f), (np.asarray(bias, f) - np.asarray(mean, f) * a).astype(f)


def _scalar(v) -> float:
    return float(np.asarray(v).reshape(-1)[0])


@dsl.op("QLinearBatchNormalization", domain="com.opdsl", since=1)
class QLinearBatchNormalization(dsl.Op):
    """Inputs X, X_scale, X_zero_point, scale, B, mean, var, Y_scale, Y_zero_point: the inference
    BatchNormalization of DQ(X), quantized to (Y_scale, Y_zero_point)."""

    epsilon: float = 1e-5
    activation: str = ""
    activation_params: Tuple[float, ...] = ()
    kernels = {"default": requantize_channels, "table": lookup_channels}
    plan = dsl.recorded_plan_when_constant(1, 2, 3, 4, 5, 6, 7, 8)  # a, b and the bounds from constants

    def verify(self, x, x_scale, x_zero_point, scale, b, mean, var, y_scale, y_zero_point):
        if x.dtype not in INT8 or x_zero_point.dtype != x.dtype:
            raise VerifyError(f"QLinearBatchNormalization X must be i8 or u8 with a zero point of its dtype, "
                              f"got {x} and {x_zero_point}")
        if y_zero_point.dtype not in INT8:
            raise VerifyError(f"QLinearBatchNormalization Y_zero_point must be i8 or u8, got {y_zero_point}")
        for name, s in (("X_scale", x_scale), ("Y_scale", y_scale)):
            if s.dtype != dsl.f32 or s.size not in (None, 1):
                raise VerifyError(f"QLinearBatchNormalization {name} must be an f32 scalar (per tensor), got {s}")
        for name, z in (("X_zero_point", x_zero_point), ("Y_zero_point", y_zero_point)):
            if z.size not in (None, 1):
                raise VerifyError(f"QLinearBatchNormalization {name} must be a scalar (per tensor), got {z}")
        if x.ndim < 2:
            raise VerifyError(f"QLinearBatchNormalization X must be (N, C, ...), got {x}")
        c = x.shape[1]
        for name, p in (("scale", scale), ("B", b), ("mean", mean), ("var", var)):
            if not p.dtype.is_float or p.ndim != 1 or (c is not None and p.shape[0] is not None and p.shape[0] != c):
                raise VerifyError(f"QLinearBatchNormalization {name} must be a float (C,) = ({c},) tensor, got {p}")
        check_activation("QLinearBatchNormalization", self.activation, self.activation_params, optional=True)

    def infer(self, x, x_scale, x_zero_point, scale, b, mean, var, y_scale, y_zero_point):
        return TensorSpec(x.shape, y_zero_point.dtype)

    def select(self, x, *params, backend=None):
        """The table where each channel has TABLE_MIN_INNER elements or more per image (its 256
        entries are read often); the arithmetic where channels are small (2048 × 7×7: the tables
        would outweigh the data)."""
        inner = x.shape[2:]
        if any(d is None for d in inner) or int(np.prod(inner, dtype=np.int64)) < TABLE_MIN_INNER:
            return "default"
        return "table"

    def run(self, impl, inputs, outputs, backend):
        x, x_scale, x_zp, scale, bias, mean, var, y_scale, y_zp = inputs
        y = outputs[0]
        a, b = channel_affine(scale, bias, mean, var, self.epsilon)
        info = np.iinfo(y.dtype)
        lo, hi = float(info.min), float(info.max)
        if self.activation:
            lo, hi = (float(v) for v in quantized_bounds(self.activation, self.activation_params, y_scale, y_zp))
        rows = x.shape[0] * x.shape[1]
        if impl == lookup_channels:
            table = requantization_table(x.dtype, x_scale, x_zp, a, b, y_scale, y_zp, lo, hi, y.dtype)
            impl(x.reshape(rows, -1), table, y.reshape(rows, -1), -int(np.iinfo(x.dtype).min), backend=backend)
            return
        impl(x.reshape(rows, -1), a, b, y.reshape(rows, -1), float(_scalar(x_zp)), _scalar(x_scale),
             _scalar(y_scale), float(_scalar(y_zp)), lo, hi, backend=backend)


@register("com.opdsl", "QLinearBatchNormalization", everywhere=True)
def _qlinear_batch_norm(node, opset, emit) -> bool:
    """DequantizeLinear -> BatchNormalization -> [Relu | Clip] -> QuantizeLinear (opset 13+ for
    a Clip of floats with tensor bounds)."""
    op = node.op
    if opset < 13:
        return False
    ins, _, (y,) = names(node)
    emit_dequantized_batch_norm(emit, ins, op.epsilon, op.activation, op.activation_params, y)
    return True


def emit_dequantized_batch_norm(emit, ins, epsilon: float, activation: str, params, y: str) -> None:
    """DequantizeLinear -> BatchNormalization -> [Relu | Clip] -> QuantizeLinear into ``y``, from
    ``ins`` = (x, x_scale, x_zero_point, scale, bias, mean, var, y_scale, y_zero_point): the export
    of QLinearBatchNormalization and of the BN half of QLinearConvBatchNormalization."""
    x, xs, xz, scale, b, mean, var, ys, yz = ins
    deq, normed = emit.temp("dequantized"), emit.temp("normalized")
    emit("DequantizeLinear", [x, xs, xz], [deq])
    emit("BatchNormalization", [deq, scale, b, mean, var], [normed], epsilon=float(epsilon))
    if activation == "Relu":
        act = emit.temp("activated")
        emit("Relu", [normed], [act])
        normed = act
    elif activation == "Clip":
        act = emit.temp("activated")
        lo, hi = (emit.constant(np.array(v, np.float32), n) for v, n in zip(params, ("min", "max")))
        emit("Clip", [normed, lo, hi], [act])
        normed = act
    emit("QuantizeLinear", [normed, ys, yz], [y])
