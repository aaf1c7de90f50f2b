"""Integer and quantized convolutions: ConvInteger and QLinearConv (ONNX 10+).

One direct kernel serves both, for 1-D to 3-D images (fewer spatial axes are size-1 ones)
and groups: each output element sums (x - x_zp)·(w - w_zp[m]) exactly in i32 over its group's
input channels and the window's taps inside the image (padding contributes x_zp, i.e. zero
after the shift), adds the i32 bias, and either stores the sum (ConvInteger) or requantizes
it, y = saturate(rint(sum · x_scale·w_scale[m]/y_scale) + y_zp), with the scale product in
f32 and the rest in f64 as onnx's reference does.  It serves 1-D, 3-D and grouped convolutions
and the interpreter; 2-D ungrouped ones on numba and OpenCL run as the packed u8×i8 GEMM
(ops/conv_int8.py), requantized in f32 as onnxruntime does.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, f64, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.nn import ConvAttributes, conv_geometry
from ops.conv_int8 import conv_int8, packed_conv_ok
from ops.conv_int8_amx import amx_conv_ok, conv_int8_amx
from ops.conv_int8_direct import ARITHMETIC, launched
from ops import packed_constants
from ops.gemm_int8 import qgemm_packed
from ops.gemm_int8_amx import qgemm_amx
from ops.quant import constant_quant, round_half_even
from ops.quant_conv_plan import packed_or_recorded_plan

A = dsl.TypeVar("A")
B = dsl.TypeVar("B")
Y = dsl.TypeVar("Y")

INT8 = (dsl.i8, dsl.u8)
_DERIVED: dict = {}  # (node, shapes, ids of its constant parameters) -> (parameters, conv_int8 arguments)


@dsl.kernel
def qconv_kernel(x: In[A, 5], w: In[B, 5], x_zp: In[A, 1], w_zp: In[B, 1], bias: In[i32, 1], x_scale: In[f32, 1],
                 w_scale: In[f32, 1], y_scale: In[f32, 1], y_zp: In[Y, 1], y: Out[Y, 5],
                 stride: dsl.Vec[i64, 3], dil: dsl.Vec[i64, 3], begin: dsl.Vec[i64, 3], group: i64,
                 requantize: bool_, qmin: f64, qmax: f64):
    """x (N, C, D, H, W), w (M, C/group, kD, kH, kW), y (N, M, D', H', W')."""
    m_all = y.shape[1]
    od_n = y.shape[2]
    oh_n = y.shape[3]
    ow_n = y.shape[4]
    cg = w.shape[1]
    mg = m_all // group
    zx = i32(x_zp.flat[0])
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        ow = i % ow_n
        r = i // ow_n
        oh = r % oh_n
        r = r // oh_n
        od = r % od_n
        r = r // od_n
        m = r % m_all
        n = r // m_all
        g = m // mg
        zw = i32(w_zp.flat[m if w_zp.shape[0] > 1 else 0])
        acc = i32(0)
        for c in range(cg):
            for kd in range(w.shape[2]):
                pd = od * stride[0] - begin[0] + kd * dil[0]
                for kh in range(w.shape[3]):
                    ph = oh * stride[1] - begin[1] + kh * dil[1]
                    for kw in range(w.shape[4]):
                        pw = ow * stride[2] - begin[2] + kw * dil[2]
                        if pd >= 0 and pd < x.shape[2] and ph >= 0 and ph < x.shape[3] and pw >= 0 \
                                and pw < x.shape[4]:
                            xv = i32(x[n, g * cg + c, pd, ph, pw]) - zx
                            acc += xv * (i32(w[m, c, kd, kh, kw]) - zw)
        acc += bias.flat[m if bias.shape[0] > 1 else 0]
        if requantize:
            mult = f32(x_scale.flat[0] * w_scale.flat[m if w_scale.shape[0] > 1 else 0]) / y_scale.flat[0]
            q = f64(acc) * f64(mult) + f64(y_zp.flat[0])
            y.flat[i] = round_half_even(min(max(q, qmin), qmax))
        else:
            y.flat[i] = acc


class _QConv(ConvAttributes):
    """Checks, geometry and launch shared by ConvInteger and QLinearConv."""

    kernels = {"default": qconv_kernel, "packed": qgemm_packed, "amx": qgemm_amx}
    # whether "amx" (ops/conv_int8_amx.py: the image packed as B panels, the matrix tile GEMM) may be
    # selected where the target runs AMX (benchmarks turn it off to measure the VNNI kernels)
    tiles: ClassVar[bool] = True
    # "saturating": u8·i8 pairs summed in saturating i16 where that is faster (AVX2 without VNNI), as
    # onnxruntime does there; set by load_onnx / Graph.compile(int8_arithmetic=...)
    int8_arithmetic: str = "exact"

    def _select(self, x, w, backend, *scales) -> str:
        ok = packed_conv_ok(x, w, self.group, backend) and all(s is None or s.dtype == dsl.f32 for s in scales)
        if ok and self.tiles and amx_conv_ok(x, w, self.group, backend, *self._attrs(w)[:3]):
            return "amx"
        return "packed" if ok else "default"

    def _check(self, x, w, x_zp, w_zp):
        op = self.op_type
        for name, t in (("x", x), ("w", w)):
            if t.dtype not in INT8:
                raise VerifyError(f"{op} {name} must be int8 or uint8, got {t}")
        if x.ndim not in (3, 4, 5) or w.ndim != x.ndim:
            raise VerifyError(f"{op} needs x (N, C, spatial...) with 1 to 3 spatial axes and w of its rank, "
                              f"got {x} and {w}")
        if self.group < 1 or (x.shape[1] is not None and w.shape[1] is not None and x.shape[1] != w.shape[1] * self.group):
            raise VerifyError(f"{op} input has {x.shape[1]} channels but weights {w} with group={self.group} expect "
                              f"{None if w.shape[1] is None else w.shape[1] * self.group}")
        if x_zp is not None and (x_zp.dtype != x.dtype or x_zp.size not in (None, 1)):
            raise VerifyError(f"{op} x_zero_point must be a scalar of x's dtype {x.dtype}, got {x_zp}")
        if w_zp is not None and (w_zp.dtype != w.dtype or w_zp.size not in (None, 1, w.shape[0])):
            raise VerifyError(f"{op} w_zero_point must be a scalar or one per output channel ({w.shape[0]}) of "
                              f"w's dtype {w.dtype}, got {w_zp}")
        k, strides, dil, pads = self._attrs(w)
        conv_geometry(x.shape[2:], k, strides, dil, pads, self.auto_pad)
        if self.int8_arithmetic not in ARITHMETIC:
            raise VerifyError(f"{op} int8_arithmetic={self.int8_arithmetic!r}: accepted "
                              f"{' or '.join(map(repr, ARITHMETIC))}")

    def _out_shape(self, x, w):
        k, strides, dil, pads = self._attrs(w)
        out, _, _ = conv_geometry(x.shape[2:], k, strides, dil, pads, self.auto_pad)
        return (x.shape[0], w.shape[0]) + tuple(out)

    def _packed_args(self, x, w, x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp, y, requantize):
        """conv_int8's geometry, multiplier, bias and output zero point: derived once per graph node
        when every parameter is a constant (read-only) array, as in a loaded model."""
        params = (w, w_zp, bias, x_scale, w_scale, y_scale, y_zp)
        key = (id(self), x.shape, requantize) + tuple(id(a) for a in params)
        hit = _DERIVED.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], params)):
            return hit[1]
        wspec = TensorSpec(w.shape, dsl.lang.types.from_numpy(w.dtype))
        k, strides, dil, pads = self._attrs(wspec)
        _, begin, _ = conv_geometry(x.shape[2:], k, strides, dil, pads, self.auto_pad)
        geom = list(k) + list(strides) + list(begin) + list(dil) + list(y.shape[2:])
        mult = None
        if requantize:  # x_scale·w_scale[m]/y_scale in f32, as onnxruntime computes it
            mult = (np.float32(np.asarray(x_scale).reshape(-1)[0]) * np.asarray(w_scale, np.float32).reshape(-1)
                    / np.float32(np.asarray(y_scale).reshape(-1)[0])).astype(np.float32)
        derived = (geom, mult, np.asarray(bias, np.int32).reshape(-1) if requantize else None,
                   int(np.asarray(y_zp).reshape(-1)[0]) if requantize else 0)
        if all(isinstance(a, np.ndarray) and packed_constants.immutable(a) for a in params):
            if len(_DERIVED) > 4096:
                _DERIVED.clear()
            _DERIVED[key] = (params, derived)
        return derived

    def _launch(self, impl, x, w, x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp, y, requantize, backend,
                clamp=None, launch=None):
        """``clamp``: (lo, hi) in the output's integers, narrower than its type (a fused Relu/Clip);
        ``launch``: records the packed path's launches for a plan (ops/quant_conv_plan.py)."""
        if impl == qgemm_amx:
            geom, mult, b32, zy = self._packed_args(x, w, x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp, y,
                                                    requantize)
            conv_int8_amx(x, w, y, x_zp, w_zp, geom, mult, b32, zy, backend, clamp=clamp, launch=launch)
            return
        if impl == qgemm_packed:
            geom, mult, b32, zy = self._packed_args(x, w, x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp, y,
                                                    requantize)
            conv_int8(x, w, y, x_zp, w_zp, geom, mult, b32, zy, backend, impl, clamp=clamp, launch=launch,
                      arithmetic=self.int8_arithmetic)
            return
        wspec = TensorSpec(w.shape, dsl.lang.types.from_numpy(w.dtype))
        k, strides, dil, pads = self._attrs(wspec)
        _, begin, _ = conv_geometry(x.shape[2:], k, strides, dil, pads, self.auto_pad)
        pad = 5 - x.ndim

        def five(a):
            return a.reshape(a.shape[:2] + (1,) * pad + a.shape[2:])

        def three(v, fill):
            return [fill] * pad + [int(t) for t in v]
        flat = [np.ascontiguousarray(a).reshape(-1) for a in (x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp)]
        info = np.iinfo(y.dtype) if requantize else None
        lo, hi = (float(info.min), float(info.max)) if info else (0.0, 0.0)
        if clamp is not None:
            lo, hi = max(lo, float(clamp[0])), min(hi, float(clamp[1]))
        launched(impl, launch)(five(x), five(w), *flat, five(y), three(strides, 1), three(dil, 1), three(begin, 0),
                               self.group, requantize, lo, hi, backend=backend)


@dsl.op("ConvInteger", since=10)
class ConvInteger(_QConv):
    """Conv of i8/u8 x and w minus their zero points, exact in i32."""

    # w and its zero points are read (packed); the packed paths declare their launches (packing x
    # into a scratch buffer, then the convolution), the portable kernel is recorded
    plan = packed_or_recorded_plan(recorded=(1, 3), packed=(1, 2, 3))

    def select(self, x, w, x_zero_point=None, w_zero_point=None, backend=None):
        return self._select(x, w, backend)

    def verify(self, x, w, x_zero_point=None, w_zero_point=None):
        self._check(x, w, x_zero_point, w_zero_point)

    def infer(self, x, w, x_zero_point=None, w_zero_point=None):
        return TensorSpec(self._out_shape(x, w), dsl.i32)

    def run(self, impl, inputs, outputs, backend, launch=None):
        """``launch``: a recorder of the packed path's launches (ops/quant_conv_plan.py)."""
        x, w = inputs[0], inputs[1]
        x_zp, w_zp = (list(inputs[2:]) + [None, None])[:2]
        zero_x = np.zeros(1, x.dtype) if x_zp is None else x_zp
        zero_w = np.zeros(1, w.dtype) if w_zp is None else w_zp
        one = np.ones(1, np.float32)
        self._launch(impl, x, w, zero_x, zero_w, np.zeros(1, np.int32), one, one, one, np.zeros(1, np.int32),
                     outputs[0], False, backend, launch=launch)


@dsl.op("QLinearConv", since=10)
class QLinearConv(_QConv):
    """Quantized Conv: i8/u8 in and out, f32 scales (w_scale per output channel allowed), i32 bias."""

    # run() reads the scales, w, its and y's zero points and the bias (the packed paths x's zero
    # point too); as for ConvInteger, the packed paths declare their launches
    plan = packed_or_recorded_plan(recorded=(1, 3, 4, 5, 6, 7, 8), packed=(1, 2, 3, 4, 5, 6, 7, 8))

    def select(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None,
               backend=None):
        return self._select(x, w, backend, x_scale, w_scale, y_scale)

    def verify(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None):
        self._check(x, w, x_zero_point, w_zero_point)
        if y_zero_point.dtype not in INT8:
            raise VerifyError(f"QLinearConv y_zero_point must be int8 or uint8, got {y_zero_point}")
        for name, s in (("x_scale", x_scale), ("w_scale", w_scale), ("y_scale", y_scale)):
            if s.dtype != dsl.f32:
                raise VerifyError(f"QLinearConv {name} must be f32, got {s}")
        if w_scale.size not in (None, 1, w.shape[0]):
            raise VerifyError(f"QLinearConv w_scale must be a scalar or one per output channel ({w.shape[0]}), "
                              f"got {w_scale}")
        if B is not None and (B.dtype != dsl.i32 or B.ndim != 1):
            raise VerifyError(f"QLinearConv bias B must be a 1-D int32 tensor, got {B}")

    def infer(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None):
        shape = self._out_shape(x, w)
        return TensorSpec(shape, y_zero_point.dtype, quant=constant_quant(
            TensorSpec(shape, y_zero_point.dtype), y_scale, y_zero_point, 0, 0, y_zero_point.dtype))

    def run(self, impl, inputs, outputs, backend, launch=None):
        """``launch``: a recorder of the packed path's launches (ops/quant_conv_plan.py)."""
        x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
        bias = inputs[8] if len(inputs) > 8 and inputs[8] is not None else np.zeros(1, np.int32)
        self._launch(impl, x, w, x_zp, w_zp, bias, x_scale, w_scale, y_scale, y_zp, outputs[0], True, backend,
                     clamp=self.clamp(y_scale, y_zp), launch=launch)

    def clamp(self, y_scale, y_zp):
        """(lo, hi) the output is clamped to besides its type's range: None here (see FusedQLinearConv)."""
        return None
