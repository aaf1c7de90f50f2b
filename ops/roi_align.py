"""ONNX RoiAlign and MaxRoiPool: pooling regions of interest into fixed-size grids.

RoiAlign (opset 10: output_half_pixel coordinates; opset 16+: the
``coordinate_transformation_mode`` attribute, half_pixel by default): pool each region of
interest into an ``output_height`` x ``output_width`` grid of bins, a bin being the average
(or max) of ``sampling_ratio``² bilinear samples (or ceil(roi size / bins) per axis when 0).

Max mode follows the reference (and onnxruntime): a sample's value is the largest of its
four weighted corner terms, not their sum.  One kernel computes one output element per
step in f64, so every float dtype shares its arithmetic.

MaxRoiPool (opset 1+, Fast R-CNN's RoI pooling as Caffe and onnxruntime compute it): roi
corners scaled and rounded (half away from zero) to pixels, the inclusive box cut into
``pooled_shape`` bins of floor/ceil pixel bounds, each bin the max of its pixels (0 when
empty).
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, f64, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS, require_dtype

T = dsl.TypeVar("T")

MODES = ("avg", "max")
COORDINATE_MODES = ("half_pixel", "output_half_pixel")


@dsl.kernel
def roi_align_kernel(x: In[T, 4], rois: In[T, 2], batch: In[i64], y: Out[T, 4], scale: f32,
                     half_pixel: bool_, max_mode: bool_, ratio: i64):
    """y[r, c, ph, pw]: the pooled bilinear samples of bin (ph, pw) of roi r in image batch[r]."""
    channels = x.shape[1]
    height = x.shape[2]
    width = x.shape[3]
    oh = y.shape[2]
    ow = y.shape[3]
    off = f64(0.5) if half_pixel else f64(0)
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        pw = i % ow
        ph = (i // ow) % oh
        c = (i // (ow * oh)) % channels
        r = i // (ow * oh * channels)
        x0 = f64(rois[r, 0]) * f64(scale) - off
        y0 = f64(rois[r, 1]) * f64(scale) - off
        roi_w = f64(rois[r, 2]) * f64(scale) - off - x0
        roi_h = f64(rois[r, 3]) * f64(scale) - off - y0
        if not half_pixel:
            roi_w = max(roi_w, f64(1))
            roi_h = max(roi_h, f64(1))
        bin_h = roi_h / f64(oh)
        bin_w = roi_w / f64(ow)
        grid_h = ratio if ratio > 0 else i64(dsl.ceil(roi_h / f64(oh)))
        grid_w = ratio if ratio > 0 else i64(dsl.ceil(roi_w / f64(ow)))
        base = (batch[r] * channels + c) * height * width
        acc = f64(0)
        first = True
        for iy in range(grid_h):
            sy = y0 + f64(ph) * bin_h + (f64(iy) + 0.5) * bin_h / f64(grid_h)
            for ix in range(grid_w):
                sx = x0 + f64(pw) * bin_w + (f64(ix) + 0.5) * bin_w / f64(grid_w)
                v = f64(0)
                if sy >= -1.0 and sy <= f64(height) and sx >= -1.0 and sx <= f64(width):
                    yy = max(sy, f64(0))
                    xx = max(sx, f64(0))
                    yl = i64(yy)
                    xl = i64(xx)
                    yh = yl + 1
                    xh = xl + 1
                    if yl >= height - 1:  # at the last row/column both taps are that one
                        yl = height - 1
                        yh = yl
                        yy = f64(yl)
                    if xl >= width - 1:
                        xl = width - 1
                        xh = xl
                        xx = f64(xl)
                    ly = yy - f64(yl)
                    lx = xx - f64(xl)
                    t1 = (1 - ly) * (1 - lx) * f64(x.flat[base + yl * width + xl])
                    t2 = (1 - ly) * lx * f64(x.flat[base + yl * width + xh])
                    t3 = ly * (1 - lx) * f64(x.flat[base + yh * width + xl])
                    t4 = ly * lx * f64(x.flat[base + yh * width + xh])
                    v = max(t1, t2, t3, t4) if max_mode else t1 + t2 + t3 + t4
                if max_mode:
                    acc = v if first else max(acc, v)
                else:
                    acc += v
                first = False
        if not max_mode:
            acc = acc / f64(max(grid_h * grid_w, 1))
        y[r, c, ph, pw] = acc


class _RoiAlign(dsl.Op):
    mode: str = "avg"
    output_height: int = 1
    output_width: int = 1
    sampling_ratio: int = 0
    spatial_scale: float = 1.0
    kernels = {"default": roi_align_kernel}
    replay = False  # run() range-checks batch_indices at every run
    allowed = FLOATS

    def half_pixel(self) -> bool:
        return False

    def verify(self, x, rois, batch_indices):
        require_dtype("RoiAlign", x, self.allowed, "X")
        if rois.dtype != x.dtype:
            raise VerifyError(f"RoiAlign rois must have X's dtype {x.dtype}, got {rois}")
        require_dtype("RoiAlign", batch_indices, (dsl.i64,), "batch_indices")
        if self.mode not in MODES:
            raise VerifyError(f"RoiAlign mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.output_height < 1 or self.output_width < 1:
            raise VerifyError(f"RoiAlign output_height/output_width must be >= 1, got "
                              f"{self.output_height} x {self.output_width}")
        if self.sampling_ratio < 0:
            raise VerifyError(f"RoiAlign sampling_ratio must be >= 0 (0: adaptive), got {self.sampling_ratio}")
        if x.ndim != 4:
            raise VerifyError(f"RoiAlign X must be (N, C, H, W), got {x}")
        if rois.ndim != 2 or rois.shape[1] not in (None, 4):
            raise VerifyError(f"RoiAlign rois must be (num_rois, 4) as (x1, y1, x2, y2), got {rois}")
        if batch_indices.ndim != 1 or None not in (rois.shape[0], batch_indices.shape[0]) \
                and rois.shape[0] != batch_indices.shape[0]:
            raise VerifyError(f"RoiAlign batch_indices must be (num_rois,) matching rois {rois}, got {batch_indices}")

    def infer(self, x, rois, batch_indices):
        n = rois.shape[0] if rois.shape[0] is not None else batch_indices.shape[0]
        return TensorSpec((n, x.shape[1], self.output_height, self.output_width), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, rois, batch = inputs
        if batch.size and (batch.min() < 0 or batch.max() >= x.shape[0]):
            raise VerifyError(f"RoiAlign batch_indices must lie in [0, {x.shape[0]}), got {batch.min()}..{batch.max()}")
        impl(x, rois, batch, outputs[0], scale=float(self.spatial_scale), half_pixel=self.half_pixel(),
             max_mode=self.mode == "max", ratio=int(self.sampling_ratio), backend=backend)


@dsl.op("RoiAlign", since=10, until=15)
class RoiAlign10(_RoiAlign):
    """Roi corners scale to pixel coordinates without a half-pixel shift (output_half_pixel)."""
    allowed = (dsl.f16, f32, f64)


@dsl.op("RoiAlign", since=16)
class RoiAlign(_RoiAlign):
    """``coordinate_transformation_mode``: half_pixel shifts the scaled corners by -0.5."""
    coordinate_transformation_mode: str = "half_pixel"

    def half_pixel(self) -> bool:
        return self.coordinate_transformation_mode == "half_pixel"

    def verify(self, x, rois, batch_indices):
        if self.coordinate_transformation_mode not in COORDINATE_MODES:
            raise VerifyError(f"RoiAlign coordinate_transformation_mode {self.coordinate_transformation_mode!r} "
                              f"is not one of {', '.join(COORDINATE_MODES)}")
        super().verify(x, rois, batch_indices)


@dsl.func
def round_half_away(v):
    """C's round(): halves away from zero, as the roi corners are rounded in Caffe/onnxruntime."""
    return dsl.floor(v + 0.5) if v >= 0 else -dsl.floor(0.5 - v)


@dsl.kernel
def max_roi_pool_kernel(x: In[T, 4], rois: In[T, 2], y: Out[T, 4], scale: f32):
    """y[r, c, ph, pw]: the max of bin (ph, pw) of roi r = (batch, x1, y1, x2, y2)."""
    channels = x.shape[1]
    height = x.shape[2]
    width = x.shape[3]
    oh = y.shape[2]
    ow = y.shape[3]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        pw = i % ow
        ph = (i // ow) % oh
        c = (i // (ow * oh)) % channels
        r = i // (ow * oh * channels)
        n = i64(rois[r, 0])
        x1 = i64(round_half_away(f64(rois[r, 1]) * f64(scale)))
        y1 = i64(round_half_away(f64(rois[r, 2]) * f64(scale)))
        x2 = i64(round_half_away(f64(rois[r, 3]) * f64(scale)))
        y2 = i64(round_half_away(f64(rois[r, 4]) * f64(scale)))
        bin_h = f64(max(y2 - y1 + 1, 1)) / f64(oh)
        bin_w = f64(max(x2 - x1 + 1, 1)) / f64(ow)
        h0 = min(max(i64(dsl.floor(f64(ph) * bin_h)) + y1, 0), height)
        h1 = min(max(i64(dsl.ceil(f64(ph + 1) * bin_h)) + y1, 0), height)
        w0 = min(max(i64(dsl.floor(f64(pw) * bin_w)) + x1, 0), width)
        w1 = min(max(i64(dsl.ceil(f64(pw + 1) * bin_w)) + x1, 0), width)
        best = f64(0)
        if h1 > h0 and w1 > w0:
            base = (n * channels + c) * height * width
            best = f64(x.flat[base + h0 * width + w0])
            for hh in range(h0, h1):
                for ww in range(w0, w1):
                    best = max(best, f64(x.flat[base + hh * width + ww]))
        y[r, c, ph, pw] = best


@dsl.op("MaxRoiPool", since=1)
class MaxRoiPool(dsl.Op):
    """X (N, C, H, W), rois (num_rois, 5) as (batch_index, x1, y1, x2, y2) -> (num_rois, C, *pooled_shape)."""
    pooled_shape: Tuple[int, ...]
    spatial_scale: float = 1.0
    kernels = {"default": max_roi_pool_kernel}
    replay = False  # run() range-checks the rois' batch indices at every run

    def verify(self, x, rois):
        require_dtype("MaxRoiPool", x, FLOATS, "X")
        if rois.dtype != x.dtype or rois.ndim != 2 or rois.shape[1] not in (None, 5):
            raise VerifyError(f"MaxRoiPool rois must be (num_rois, 5) as (batch_index, x1, y1, x2, y2) in X's "
                              f"dtype {x.dtype}, got {rois}")
        if x.ndim != 4:
            raise VerifyError(f"MaxRoiPool X must be (N, C, H, W), got {x}")
        if len(self.pooled_shape) != 2 or min(self.pooled_shape) < 1:
            raise VerifyError(f"MaxRoiPool pooled_shape must be 2 positive ints (height, width), "
                              f"got {list(self.pooled_shape)}")

    def infer(self, x, rois):
        return TensorSpec((rois.shape[0], x.shape[1]) + tuple(self.pooled_shape), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, rois = inputs
        batch = rois[:, 0].astype(np.float64) if rois.size else np.zeros(0)
        if batch.size and (batch.min() < 0 or batch.max() >= x.shape[0]):
            raise VerifyError(f"MaxRoiPool rois' batch indices must lie in [0, {x.shape[0]}), got "
                              f"{batch.min()}..{batch.max()}")
        if outputs[0].size:
            impl(x, rois, outputs[0], scale=float(self.spatial_scale), backend=backend)
