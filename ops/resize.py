"""Resize (opsets 10, 11, 13, 18, 19) and the deprecated Upsample (7-9).

Resizing is separable: ``run`` resizes one axis at a time (the last resized axis first), each
pass one launch of ``resize_axis_kernel`` over a 3-D view (outer, axis, inner).  A pass reads a
small per-axis table built here from the coordinate transformation: for every output position
the source indices (``taps`` of them; edge-clamped) and their weights, or -1 for an
extrapolated position (tf_crop_and_resize).  Nearest is one tap copied as is; linear is 2
taps, cubic 4, and antialiased downscaling widens both by 1/scale.  Passes between the first
and the last work in f32 (f64 for f64 and 32/64-bit integer data); an integer result is
rounded half to even and saturated, as ONNX's reference does.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl import In, Out, f64, i32, i64
from dsl.lang.types import from_numpy
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.gather import NUMERIC, norm_axis, prod

T = dsl.TypeVar("T")
U = dsl.TypeVar("U")
W = dsl.TypeVar("W")

FLOATS = (dsl.f16, dsl.bf16, dsl.f32, dsl.f64)
WIDE = (dsl.f64, dsl.i32, dsl.u32, dsl.i64, dsl.u64)  # intermediates in f64
MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize")
POLICIES = ("stretch", "not_larger", "not_smaller")


@dsl.kernel
def resize_axis_kernel(x: In[T, 3], idx: In[i64, 2], w: In[W, 2], y: Out[U, 3], extrapolation: f64,
                       nearest: i32, to_int: i32, lo: f64, hi: f64):
    """y[o, j, :] = sum_q w[j, q] * x[o, idx[j, q], :] (or x[o, idx[j, 0], :] when nearest,
    or the extrapolation value when idx[j, 0] < 0)."""
    n_out = y.shape[1]
    inner = y.shape[2]
    taps = idx.shape[1]
    lo_r, hi_r = dsl.split(y.shape[0] * n_out)
    for r in range(lo_r, hi_r):
        o = r // n_out
        j = r - o * n_out
        k0 = idx[j, 0]
        if k0 < 0:
            for t in range(inner):
                y[o, j, t] = extrapolation
        elif nearest != 0:
            for t in range(inner):
                y[o, j, t] = x[o, k0, t]
        else:
            for t in range(inner):
                acc = w[j, 0] * x[o, k0, t]
                for q in range(1, taps):
                    acc += w[j, q] * x[o, idx[j, q], t]
                if to_int != 0:
                    f = dsl.floor(acc)
                    d = acc - f
                    if d > 0.5 or (d == 0.5 and f - 2.0 * dsl.floor(f * 0.5) != 0):
                        f += 1.0
                    y[o, j, t] = dsl.clamp(f, lo, hi)
                else:
                    y[o, j, t] = acc


# --------------------------------------------------------------------------- coefficient tables

def source_coords(transform: str, n_in: int, n_out: int, scale: float, roi: Tuple[float, float]):
    """x_original of every output position, and which ones are extrapolated (tf_crop_and_resize)."""
    y = np.arange(n_out, dtype=np.float64)
    out_w = scale * n_in
    ext = np.zeros(n_out, bool)
    if transform == "align_corners":
        x = np.zeros(n_out) if out_w == 1 else y * (n_in - 1) / (out_w - 1)
    elif transform == "asymmetric":
        x = y / scale
    elif transform == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif transform == "tf_crop_and_resize":
        start, end = roi
        if out_w == 1:
            x = np.full(n_out, (end - start) * (n_in - 1) / 2)
        else:
            x = y * (end - start) * (n_in - 1) / (out_w - 1)
        x = x + start * (n_in - 1)
        ext = (x < 0) | (x > n_in - 1)
    elif transform == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif transform == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # half_pixel
        x = (y + 0.5) / scale - 0.5
    return x, ext


def cubic_weight(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def axis_table(op, n_in: int, n_out: int, scale: float, roi: Tuple[float, float], dtype) -> Tuple:
    """(idx i64 (n_out, taps), weights (n_out, taps)) for one resized axis."""
    x, ext = source_coords(op.transform(), n_in, n_out, scale, roi)
    mode = op.mode
    if mode == "nearest":
        nm = op.nearest()
        if nm == "round_prefer_floor":
            k = np.ceil(x - 0.5)
        elif nm == "round_prefer_ceil":
            k = np.floor(x + 0.5)
        elif nm == "floor":
            k = np.floor(x)
        elif nm == "ceil":
            k = np.ceil(x)
        else:  # "simple" (opset 10 and Upsample): ceil when downscaling, else floor
            k = np.ceil(x) if scale < 1 else np.floor(x)
        idx = np.clip(k, 0, n_in - 1).astype(np.int64)[:, None]
        w = np.ones((n_out, 1))
    else:
        base = np.floor(x)
        integral = x == base
        ratio = np.where(integral, 1.0, x - base)
        s = min(scale, 1.0) if op.antialias_on() else 1.0
        if mode == "linear":
            first = int(math.floor(-1 / s) + 1)
        else:
            first = int(math.floor(-2 / s) + 1)
        offsets = np.arange(first, 2 - first, dtype=np.float64)  # relative to floor(x)
        taps = len(offsets)
        dist = (offsets[None, :] - ratio[:, None]) * s
        if mode == "linear":
            w = np.clip(1 - np.abs(dist), 0, 1)
        else:
            w = cubic_weight(dist, op.cubic_coeff_a)
        if s < 1:
            w = w / w.sum(axis=1, keepdims=True)
        start = base - taps // 2 + np.where(integral, 0, 1)
        raw = start[:, None].astype(np.int64) + np.arange(taps)[None, :]
        if op.exclude_outside:
            w = np.where((raw < 0) | (raw >= n_in), 0.0, w)
            total = w.sum(axis=1, keepdims=True)
            w = w / np.where(total == 0, 1.0, total)
        idx = np.clip(raw, 0, n_in - 1)
    idx = np.ascontiguousarray(idx, np.int64)
    idx[ext, 0] = -1
    return idx, np.ascontiguousarray(w, dtype)


# --------------------------------------------------------------------------- ops

class _Resize(dsl.Op):
    op_type = "Resize"
    mode: str = "nearest"
    kernels = {"default": resize_axis_kernel}
    transforms = TRANSFORMS
    has_roi = True

    # per-opset knobs (overridden below)
    def transform(self) -> str:
        return getattr(self, "coordinate_transformation_mode", "asymmetric")

    def nearest(self) -> str:
        return getattr(self, "nearest_mode", "simple")

    def antialias_on(self) -> bool:
        return bool(getattr(self, "antialias", 0))

    exclude_outside = 0
    cubic_coeff_a = -0.75

    def _axes(self, rank: int) -> List[int]:
        ax = getattr(self, "axes", None)
        if not ax:
            return list(range(rank))
        out = [norm_axis("Resize", a, rank, "axes") for a in ax]
        if len(set(out)) != len(out):
            raise VerifyError(f"Resize axes {list(ax)} repeat an axis")
        return out

    def _check(self, X):
        if X.dtype not in NUMERIC:
            raise VerifyError(f"{self.op_type} input 'X' has dtype {X.dtype}; accepted: {', '.join(map(str, NUMERIC))}")
        if self.mode not in MODES[:self.n_modes]:
            raise VerifyError(f"{self.op_type} mode {self.mode!r} is not accepted; accepted: "
                              f"{', '.join(MODES[:self.n_modes])}")
        t = self.transform()
        if t not in self.transforms:
            raise VerifyError(f"{self.op_type} coordinate_transformation_mode {t!r} is not accepted at opset "
                              f"{self.since}; accepted: {', '.join(self.transforms)}")
        nm = self.nearest()
        if nm != "simple" and nm not in NEAREST_MODES:
            raise VerifyError(f"{self.op_type} nearest_mode {nm!r} is not accepted; accepted: {', '.join(NEAREST_MODES)}")
        pol = getattr(self, "keep_aspect_ratio_policy", "stretch")
        if pol not in POLICIES:
            raise VerifyError(f"Resize keep_aspect_ratio_policy {pol!r} is not accepted; accepted: {', '.join(POLICIES)}")

    n_modes = 3

    def plan(self, shape: Sequence[Optional[int]], roi, scales, sizes):
        """(output shape, per-axis scale, per-axis roi) from the values of roi/scales/sizes
        (numpy arrays or None); dims are None when a needed value is unknown."""
        rank = len(shape)
        axes = self._axes(rank)
        full_scale: List[Optional[float]] = [1.0] * rank
        out: List[Optional[int]] = list(shape)
        rois = [(0.0, 1.0)] * rank
        if roi is not None and roi.size and self.transform() == "tf_crop_and_resize":
            r = [float(v) for v in roi.reshape(-1)]
            if len(r) != 2 * len(axes):
                raise VerifyError(f"Resize roi has {len(r)} values; expected 2 * {len(axes)} (starts then ends)")
            for i, a in enumerate(axes):
                rois[a] = (r[i], r[i + len(axes)])
        if scales is not None and scales.size:
            s = [float(v) for v in scales.reshape(-1)]
            if len(s) != len(axes):
                raise VerifyError(f"{self.op_type} scales has {len(s)} values; expected one per resized axis "
                                  f"({len(axes)})")
            if any(v <= 0 for v in s):
                raise VerifyError(f"{self.op_type} scales must be positive, got {s}")
            for v, a in zip(s, axes):
                full_scale[a] = v
                out[a] = None if shape[a] is None else int(math.floor(v * shape[a]))
        elif sizes is not None and sizes.size:
            z = [int(v) for v in sizes.reshape(-1)]
            if len(z) != len(axes):
                raise VerifyError(f"Resize sizes has {len(z)} values; expected one per resized axis ({len(axes)})")
            if any(v < 0 for v in z):
                raise VerifyError(f"Resize sizes must be >= 0, got {z}")
            if any(shape[a] is None for a in axes):
                return tuple(None if a in axes else d for a, d in enumerate(shape)), None, rois
            for v, a in zip(z, axes):
                full_scale[a] = v / shape[a] if shape[a] else 1.0
                out[a] = v
            pol = getattr(self, "keep_aspect_ratio_policy", "stretch")
            if pol != "stretch":
                pick = min if pol == "not_larger" else max
                s = pick(full_scale[a] for a in axes)
                for a in axes:
                    full_scale[a] = s
                    out[a] = int(s * shape[a] + 0.5)
        else:
            return (None,) * rank, None, rois
        return tuple(out), full_scale, rois

    def infer_from(self, X, roi, scales, sizes):
        shape, _, _ = self.plan(X.shape, *(None if s is None or s.value is None else np.asarray(s.value)
                                           for s in (roi, scales, sizes)))
        return TensorSpec(shape, X.dtype)

    def launch(self, impl, x, y, roi, scales, sizes, backend):
        shape, scale, rois = self.plan(x.shape, roi, scales, sizes)
        work = np.float64 if from_numpy(x.dtype) in WIDE else np.float32
        passes = [a for a in range(x.ndim)
                  if not (shape[a] == x.shape[a] and scale[a] == 1.0 and rois[a] == (0.0, 1.0))]
        if not passes:  # identity: one nearest pass over the last axis copies
            passes = [x.ndim - 1] if x.ndim else []
        if not passes:
            y[...] = x  # 0-d input
            return
        is_int = np.issubdtype(y.dtype, np.integer)
        lo, hi = (float(np.iinfo(y.dtype).min), float(np.iinfo(y.dtype).max)) if is_int else (0.0, 0.0)
        extrap = float(getattr(self, "extrapolation_value", 0.0))
        cur = x
        for step, a in enumerate(reversed(passes)):
            last = step == len(passes) - 1
            new_shape = cur.shape[:a] + (shape[a],) + cur.shape[a + 1:]
            nearest = self.mode == "nearest"
            if last:
                dst = y
            else:
                dst = np.empty(new_shape, x.dtype if nearest else work)
            idx, w = axis_table(self, cur.shape[a], shape[a], scale[a], rois[a], work)
            outer, inner = prod(cur.shape[:a]), prod(cur.shape[a + 1:])
            impl(cur.reshape(outer, cur.shape[a], inner), idx, w, dst.reshape(outer, shape[a], inner), extrap,
                 int(nearest), int(is_int and last and not nearest), lo, hi, backend=backend)
            cur = dst


@dsl.op("Resize", since=10, until=10)
class Resize10(_Resize):
    """nearest / linear with scales; asymmetric coordinates."""
    n_modes = 2
    transforms = ("asymmetric",)

    def verify(self, X, scales):
        self._check(X)

    def infer(self, X, scales):
        return self.infer_from(X, None, scales, None)

    def run(self, impl, inputs, outputs, backend):
        self.launch(impl, inputs[0], outputs[0], None, inputs[1], None, backend)


class _Resize11(_Resize):
    coordinate_transformation_mode: str = "half_pixel"
    cubic_coeff_a: float = -0.75
    exclude_outside: int = 0
    extrapolation_value: float = 0.0
    nearest_mode: str = "round_prefer_floor"
    transforms = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize")

    def verify(self, X, roi=None, scales=None, sizes=None):
        self._check(X)
        given = [s for s in (scales, sizes) if s is not None and s.size != 0]
        if len(given) != 1:
            raise VerifyError(f"Resize takes exactly one of scales and sizes (the other absent or empty), "
                              f"got scales={scales}, sizes={sizes}")
        if sizes is not None and sizes.dtype != dsl.i64:
            raise VerifyError(f"Resize sizes must be i64, got {sizes}")
        if scales is not None and scales.dtype != dsl.f32:
            raise VerifyError(f"Resize scales must be f32, got {scales}")
        if self.transform() == "tf_crop_and_resize" and (roi is None or roi.size == 0):
            raise VerifyError("Resize coordinate_transformation_mode 'tf_crop_and_resize' needs the roi input")

    def infer(self, X, roi=None, scales=None, sizes=None):
        return self.infer_from(X, roi, scales, sizes)

    def run(self, impl, inputs, outputs, backend):
        ins = list(inputs) + [None] * (4 - len(inputs))
        self.launch(impl, ins[0], outputs[0], ins[1], ins[2], ins[3], backend)


@dsl.op("Resize", since=11, until=12)
class Resize11(_Resize11):
    transforms = _Resize11.transforms + ("tf_half_pixel_for_nn",)


@dsl.op("Resize", since=13, until=17)
class Resize13(_Resize11):
    pass


@dsl.op("Resize", since=18, until=18)
class Resize18(_Resize11):
    antialias: int = 0
    axes: Tuple[int, ...] = ()
    keep_aspect_ratio_policy: str = "stretch"


@dsl.op("Resize", since=19)
class Resize(Resize18):
    """Resize X by scales or to sizes: nearest / linear / cubic, every coordinate transformation
    mode of opset 19, antialias, axes and keep_aspect_ratio_policy."""
    transforms = TRANSFORMS


class _Upsample(_Resize):
    op_type = "Upsample"
    n_modes = 2
    transforms = ("asymmetric",)


@dsl.op("Upsample", since=7, until=8)
class Upsample7(_Upsample):
    scales: Tuple[float, ...] = ()

    def verify(self, X):
        self._check(X)
        if len(self.scales) != X.ndim or any(s < 1 for s in self.scales):
            raise VerifyError(f"Upsample scales {list(self.scales)} must give one value >= 1 per axis of {X}")

    def infer(self, X):
        return self.infer_from(X, None, TensorSpec((X.ndim,), dsl.f32, value=np.array(self.scales, np.float32)), None)

    def run(self, impl, inputs, outputs, backend):
        self.launch(impl, inputs[0], outputs[0], None, np.array(self.scales, np.float32), None, backend)


@dsl.op("Upsample", since=9, until=9)
class Upsample(_Upsample):
    """Deprecated: Resize with asymmetric coordinates (nearest floors, or linear)."""

    def verify(self, X, scales):
        self._check(X)

    def infer(self, X, scales):
        return self.infer_from(X, None, scales, None)

    def run(self, impl, inputs, outputs, backend):
        self.launch(impl, inputs[0], outputs[0], None, inputs[1], None, backend)
