"""RoiAlign on every backend against a numpy reference (avg/max, both coordinate modes,
fixed and adaptive sampling, opset 10), plus errors."""
import math

import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(3)


def reference(x, rois, batch, oh, ow, ratio, scale, mode="avg", half_pixel=True):
    _, c, h, w = x.shape
    out = np.zeros((len(rois), c, oh, ow))
    off = 0.5 if half_pixel else 0.0
    for r, (x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        sx, sy = x1 * scale - off, y1 * scale - off
        rw, rh = x2 * scale - off - sx, y2 * scale - off - sy
        if not half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio or math.ceil(rh / oh)
        gw = ratio or math.ceil(rw / ow)
        img = x[batch[r]].astype(np.float64)
        for ph in range(oh):
            for pw in range(ow):
                vals = []
                for iy in range(gh):
                    py = sy + ph * rh / oh + (iy + 0.5) * rh / oh / gh
                    for ix in range(gw):
                        px = sx + pw * rw / ow + (ix + 0.5) * rw / ow / gw
                        if py < -1 or py > h or px < -1 or px > w:
                            vals.append(np.zeros(c))
                            continue
                        py_, px_ = max(py, 0.0), max(px, 0.0)
                        y0, x0 = min(int(py_), h - 1), min(int(px_), w - 1)
                        py_, px_ = (float(y0) if y0 == h - 1 else py_), (float(x0) if x0 == w - 1 else px_)
                        y1_, x1_ = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                        ly, lx = py_ - y0, px_ - x0
                        terms = [(1 - ly) * (1 - lx) * img[:, y0, x0], (1 - ly) * lx * img[:, y0, x1_],
                                 ly * (1 - lx) * img[:, y1_, x0], ly * lx * img[:, y1_, x1_]]
                        vals.append(np.max(terms, axis=0) if mode == "max" else np.sum(terms, axis=0))
                vals = np.array(vals)
                out[r, :, ph, pw] = vals.max(axis=0) if mode == "max" else vals.sum(axis=0) / max(gh * gw, 1)
    return out


X = RNG.standard_normal((2, 3, 8, 9)).astype(np.float32)
ROIS = np.array([[0, 0, 8, 7], [1.5, 2.2, 6.1, 5.3], [-2, -1, 3, 12], [4, 4, 4.2, 4.3]], np.float32)
BATCH = np.array([0, 1, 1, 0], np.int64)


@pytest.mark.parametrize("mode,ctm,ratio", [("avg", "half_pixel", 2), ("max", "output_half_pixel", 0),
                                            ("avg", "output_half_pixel", 0)])
def test_modes(backend, mode, ctm, ratio):
    y = ops.RoiAlign(X, ROIS, BATCH, output_height=3, output_width=2, sampling_ratio=ratio, spatial_scale=0.75,
                     mode=mode, coordinate_transformation_mode=ctm, backend=backend)
    want = reference(X, ROIS, BATCH, 3, 2, ratio, 0.75, mode, ctm == "half_pixel")
    assert y.shape == (4, 3, 3, 2) and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_f64_and_f16(backend):
    for dt, tol in ((np.float64, 1e-12), (np.float16, 2e-3)):
        y = ops.RoiAlign(X.astype(dt), ROIS.astype(dt), BATCH, output_height=2, output_width=2, backend=backend)
        assert y.dtype == dt
        want = reference(X.astype(dt), ROIS.astype(dt), BATCH, 2, 2, 0, 1.0)
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)


def test_opset10_in_a_graph(backend):
    g = dsl.Graph("roi")
    xi = g.input("x", (None, 3, 8, 9), dsl.f32)
    ri = g.input("rois", (None, 4), dsl.f32)
    bi = g.input("b", (None,), dsl.i64)
    g.output(ops.RoiAlign10(xi, ri, bi, output_height=2, output_width=3, sampling_ratio=1), "y")
    y = g.compile(backend=backend).run({"x": X, "rois": ROIS, "b": BATCH})["y"]
    np.testing.assert_allclose(y, reference(X, ROIS, BATCH, 2, 3, 1, 1.0, half_pixel=False), rtol=1e-5, atol=1e-5)


def test_errors():
    with pytest.raises(VerifyError, match="RoiAlign mode 'min' is not one of avg, max"):
        ops.RoiAlign(X, ROIS, BATCH, mode="min", backend="interpreter")
    with pytest.raises(VerifyError, match=r"rois must be \(num_rois, 4\)"):
        ops.RoiAlign(X, ROIS[:, :3].copy(), BATCH, backend="interpreter")
    with pytest.raises(VerifyError, match=r"batch_indices must lie in \[0, 2\), got 0..5"):
        ops.RoiAlign(X, ROIS, np.array([0, 5, 0, 0], np.int64), backend="interpreter")
    with pytest.raises(VerifyError, match="coordinate_transformation_mode 'corner' is not one of"):
        ops.RoiAlign(X, ROIS, BATCH, coordinate_transformation_mode="corner", backend="interpreter")


def max_roi_pool_reference(x, rois, pooled, scale):
    """Fast R-CNN RoI max pooling (Caffe/onnxruntime): rounded corners, floor/ceil bins, empty bins 0."""
    _, c, h, w = x.shape
    out = np.zeros((len(rois), c) + pooled, x.dtype)
    rnd = lambda v: int(np.floor(v + 0.5)) if v >= 0 else -int(np.floor(0.5 - v))  # noqa: E731
    for r, (b, x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        x1, y1, x2, y2 = (rnd(v * scale) for v in (x1, y1, x2, y2))
        bh, bw = max(y2 - y1 + 1, 1) / pooled[0], max(x2 - x1 + 1, 1) / pooled[1]
        for i in range(pooled[0]):
            h0, h1 = (min(max(int(f(v)) + y1, 0), h) for f, v in ((np.floor, i * bh), (np.ceil, (i + 1) * bh)))
            for j in range(pooled[1]):
                w0, w1 = (min(max(int(f(v)) + x1, 0), w) for f, v in ((np.floor, j * bw), (np.ceil, (j + 1) * bw)))
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def test_max_roi_pool(backend):
    rois = np.array([[0, 0, 0, 10, 8], [1, 2.4, 1.5, 7.6, 6.5], [1, -3, -2, 4, 20], [0, 5, 5, 5, 5],
                     [1, 30, 30, 40, 40]], np.float32)                       # the last one lies outside: zeros
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    y = ops.MaxRoiPool(x, rois, pooled_shape=(3, 2), spatial_scale=0.5, backend=backend)
    assert y.shape == (5, 3, 3, 2)
    np.testing.assert_array_equal(y, max_roi_pool_reference(x, rois, (3, 2), 0.5))
    y = ops.MaxRoiPool(x.astype(np.float64), rois.astype(np.float64), pooled_shape=(2, 4), backend=backend)
    np.testing.assert_array_equal(y, max_roi_pool_reference(x.astype(np.float64), rois, (2, 4), 1.0))


def test_max_roi_pool_errors():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(VerifyError, match=r"MaxRoiPool rois must be \(num_rois, 5\)"):
        ops.MaxRoiPool(x, np.zeros((1, 4), np.float32), pooled_shape=(2, 2), backend="interpreter")
    with pytest.raises(VerifyError, match=r"batch indices must lie in \[0, 1\), got 2.0..2.0"):
        ops.MaxRoiPool(x, np.array([[2, 0, 0, 1, 1]], np.float32), pooled_shape=(2, 2), backend="interpreter")
