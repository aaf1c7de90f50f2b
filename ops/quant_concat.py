"""QLinearConcat (com.microsoft, as ONNX Runtime's contrib op): Concat of 8-bit tensors, each
requantized from its own (scale, zero point) to the output's.

Inputs: Y_scale, Y_zero_point, then X_i, X_i_scale, X_i_zero_point for each part; attribute
``axis``.  Each part is y = saturate(rint(f32(x - x_zp) · x_scale / y_scale) + y_zp), the float
DequantizeLinear -> QuantizeLinear computed in f32 as those ops compute it, so a QDQ graph's
DQ -> Concat -> Q (ops/qdq_data_movement.py) gives the same integers; a part already on the
output's scale and zero point is copied.  It is what a QDQ graph's Concat becomes when its
inputs' scales differ (squeezenet's fire modules); with one scale everywhere a plain Concat of
the integers does the same, written in place by the producers.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, f32, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError

X = dsl.TypeVar("X")

INT8 = (dsl.i8, dsl.u8)


@dsl.kernel
def requantize_part(x: In[X, 2], y: Out[X, 2], col: i64, copy: i32, x_zp: f32, x_scale: f32, y_scale: f32,
                    y_zp: f32, qmin: f32, qmax: f32):
    """y[:, col:col + x.shape[1]] = x requantized (copy = 1: as it is).  Each work item walks its
    range row stretch by row stretch, so the inner loop is a contiguous one that vectorizes."""
    inner = x.shape[1]
    lo, hi = dsl.split(x.size)
    i = lo
    while i < hi:
        r = i // inner
        n = min(inner - (i - r * inner), hi - i)
        shift = r * (y.shape[1] - inner) + col  # y's flat index minus x's along this stretch
        if copy == 1:
            for j in range(i, i + n):
                y.flat[j + shift] = x.flat[j]
        else:
            for j in range(i, i + n):
                f = (f32(x.flat[j]) - x_zp) * x_scale
                y.flat[j + shift] = dsl.clamp(dsl.rint(f / y_scale) + y_zp, qmin, qmax)
        i += n


@dsl.op("QLinearConcat", domain="com.microsoft", since=1)
class QLinearConcat(dsl.Op):
    """Concat along ``axis`` of i8/u8 parts, each requantized to (Y_scale, Y_zero_point)."""

    axis: int = 0
    kernels = {"default": requantize_part}

    def plan(self, impl, inputs, outputs, backend):
        """run() reads every scale and zero point: recorded when they are constants, else None."""
        params = [0, 1] + [i for i in range(3, len(inputs)) if (i - 2) % 3]
        return dsl.recorded_plan_when_constant(*params)(self, impl, inputs, outputs, backend)

    def _parts(self, inputs):
        rest = list(inputs[2:])
        return [tuple(rest[i:i + 3]) for i in range(0, len(rest), 3)]

    def verify(self, y_scale, y_zero_point, *parts):
        if len(parts) < 3 or len(parts) % 3:
            raise VerifyError(f"QLinearConcat takes Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) for "
                              f"each part, got {len(parts)} inputs after Y_zero_point")
        if y_scale.dtype != dsl.f32 or y_scale.size not in (None, 1):
            raise VerifyError(f"QLinearConcat Y_scale must be an f32 scalar, got {y_scale}")
        if y_zero_point.dtype not in INT8 or y_zero_point.size not in (None, 1):
            raise VerifyError(f"QLinearConcat Y_zero_point must be an int8 or uint8 scalar, got {y_zero_point}")
        first = parts[0]
        for k, (x, s, z) in enumerate(self._parts((None, None) + parts)):
            if x.dtype != y_zero_point.dtype or z.dtype != x.dtype or z.size not in (None, 1):
                raise VerifyError(f"QLinearConcat part {k}: X and X_zero_point must be scalars of Y_zero_point's "
                                  f"dtype {y_zero_point.dtype}, got {x} and {z}")
            if s.dtype != dsl.f32 or s.size not in (None, 1):
                raise VerifyError(f"QLinearConcat part {k}: X_scale must be an f32 scalar, got {s}")
            if x.ndim != first.ndim:
                raise VerifyError(f"QLinearConcat part {k} {x} has another rank than part 0 {first}")
        if not -first.ndim <= self.axis < first.ndim:
            raise VerifyError(f"QLinearConcat axis {self.axis} is out of range for rank {first.ndim}")

    def infer(self, y_scale, y_zero_point, *parts):
        xs = parts[0::3]
        axis = self.axis % xs[0].ndim
        shape = list(xs[0].shape)
        for k, x in enumerate(xs[1:], 1):
            for d, (a, b) in enumerate(zip(shape, x.shape)):
                if d != axis and a is not None and b is not None and a != b:
                    raise VerifyError(f"QLinearConcat part {k} {x} differs from part 0 {xs[0]} off axis {axis}")
        sizes = [x.shape[axis] for x in xs]
        shape[axis] = None if any(s is None for s in sizes) else sum(sizes)
        return TensorSpec(tuple(shape), y_zero_point.dtype)

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        axis = self.axis % y.ndim
        outer = int(np.prod(y.shape[:axis], dtype=np.int64))
        y2 = y.reshape(outer, -1)
        sy = float(np.asarray(inputs[0]).reshape(-1)[0])
        zy = int(np.asarray(inputs[1]).reshape(-1)[0])
        info = np.iinfo(y.dtype)
        col = 0
        for x, s, z in self._parts(inputs):
            sx = float(np.asarray(s).reshape(-1)[0])
            zx = int(np.asarray(z).reshape(-1)[0])
            x2 = x.reshape(outer, -1)
            same = int(np.float32(sx) == np.float32(sy) and zx == zy)
            impl(x2, y2, col, same, float(zx), sx, sy, float(zy), float(info.min), float(info.max), backend=backend)
            col += x2.shape[1]
