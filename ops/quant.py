"""Conversion and quantization: DataConvert (com.opdsl, TIM-VX), QuantizeLinear and
DequantizeLinear (ONNX, per-tensor, per-axis and blocked).

Quantization is quant(f) = clamp(round_half_even(f / scale) + zero_point, qmin, qmax) and
dequant(q) = (q - zero_point) * scale, computed in f32 (f64 for f64 data) like the
ONNX reference.  Dequantizing uses the ``dsl.dequant`` builtin; quantizing spells the
formula out, since its output dtype is a TypeVar (``dsl.quant`` names a concrete one) and
f64 or i32 data keep their own precision.  f16/bf16 are storage types: kernels load them as f32 and round
back on store.

Scales and zero points reach the kernels as 3-D views ``(outer, D, inner)`` that
broadcast against the data viewed the same way, so one kernel covers a scalar
scale, one scale per channel along ``axis`` and one per block of ``block_size``
elements along ``axis``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import dsl
from dsl import In, Out, DType, bf16, f16, f32, f64, i8, i16, i32, u8, u16
from dsl.opgraph.spec import Quant, TensorSpec, VerifyError

X = dsl.TypeVar("X")
S = dsl.TypeVar("S")
Q = dsl.TypeVar("Q")
D = dsl.TypeVar("D")

CAST = 0
QUANTIZE = 1
DEQUANTIZE = 2

QUANT_TYPES = (u8, i8, u16, i16)
FLOATS = (f16, bf16, f32, f64)
# TensorProto.DataType codes of the dtypes an ONNX output_dtype attribute may name
ONNX_DTYPES = {1: f32, 2: u8, 3: i8, 4: u16, 5: i16, 6: i32, 7: dsl.i64, 9: dsl.bool_, 10: f16,
               11: f64, 12: dsl.u32, 13: dsl.u64, 16: bf16}


def quant_range(dtype: DType):
    info = np.iinfo(dtype.np)
    return float(info.min), float(info.max)


@dsl.func
def round_half_even(v):
    """Round to nearest, ties to even (numpy.rint), using floor only."""
    r = dsl.floor(v)
    d = v - r
    if d > 0.5:
        r = r + 1
    elif d == 0.5:
        if r - 2 * dsl.floor(r * 0.5) != 0:  # r is odd
            r = r + 1
    return r


# --------------------------------------------------------------------------- kernels

@dsl.kernel
def convert_kernel(x: In[X], y: Out[D], mode: i32, scale: f32, zero_point: f32,
                   qmin: f32, qmax: f32):
    """Elementwise dtype conversion: a plain cast, a quantization or a dequantization."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        if mode == QUANTIZE:
            q = round_half_even(v / scale) + zero_point
            y.flat[i] = min(max(q, qmin), qmax)
        elif mode == DEQUANTIZE:
            y.flat[i] = dsl.dequant(v, scale, zero_point)
        else:
            y.flat[i] = v


@dsl.func
def param_index(i, ni, nd, block, so, sd, si):
    """Where flat element ``i`` of an (outer, D, inner) tensor finds its scale/zero point:
    one entry per ``block`` elements along D; so/sd/si are the broadcast strides."""
    t = i // ni
    return (t // nd) * so + ((t % nd) // block) * sd + (i % ni) * si


@dsl.kernel
def quantize_kernel(x: In[X, 3], scale: In[S, 3], zp: In[Q, 3], y: Out[Q, 3], block: dsl.i64,
                    qmin: f32, qmax: f32):
    """y = clamp(rint(x / scale) + zp); scale/zp broadcast over (outer, D, inner),
    one entry per ``block`` elements along D."""
    nd = x.shape[1]
    ni = x.shape[2]
    so = scale.shape[1] * scale.shape[2] if scale.shape[0] > 1 else 0
    sd = scale.shape[2] if scale.shape[1] > 1 else 0
    si = 1 if scale.shape[2] > 1 else 0
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        p = param_index(i, ni, nd, block, so, sd, si)
        q = round_half_even(x.flat[i] / scale.flat[p]) + zp.flat[p]
        y.flat[i] = min(max(q, qmin), qmax)


@dsl.kernel
def dequantize_kernel(x: In[Q, 3], scale: In[S, 3], zp: In[Q, 3], y: Out[D, 3], block: dsl.i64):
    """y = (x - zp) * scale in f32, scale/zp broadcast like quantize_kernel."""
    nd = x.shape[1]
    ni = x.shape[2]
    so = scale.shape[1] * scale.shape[2] if scale.shape[0] > 1 else 0
    sd = scale.shape[2] if scale.shape[1] > 1 else 0
    si = 1 if scale.shape[2] > 1 else 0
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        p = param_index(i, ni, nd, block, so, sd, si)
        y.flat[i] = dsl.dequant(x.flat[i], scale.flat[p], zp.flat[p])


@dsl.kernel
def quantize_tensor_kernel(x: In[X], scale: In[S], zp: In[Q], y: Out[Q], qmin: f32, qmax: f32):
    """quantize_kernel with one scale and zero point (per tensor, the common case): no lookup of
    the parameters per element, so the loop vectorizes.  ``dsl.rint`` rounds ties to even too."""
    s = scale.flat[0]
    z = zp.flat[0]
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = min(max(dsl.rint(x.flat[i] / s) + z, qmin), qmax)


@dsl.kernel
def dequantize_tensor_kernel(x: In[Q], scale: In[S], zp: In[Q], y: Out[D]):
    """dequantize_kernel with one scale and zero point."""
    s = scale.flat[0]
    z = zp.flat[0]
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.dequant(x.flat[i], s, z)


# --------------------------------------------------------------------------- DataConvert

@dsl.op("DataConvert", domain="com.opdsl", since=1)
class DataConvert(dsl.Op):
    """TIM-VX DataConvert: convert to ``dtype``.

    float -> i8/u8/i16/u16: quantize with ``scale`` (default 1) and ``zero_point``,
    saturating; the output spec carries ``quant=(scale, zero_point)``.
    i8/u8/i16/u16 -> float with ``scale`` given, or from a per-tensor quantized input
    (its ``quant``, read from the input specs run() is given): dequantize.  Anything else:
    a plain cast (float -> int truncates, f32 <-> f16/bf16 rounds to nearest even).
    """

    dtype: DType = f32
    scale: Optional[float] = None
    zero_point: int = 0
    formats = ("plain", "nchwc16")
    kernels = {"default": convert_kernel}

    def _mode(self, x: TensorSpec) -> int:
        if x.dtype.is_float and self.dtype in QUANT_TYPES:
            return QUANTIZE
        if x.dtype in QUANT_TYPES and self.dtype.is_float and (self.scale is not None or x.quant is not None):
            return DEQUANTIZE
        return CAST

    def _quant(self, x: TensorSpec):
        if self.scale is None and x.quant is not None:  # dequantize as the input says
            return x.quant.scale, x.quant.zero_point
        return (1.0 if self.scale is None else float(self.scale)), int(self.zero_point)

    def verify(self, x):
        if x.quant is not None and x.quant.axis is not None and self._mode(x) == DEQUANTIZE and self.scale is None:
            raise VerifyError(f"DataConvert dequantizes per tensor; input {x} is quantized per axis "
                              f"({x.quant}): use DequantizeLinear, or give scale= and zero_point=")
        if self.scale is not None and not (np.isfinite(self.scale) and self.scale > 0):
            raise VerifyError(f"DataConvert scale must be a positive finite float, got {self.scale}")
        if self._mode(x) == QUANTIZE:
            lo, hi = quant_range(self.dtype)
            if not lo <= self.zero_point <= hi:
                raise VerifyError(f"DataConvert zero_point {self.zero_point} is outside the range of "
                                  f"{self.dtype} [{lo:.0f}, {hi:.0f}]")

    def infer(self, x):
        quant = self._quant(x) if self._mode(x) == QUANTIZE else None
        return TensorSpec(x.shape, self.dtype, quant=quant)

    plan = dsl.recorded_plan  # launches from the input's spec (its quantization) and params only

    def run(self, impl, inputs, outputs, backend, specs=()):
        x, y = inputs[0], outputs[0]
        quant = specs[0].quant if specs and specs[0] is not None else None
        spec = TensorSpec(x.shape, dsl.lang.types.from_numpy(x.dtype), quant=quant)
        mode = self._mode(spec)
        scale, zp = self._quant(spec)
        qmin, qmax = quant_range(self.dtype) if mode == QUANTIZE else (0.0, 0.0)
        impl(x, y, mode=mode, scale=scale, zero_point=float(zp), qmin=qmin, qmax=qmax, backend=backend)


# --------------------------------------------------------------------------- ONNX Q/DQ

def _check_scale(op: str, x: TensorSpec, scale: TensorSpec, zp: Optional[TensorSpec], axis: int,
                 block_size: int) -> None:
    if not scale.dtype.is_float:
        raise VerifyError(f"{op} scale must be a float tensor, got {scale}")
    if zp is not None and zp.shape != scale.shape and not (zp.size == 1 and scale.size == 1):
        raise VerifyError(f"{op} zero point {zp} must have the scale's shape {scale}")
    if scale.size == 1 and not block_size:
        return
    if not -x.ndim <= axis < x.ndim:
        raise VerifyError(f"{op} axis {axis} is out of range for input {x} (rank {x.ndim})")
    ax = axis % x.ndim
    if block_size:
        if scale.ndim != x.ndim:
            raise VerifyError(f"{op} blocked quantization needs a scale of rank {x.ndim}, got {scale}")
        for d, (xs, ss) in enumerate(zip(x.shape, scale.shape)):
            want = None if xs is None else (-(-xs // block_size) if d == ax else xs)
            if want is not None and ss is not None and ss != want:
                raise VerifyError(f"{op} blocked scale {scale} must have shape "
                                  f"{tuple(x.shape[:ax])} + (ceil({xs}/{block_size}),) + ... along axis {ax}")
        return
    if scale.ndim != 1:
        raise VerifyError(f"{op} scale must be a scalar or 1-D (per-axis), got {scale}; "
                          f"use block_size for blocked quantization")
    if x.shape[ax] is not None and scale.shape[0] is not None and scale.shape[0] != x.shape[ax]:
        raise VerifyError(f"{op} per-axis scale {scale} needs {x.shape[ax]} entries (input {x} axis {ax})")


def constant_quant(x: TensorSpec, scale: TensorSpec, zp: Optional[TensorSpec], axis: int,
                   block_size: int, dtype: DType) -> Optional[Quant]:
    """The ``Quant`` a Quantize/DequantizeLinear with these inputs describes, when its scale
    and zero point are constants (per tensor or per axis; blocked ones have no Quant)."""
    if block_size or scale.value is None or (zp is not None and zp.value is None) or dtype not in QUANT_TYPES:
        return None
    s = np.asarray(scale.value, np.float64).ravel()
    z = np.zeros(s.shape, np.int64) if zp is None else np.asarray(zp.value, np.int64).ravel()
    if not (np.all(np.isfinite(s)) and np.all(s > 0)):
        return None  # no meaningful quantization (ONNX accepts such scales; the data says inf/nan)
    if s.size == 1:
        return Quant(float(s[0]), int(z[0]))
    return Quant(tuple(s.tolist()), tuple(z.tolist()), axis % x.ndim)


def _views(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int, block_size: int):
    """(outer, D, inner) views of data, scale and zero point, plus the block length."""
    if scale.size == 1 and not block_size:
        return x.reshape(1, x.size, 1), scale.reshape(1, 1, 1), zp.reshape(1, 1, 1), 1
    ax = axis % x.ndim
    outer = int(np.prod(x.shape[:ax], dtype=np.int64))
    inner = int(np.prod(x.shape[ax + 1:], dtype=np.int64))
    xv = x.reshape(outer, x.shape[ax], inner)
    if block_size:
        sv = (outer, scale.shape[ax], inner)
        return xv, scale.reshape(sv), zp.reshape(sv), block_size
    return xv, scale.reshape(1, -1, 1), zp.reshape(1, -1, 1), 1


def _linear_views(op, inputs, zp_dtype):
    """Quantize/DequantizeLinear inputs as (outer, D, inner) views plus the block length;
    an absent zero point is 0."""
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros(scale.shape, zp_dtype)
    return _views(x, scale, zp, op.axis, op.block_size)


@dsl.op("QuantizeLinear", since=10)
class QuantizeLinear(dsl.Op):
    """y = saturate(rint(x / y_scale) + y_zero_point); output dtype from the zero point,
    else ``output_dtype``, else u8."""

    axis: int = 1
    saturate: int = 1
    block_size: int = 0
    output_dtype: int = 0
    kernels = {"default": quantize_kernel, "per_tensor": quantize_tensor_kernel}
    plan = dsl.recorded_plan_when_constant(1, 2)  # views of x, the scale and the zero point

    def select(self, x, y_scale, y_zero_point=None, backend=None):
        return "per_tensor" if y_scale.size == 1 and not self.block_size else "default"

    def _out_dtype(self, zp: Optional[TensorSpec]) -> DType:
        if zp is not None:
            return zp.dtype
        if self.output_dtype:
            if self.output_dtype not in ONNX_DTYPES:
                raise VerifyError(f"QuantizeLinear output_dtype {self.output_dtype} is not supported; "
                                  f"accepted: {', '.join(str(t) for t in QUANT_TYPES)}")
            return ONNX_DTYPES[self.output_dtype]
        return u8

    def verify(self, x, y_scale, y_zero_point=None):
        out = self._out_dtype(y_zero_point)
        if out not in QUANT_TYPES:
            raise VerifyError(f"QuantizeLinear output type {out} is not supported; accepted: "
                              f"{', '.join(str(t) for t in QUANT_TYPES)}")
        if self.output_dtype and y_zero_point is not None and ONNX_DTYPES.get(self.output_dtype) != out:
            raise VerifyError(f"QuantizeLinear output_dtype {self.output_dtype} disagrees with the zero "
                              f"point's dtype {out}")
        if not (x.dtype.is_float or x.dtype == i32):
            raise VerifyError(f"QuantizeLinear input must be float or i32, got {x}")
        if self.block_size < 0:
            raise VerifyError(f"QuantizeLinear block_size must be >= 0, got {self.block_size}")
        _check_scale("QuantizeLinear", x, y_scale, y_zero_point, self.axis, self.block_size)

    def infer(self, x, y_scale, y_zero_point=None):
        out = self._out_dtype(y_zero_point)
        return TensorSpec(x.shape, out, quant=constant_quant(x, y_scale, y_zero_point, self.axis,
                                                             self.block_size, out))

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        xv, sv, zv, block = _linear_views(self, inputs, y.dtype)
        qmin, qmax = quant_range(dsl.lang.types.from_numpy(y.dtype))
        if impl == quantize_tensor_kernel:
            impl(xv.reshape(-1), sv.reshape(-1), zv.reshape(-1), y.reshape(-1), qmin, qmax, backend=backend)
            return
        impl(xv, sv, zv, y.reshape(xv.shape), block, qmin, qmax, backend=backend)


@dsl.op("DequantizeLinear", since=10)
class DequantizeLinear(dsl.Op):
    """y = (x - x_zero_point) * x_scale, in the scale's dtype (or ``output_dtype``)."""

    axis: int = 1
    block_size: int = 0
    output_dtype: int = 0
    kernels = {"default": dequantize_kernel, "per_tensor": dequantize_tensor_kernel}
    plan = dsl.recorded_plan_when_constant(1, 2)  # views of x, the scale and the zero point

    def select(self, x, x_scale, x_zero_point=None, backend=None):
        return "per_tensor" if x_scale.size == 1 and not self.block_size else "default"

    def _out_dtype(self, scale: TensorSpec) -> DType:
        if self.output_dtype:
            out = ONNX_DTYPES.get(self.output_dtype)
            if out is None or not out.is_float:
                raise VerifyError(f"DequantizeLinear output_dtype {self.output_dtype} is not a float type")
            return out
        return scale.dtype

    def verify(self, x, x_scale, x_zero_point=None):
        if x.dtype not in QUANT_TYPES + (i32,):
            raise VerifyError(f"DequantizeLinear input must be one of "
                              f"{', '.join(str(t) for t in QUANT_TYPES + (i32,))}, got {x}")
        if x_zero_point is not None and x_zero_point.dtype != x.dtype:
            raise VerifyError(f"DequantizeLinear zero point {x_zero_point} must have the input's dtype {x.dtype}")
        if self.block_size < 0:
            raise VerifyError(f"DequantizeLinear block_size must be >= 0, got {self.block_size}")
        self._out_dtype(x_scale)
        _check_scale("DequantizeLinear", x, x_scale, x_zero_point, self.axis, self.block_size)

    def infer(self, x, x_scale, x_zero_point=None):
        return TensorSpec(x.shape, self._out_dtype(x_scale))

    def input_quant(self, x, x_scale, x_zero_point=None):
        q = constant_quant(x, x_scale, x_zero_point, self.axis, self.block_size, x.dtype)
        return {} if q is None else {0: q}

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        xv, sv, zv, block = _linear_views(self, inputs, inputs[0].dtype)
        if impl == dequantize_tensor_kernel:
            impl(xv.reshape(-1), sv.reshape(-1), zv.reshape(-1), y.reshape(-1), backend=backend)
            return
        impl(xv, sv, zv, y.reshape(xv.shape), block, backend=backend)
