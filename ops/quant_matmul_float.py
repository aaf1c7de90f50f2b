"""The dynamically quantized MatMul as one GEMM: MatMulIntegerToFloat (com.opdsl domain, after
ONNX Runtime's com.microsoft MatMulIntegerToFloat, same inputs) and the rules that make it.

``onnxruntime.quantization.quantize_dynamic`` turns every float MatMul into
DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast(float) ->
Mul(Mul(x_scale, W_scale)) [-> Add(bias)].  Run as written, the i32 product makes two more
passes over the output (Cast, then the scale and bias).  Here the int8 GEMM's epilogue does
them (ops/gemm_int8.py ``FLOAT_OUT``, on the AMX tiles or ``dot4``): y = f32(sum)·(a_scale·
b_scale[n]) + bias[n], with the scale product rounded to f32 first, exactly as the graph computes
it, so the results are the unfused graph's bit for bit.  The DynamicQuantizeLinear stays a node
of its own: a transformer's Q, K and V products share one, and it is a third of a pass.

The rules run after folding: Cast -> Mul(s) whose Cast reads a MatMulInteger output read by
nothing else becomes MatMulIntegerToFloat (``s`` split back into the two scales where it is a
Mul of a scalar and a scalar or column vector; the MatMulInteger, left without readers, is
dropped as dead); MatMulIntegerToFloat -> Add of a 1-D float vector of the columns takes it as
the bias.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import dsl
from dsl.onnx.lower import names, register
from dsl.opgraph.fusion import fusion_rule
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.cast import Cast, CastV6
from ops.elementwise import Add, Mul
from ops.matmul_fusion import _other_input
from ops.quant_matmul import (INT8, MatMulInteger, _check_arithmetic, _check_param, _matmul_shape, _packed_kernel,
                              _planned_when_constant, _run_qgemm, packed_ok, qgemm_amx, qgemm_kernel, qgemm_packed)
from ops.gemm_int8 import FLOAT_OUT


@dsl.op("MatMulIntegerToFloat", domain="com.opdsl", since=1)
class MatMulIntegerToFloat(dsl.Op):
    """y = f32(MatMulInteger(a, b, a_zero_point, b_zero_point)) · (a_scale · b_scale) + bias:
    a_scale one f32, b_scale one or one per column of a 2-D b, bias one f32 per column."""

    kernels = {"default": qgemm_kernel, "packed": qgemm_packed, "amx": qgemm_amx}
    # B, its scale and zero point and the bias read by run(): a recorded plan when they are constant
    # (A's scale and zero point, the dynamic quantization's outputs, are views the kernel reads)
    plan = _planned_when_constant(1, 1, 3, 5, 6)
    int8_arithmetic: str = "exact"  # as MatMulInteger's (set by load_onnx / Graph.compile)

    def select(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None, backend=None):
        if not packed_ok(a, b, a_zero_point, b_zero_point, a_scale, b_scale, backend=backend):
            return "default"
        return _packed_kernel(a, b, backend)

    def verify(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        op = "MatMulIntegerToFloat"
        for name, t in (("A", a), ("B", b)):
            if t.dtype not in INT8:
                raise VerifyError(f"{op} {name} must be int8 or uint8, got {t}")
        shape = _matmul_shape(op, a, b)
        for name, s in (("a_scale", a_scale), ("b_scale", b_scale)):
            if s.dtype != dsl.f32:
                raise VerifyError(f"{op} {name} must be f32, got {s}")
        if a_scale.size != 1:
            raise VerifyError(f"{op} a_scale must be one value (per tensor), got {a_scale}")
        if b_scale.size != 1 and (b.ndim != 2 or b_scale.ndim != 1 or b_scale.shape[0] not in (None, b.shape[1])):
            raise VerifyError(f"{op} b_scale {b_scale} must be one value or one per column of a 2-D B {b}")
        _check_param(op, "a_zero_point", a_zero_point, a, True, a.dtype)
        _check_param(op, "b_zero_point", b_zero_point, b, False, b.dtype)
        _check_arithmetic(op, self.int8_arithmetic)
        if bias is not None and (bias.dtype != dsl.f32 or bias.ndim != 1 or not shape
                                 or bias.shape[0] not in (None, shape[-1])):
            raise VerifyError(f"{op} bias must be an f32 vector of the {shape[-1] if shape else '?'} columns, "
                              f"got {bias}")

    def infer(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
        return TensorSpec(_matmul_shape("MatMulIntegerToFloat", a, b), dsl.f32)

    def run(self, impl, inputs, outputs, backend):
        a, b, a_scale, b_scale, azp, bzp, bias = (list(inputs) + [None] * 3)[:7]
        _run_qgemm(impl, [a, a_scale, azp, b, b_scale, bzp, None, None], outputs[0], FLOAT_OUT, backend,
                   self.int8_arithmetic, bias=bias)


# --------------------------------------------------------------------------- fusion rules

def _scales(g, s, n_cols) -> Optional[tuple]:
    """(a_scale, b_scale) tensors whose f32 product is ``s``: the two inputs of a Mul of a scalar
    by a scalar or a column vector, else ``s`` itself beside a constant 1; None when ``s`` is
    neither one f32 value nor one per column."""
    def per_column(t):
        return t.spec.dtype == dsl.f32 and (t.spec.size == 1 or t.spec.ndim == 1 and t.spec.shape[0] == n_cols)
    if s is None or not per_column(s):
        return None
    node = s.producer if s.kind == "node" else None
    if node is not None and type(node.op) is Mul and all(x is not None for x in node.inputs):
        u, v = node.inputs
        if v.spec.size == 1 and u.spec.size != 1:
            u, v = v, u
        if u.spec.size == 1 and per_column(u) and per_column(v) and max(u.spec.ndim, v.spec.ndim) <= 1:
            return u, v
    one = g.constant(g.unique_name("matmul_integer.unit_scale"), np.ones((), np.float32))
    return (s, one) if s.spec.size == 1 else (one, s)


def cast_scale(g, cast, mul):
    """MatMulInteger -> Cast(f32) -> Mul(scale) => MatMulIntegerToFloat (module docstring)."""
    src = cast.inputs[0]
    mm = src.producer if src is not None and src.kind == "node" else None
    if mm is None or type(mm.op) is not MatMulInteger or cast.outputs[0].spec.dtype != dsl.f32:
        return None
    if any(o is src for o in g.outputs) or len(g.consumers(src)) != 1:
        return None
    out = mm.outputs[0].spec
    if out.ndim < 2 or mul.outputs[0].spec.shape != out.shape:
        return None
    scales = _scales(g, _other_input(mul, cast.outputs[0]), out.shape[-1])
    if scales is None:
        return None
    a, b, azp, bzp = (list(mm.inputs) + [None, None])[:4]
    return MatMulIntegerToFloat(int8_arithmetic=mm.op.int8_arithmetic), [a, b, *scales, azp, bzp]


for _cast in (Cast, CastV6):
    fusion_rule(_cast, Mul)(cast_scale)


@fusion_rule(MatMulIntegerToFloat, Add)
def float_bias(g, mm, add):
    """MatMulIntegerToFloat (no bias yet) -> Add(f32 vector of the columns) => its bias."""
    inputs = (list(mm.inputs) + [None] * 3)[:7]
    bias = _other_input(add, mm.outputs[0])
    out = mm.outputs[0].spec
    if inputs[6] is not None or bias is None or bias.spec.dtype != dsl.f32 or bias.spec.ndim != 1 \
            or bias.spec.shape[0] != out.shape[-1] or add.outputs[0].spec.shape != out.shape:
        return None
    return MatMulIntegerToFloat(int8_arithmetic=mm.op.int8_arithmetic), inputs[:6] + [bias]


# --------------------------------------------------------------------------- the standard ONNX form

@register("com.opdsl", "MatMulIntegerToFloat", everywhere=True)
def _matmul_integer_to_float(node, opset, emit) -> bool:
    """MatMulInteger, Cast to float, Mul by Mul(a_scale, b_scale), Add of the bias."""
    (a, b, a_scale, b_scale, *rest), _, (y,) = names(node)
    azp, bzp, bias = (list(rest) + [None] * 3)[:3]
    if opset < 10:  # MatMulInteger is opset 10
        return False
    acc, accf, scale = emit.temp("matmul_integer"), emit.temp("cast"), emit.temp("scale")
    emit("MatMulInteger", [a, b] + ([azp or "", bzp] if bzp else [azp] if azp else []), [acc])
    emit("Cast", [acc], [accf], to=1)
    emit("Mul", [a_scale, b_scale], [scale])
    if bias is None:
        emit("Mul", [accf, scale], [y])
        return True
    scaled = emit.temp("scaled")
    emit("Mul", [accf, scale], [scaled])
    emit("Add", [scaled, bias], [y])
    return True
