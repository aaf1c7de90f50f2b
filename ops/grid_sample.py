"""ONNX GridSample (opset 16: 2-D, modes bilinear/nearest/bicubic; opset 20+: 2-D and 3-D,
modes linear/nearest/cubic): sample an image at the normalized coordinates of a grid.

Each output element denormalizes its grid point (``align_corners`` picks whether -1/1 are
the centers or the edges of the corner pixels), moves it inside the image for ``border`` and
``reflection`` padding, then sums the taps of a separable filter -- 1 (nearest, rounded half
to even), 2 (linear) or 4 (cubic, Keys with a = -0.75) per axis -- fetching each tap with the
padding rule (0 outside for ``zeros``).  A 2-D image is a 3-D one of depth 1 with one tap
along depth, so one kernel serves both.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS, NUMERIC
from ops.quant import round_half_even

T = dsl.TypeVar("T")
G = dsl.TypeVar("G")

NEAREST, LINEAR, CUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
MODES = {"nearest": NEAREST, "linear": LINEAR, "cubic": CUBIC}
MODES_16 = {"nearest": NEAREST, "bilinear": LINEAR, "bicubic": CUBIC}
PADDINGS = {"zeros": ZEROS, "border": BORDER, "reflection": REFLECTION}
CUBIC_A = -0.75


@dsl.func
def reflect(v, lo, hi):
    """Fold v into [lo, hi] by reflecting at the nearer border, repeatedly."""
    r = v
    span = hi - lo
    if v < lo:
        dx = lo - v
        n = i64(dx / span)
        rest = dx - n * span
        r = lo + rest if n % 2 == 0 else hi - rest
    elif v > hi:
        dx = v - hi
        n = i64(dx / span)
        rest = dx - n * span
        r = hi - rest if n % 2 == 0 else lo + rest
    return r


@dsl.func
def place(v, size, align, pad):
    """The grid coordinate in pixel units, moved inside for border/reflection padding."""
    x = (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2
    lo = f32(0) if align else f32(-0.5)
    hi = f32(size - 1) if align else f32(size) - f32(0.5)
    if x < lo or x > hi:
        if pad == BORDER:
            x = min(max(x, f32(0)), f32(size - 1))
        elif pad == REFLECTION:
            x = reflect(x, lo, hi)
    return x


@dsl.func
def tap_index(i, size, align, pad):
    """Where tap i reads, or -1 for a zero (outside, ``zeros`` padding)."""
    r = i
    if i < 0 or i >= size:
        if pad == ZEROS:
            r = -1
        elif pad == BORDER:
            r = min(max(i, 0), size - 1)
        else:
            lo = f32(0) if align else f32(-0.5)
            hi = f32(size - 1) if align else f32(size) - f32(0.5)
            r = i64(reflect(f32(i), lo, hi))
    return r


@dsl.func
def cubic_weight(t, k):
    """Keys' cubic weight of tap k (at offsets -1, 0, 1, 2) for fractional position t."""
    a = f32(CUBIC_A)
    x = t + 1
    if k == 1:
        x = t
    elif k == 2:
        x = 1 - t
    elif k == 3:
        x = 2 - t
    w = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    if k == 1 or k == 2:
        w = ((a + 2) * x - (a + 3)) * x * x + 1
    return w


@dsl.func
def weight(mode, t, k):
    w = f32(1)
    if mode == LINEAR:
        w = 1 - t if k == 0 else t
    elif mode == CUBIC:
        w = cubic_weight(t, k)
    return w


@dsl.kernel
def grid_sample_kernel(x: In[T], grid: In[G], y: Out[T], channels: i64, depth: i64, height: i64, width: i64,
                       spatial: i64, mode: i64, pad: i64, align: bool_):
    """x (N, C, D, H, W), grid (N, D', H', W', spatial), y (N, C, D', H', W')."""
    points = grid.size // (x.shape[0] * spatial)
    taps = 1 if mode == NEAREST else (2 if mode == LINEAR else 4)
    first = 0 if mode != CUBIC else -1
    tz_n = taps if spatial == 3 else 1
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        p = i % points
        nc = i // points
        n = nc // channels
        g = (n * points + p) * spatial
        fx = place(f32(grid.flat[g]), width, align, pad)
        fy = place(f32(grid.flat[g + 1]), height, align, pad)
        fz = f32(0)
        if spatial == 3:
            fz = place(f32(grid.flat[g + 2]), depth, align, pad)
        if mode == NEAREST:
            fx = round_half_even(fx)
            fy = round_half_even(fy)
            fz = round_half_even(fz)
        x0 = i64(dsl.floor(fx))
        y0 = i64(dsl.floor(fy))
        z0 = i64(dsl.floor(fz))
        tx = fx - f32(x0)
        ty = fy - f32(y0)
        tz = fz - f32(z0)
        base = nc * depth * height * width
        acc = f32(0)
        for kz in range(tz_n):
            zi = z0 + first + kz if spatial == 3 else 0
            wz = weight(mode, tz, kz) if spatial == 3 else f32(1)
            iz = tap_index(zi, depth, align, pad)
            for ky in range(taps):
                wy = weight(mode, ty, ky)
                iy = tap_index(y0 + first + ky, height, align, pad)
                for kx in range(taps):
                    ix = tap_index(x0 + first + kx, width, align, pad)
                    if ix >= 0 and iy >= 0 and iz >= 0:
                        wx = weight(mode, tx, kx)
                        acc += wz * wy * wx * f32(x.flat[base + (iz * height + iy) * width + ix])
        y.flat[i] = acc


class _GridSample(dsl.Op):
    align_corners: int = 0
    padding_mode: str = "zeros"
    kernels = {"default": grid_sample_kernel}
    modes = MODES
    max_spatial = 3

    def verify(self, x, grid):
        if self.mode not in self.modes:
            raise VerifyError(f"GridSample mode {self.mode!r} is not one of {', '.join(self.modes)}")
        if self.padding_mode not in PADDINGS:
            raise VerifyError(f"GridSample padding_mode {self.padding_mode!r} is not one of {', '.join(PADDINGS)}")
        if x.dtype not in NUMERIC:
            raise VerifyError(f"GridSample input must be numeric, got {x}")
        if grid.dtype not in FLOATS:
            raise VerifyError(f"GridSample grid must be a float tensor, got {grid}")
        spatial = x.ndim - 2
        if not 2 <= spatial <= self.max_spatial:
            shapes = "(N, C, H, W)" + (" or (N, C, D, H, W)" if self.max_spatial == 3 else "")
            raise VerifyError(f"GridSample input must be {shapes} at this opset, got {x}")
        if grid.ndim != x.ndim or grid.shape[-1] not in (None, spatial):
            raise VerifyError(f"GridSample grid must be (N, {', '.join(a + '_out' for a in 'DHW'[-spatial:])}, {spatial}) "
                              f"for input {x}, got {grid}")
        if x.shape[0] is not None and grid.shape[0] not in (None, x.shape[0]):
            raise VerifyError(f"GridSample grid batch {grid.shape[0]} differs from the input's {x.shape[0]}")

    def infer(self, x, grid):
        return TensorSpec(tuple(x.shape[:2]) + tuple(grid.shape[1:-1]), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, grid = inputs
        spatial = x.ndim - 2
        dims = (1,) * (3 - spatial) + tuple(x.shape[2:])
        impl(x, grid, outputs[0], x.shape[1], *dims, spatial, self.modes[self.mode], PADDINGS[self.padding_mode],
             bool(self.align_corners), backend=backend)


@dsl.op("GridSample", since=16, until=19)
class GridSample16(_GridSample):
    """2-D only; modes bilinear, nearest, bicubic."""

    mode: str = "bilinear"
    modes = MODES_16
    max_spatial = 2


@dsl.op("GridSample", since=20)
class GridSample(_GridSample):
    """2-D and 3-D; modes linear, nearest, cubic."""

    mode: str = "linear"



@dsl.kernel
def affine_grid_kernel(theta: In[G, 3], grid: Out[G], depth: i64, height: i64, width: i64, spatial: i64,
                       align: bool_):
    """grid[n, d, h, w] = theta[n] · (x_w, y_h, [z_d,] 1) with x, y, z the normalized pixel centers."""
    points = depth * height * width
    lo, hi = dsl.split(theta.shape[0] * points)
    for i in range(lo, hi):
        n = i // points
        p = i - n * points
        w = p % width
        h = (p // width) % height
        d = p // (width * height)
        x = base_coordinate(w, width, align)
        y = base_coordinate(h, height, align)
        z = base_coordinate(d, depth, align)
        for r in range(spatial):
            v = f32(theta[n, r, 0]) * x + f32(theta[n, r, 1]) * y
            if spatial == 3:
                v += f32(theta[n, r, 2]) * z + f32(theta[n, r, 3])
            else:
                v += f32(theta[n, r, 2])
            grid.flat[i * spatial + r] = v


@dsl.func
def base_coordinate(k, size, align):
    """Pixel k's normalized coordinate in [-1, 1]: centers of the corner pixels at ±1 with
    ``align`` (0 for a size of 1), else the image edges at ±1."""
    v = f32(0)
    if align:
        if size > 1:
            v = f32(2 * k) / f32(size - 1) - 1
    else:
        v = f32(2 * k + 1) / f32(size) - 1
    return v


@dsl.op("AffineGrid", since=20)
class AffineGrid(dsl.Op):
    """Sampling grid of an affine transform: theta (N, 2, 3) and size (N, C, H, W) -> (N, H, W, 2),
    or theta (N, 3, 4) and size (N, C, D, H, W) -> (N, D, H, W, 3); feeds GridSample."""

    align_corners: int = 0
    kernels = {"default": affine_grid_kernel}

    def _size(self, size):
        if size.value is None:
            return None
        return [int(v) for v in np.asarray(size.value).reshape(-1)]

    def verify(self, theta, size):
        if theta.dtype not in FLOATS or theta.ndim != 3 or theta.shape[1:] not in ((2, 3), (3, 4), (None, None)):
            raise VerifyError(f"AffineGrid theta must be (N, 2, 3) or (N, 3, 4) floats, got {theta}")
        if size.dtype != dsl.i64 or size.ndim != 1 or size.shape[0] not in (None, 4, 5):
            raise VerifyError(f"AffineGrid size must be an i64 (N, C, H, W) or (N, C, D, H, W) vector, got {size}")
        dims = self._size(size)
        if dims is not None and theta.shape[1] is not None and len(dims) - 2 != theta.shape[1]:
            raise VerifyError(f"AffineGrid theta {theta} does not match size {dims}: a 2-D size needs (N, 2, 3), "
                              f"a 3-D size (N, 3, 4)")

    def infer(self, theta, size):
        dims = self._size(size)
        if dims is None:
            rank = size.shape[0] or 4
            return TensorSpec((theta.shape[0],) + (None,) * (rank - 2) + (rank - 2,), theta.dtype)
        return TensorSpec((dims[0],) + tuple(dims[2:]) + (len(dims) - 2,), theta.dtype)

    def run(self, impl, inputs, outputs, backend):
        dims = [int(v) for v in inputs[1]]
        spatial = len(dims) - 2
        d, h, w = ([1] + dims[2:]) if spatial == 2 else dims[2:]
        impl(inputs[0], outputs[0], d, h, w, spatial, bool(self.align_corners), backend=backend)
