"""QLinearAdd (com.microsoft, as ONNX Runtime's contrib op) and FusedQLinearAdd (com.opdsl: with a
Relu or Clip): the sum of two 8-bit tensors, requantized to the output's scale and zero point.
What a QDQ graph's residual DequantizeLinear(a), DequantizeLinear(b) -> Add / Sum -> [Relu] ->
QuantizeLinear becomes (ops/qdq_residual.py).

Inputs A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point (zero points
optional, 0 when absent; scales and zero points per tensor).  Each element is

    c = saturate(rint(((f32(a) - a_zp) · a_scale + (f32(b) - b_zp) · b_scale) / c_scale) + c_zp)

the float DequantizeLinear -> Add -> QuantizeLinear computed in f32 step by step as those ops
compute it, so a QDQ graph gives the integers its float path gives (onnxruntime's own
QLinearAdd kernel multiplies by scale ratios instead and may land one unit away on a .5).  A
FusedQLinearAdd's activation clamps the output integers (Relu: at the zero point), as
ops/quant_conv_fused.py explains; an export writes QLinearAdd and a Clip of its integers.
A and B of one shape run one vectorized pass; other shapes broadcast (numpy rules) through a
materialized copy and are not planned.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, f32
from dsl.onnx.attributes import node_attributes
from dsl.onnx.lower import names, register
from dsl.opgraph.recorded_plan import recorded_plan_when_constant
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.quant_conv_fused import check_activation, quantized_bounds

A = dsl.TypeVar("A")
B = dsl.TypeVar("B")
C = dsl.TypeVar("C")

INT8 = (dsl.i8, dsl.u8)
LANES = 16  # f32 lanes per step: two AVX2 registers


@dsl.kernel
def qlinear_add_kernel(a: In[A], b: In[B], c: Out[C], a_zp: f32, a_scale: f32, b_zp: f32, b_scale: f32,
                       c_scale: f32, c_zp: f32, qmin: f32, qmax: f32):
    """c = clamp(rint((dequant(a) + dequant(b)) / c_scale) + c_zp, qmin, qmax), elementwise, 16
    lanes at a time (a scalar loop narrowing f32 to 8 bits does not vectorize by itself)."""
    lo, hi = dsl.split(c.size)
    i = lo
    while i + LANES <= hi:
        lanes = (dsl.f32(a.vload(i, LANES)) - a_zp) * a_scale + (dsl.f32(b.vload(i, LANES)) - b_zp) * b_scale
        c.vstore(i, dsl.clamp(dsl.rint(lanes / c_scale) + c_zp, qmin, qmax))
        i += LANES
    for j in range(i, hi):
        v = (f32(a.flat[j]) - a_zp) * a_scale + (f32(b.flat[j]) - b_zp) * b_scale
        c.flat[j] = dsl.clamp(dsl.rint(v / c_scale) + c_zp, qmin, qmax)


def _scalar(v, default=0) -> float:
    return float(default) if v is None else float(np.asarray(v).reshape(-1)[0])


def _broadcast(shapes, where: str) -> tuple:
    """numpy's broadcast of shapes with unknown (None) dimensions kept unknown."""
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        dims = [s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0]
        known = {x for x in dims if x is not None and x != 1}
        if len(known) > 1:
            raise VerifyError(f"{where}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast")
        out.append(known.pop() if known else (None if None in dims else 1))
    return tuple(out)


@dsl.op("QLinearAdd", domain="com.microsoft", since=1)
class QLinearAdd(dsl.Op):
    """C = Q(DQ(A) + DQ(B)) with per-tensor i8/u8 quantization on each side."""

    kernels = {"default": qlinear_add_kernel}

    def clamp(self, c_scale, c_zp) -> Optional[Tuple[int, int]]:
        """The output integers' bounds beyond the type's (FusedQLinearAdd's activation), or None."""
        return None

    def verify(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point=None, c_scale=None, c_zero_point=None):
        op = self.op_type
        if c_scale is None:
            raise VerifyError(f"{op} takes A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, "
                              f"C_zero_point (zero points may be empty); C_scale is missing")
        for name, x, z in (("A", a, a_zero_point), ("B", b, b_zero_point)):
            if x.dtype not in INT8:
                raise VerifyError(f"{op} {name} must be i8 or u8, got {x}")
            if z is not None and (z.dtype != x.dtype or z.size not in (None, 1)):
                raise VerifyError(f"{op} {name}_zero_point must be a scalar of {name}'s dtype {x.dtype}, got {z}")
        if c_zero_point is not None and (c_zero_point.dtype not in INT8 or c_zero_point.size not in (None, 1)):
            raise VerifyError(f"{op} C_zero_point must be an i8 or u8 scalar, got {c_zero_point}")
        for name, s in (("A_scale", a_scale), ("B_scale", b_scale), ("C_scale", c_scale)):
            if s.dtype != dsl.f32 or s.size not in (None, 1):
                raise VerifyError(f"{op} {name} must be an f32 scalar (per tensor), got {s}")
        _broadcast((a.shape, b.shape), op)

    def infer(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point=None, c_scale=None, c_zero_point=None):
        dtype = dsl.u8 if c_zero_point is None else c_zero_point.dtype
        return TensorSpec(_broadcast((a.shape, b.shape), self.op_type), dtype)

    def plan(self, impl, inputs, outputs, backend):
        """Planned when A and B have the output's shape (no broadcast copy) and the scales and
        zero points are constants."""
        if any(r is None or tuple(r.shape) != tuple(outputs[0].shape) for r in (inputs[0], inputs[3])):
            return None
        params = [i for i in (1, 2, 4, 5, 6, 7) if i < len(inputs) and inputs[i] is not None]
        return recorded_plan_when_constant(*params)(self, impl, inputs, outputs, backend)

    def run(self, impl, inputs, outputs, backend):
        a, a_scale, a_zp, b, b_scale = inputs[:5]
        b_zp, c_scale, c_zp = (list(inputs[5:]) + [None, None, None])[:3]
        c = outputs[0]
        if a.shape != c.shape:
            a = np.ascontiguousarray(np.broadcast_to(a, c.shape))
        if b.shape != c.shape:
            b = np.ascontiguousarray(np.broadcast_to(b, c.shape))
        info = np.iinfo(c.dtype)
        lo, hi = float(info.min), float(info.max)
        bounds = self.clamp(c_scale, np.zeros(1, c.dtype) if c_zp is None else c_zp)
        if bounds is not None:
            lo, hi = (float(v) for v in bounds)
        impl(a, b, c, _scalar(a_zp), _scalar(a_scale), _scalar(b_zp), _scalar(b_scale), _scalar(c_scale),
             _scalar(c_zp), lo, hi, backend=backend)


@dsl.op("FusedQLinearAdd", domain="com.opdsl", since=1)
class FusedQLinearAdd(QLinearAdd):
    """QLinearAdd whose output integers are clamped to where ``activation`` ("Relu", or "Clip" with
    ``activation_params`` (min, max) in float) quantizes."""

    activation: str = "Relu"
    activation_params: Tuple[float, ...] = ()

    def verify(self, *inputs):
        super().verify(*inputs)
        check_activation("FusedQLinearAdd", self.activation, self.activation_params)

    def clamp(self, c_scale, c_zp) -> Optional[Tuple[int, int]]:
        return quantized_bounds(self.activation, self.activation_params, c_scale, c_zp)


@register("com.opdsl", "FusedQLinearAdd", everywhere=True)
def _fused_qlinear_add(node, opset, emit) -> bool:
    """QLinearAdd, then a Clip of its integers to the activation's quantized bounds (opset 12+)."""
    op = node.op
    ins, specs, (y,) = names(node)
    consts = [getattr(s, "value", None) for s in specs[6:8]]
    if opset < 12 or len(consts) < 2 or any(v is None for v in consts):
        return False  # the bounds need the output's scale and zero point
    lo, hi = quantized_bounds(op.activation, op.activation_params, *consts)
    raw = emit.temp("qadd")
    emit("QLinearAdd", ins, [raw], domain="com.microsoft")
    emit.nodes[-1].attribute.extend(a for a in node_attributes(op) if a.name not in ("activation", "activation_params"))
    dt = np.asarray(consts[1]).dtype
    emit("Clip", [raw, emit.constant(np.array(lo, dt), "min"), emit.constant(np.array(hi, dt), "max")], [y])
    return True
