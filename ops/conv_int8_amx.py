"""Int8 2-D convolution as the matrix tile GEMM (ops/gemm_int8_amx.py): QLinearConv and ConvInteger
where ``dsl.target`` has "amx".

k×k convolutions of one stride whose weights have zero point 0 (once i8) and enough channels
(``implicit_pays``) take ops/conv_int8_implicit.py's implicit GEMM instead: the image, packed once
pixel-major, is the tiles' A side, read in place tap by tap.  For the others:

onnxruntime runs its int8 convolutions as an AMX GEMM after im2col; here likewise, per image,
Y (M, columns) = W (M, C·KH·KW) · B, so the output lands in NCHW with no transpose.  B, the
image, is packed in ``tdpbusd``'s B tile layout (panels of 16 columns, K/4 rows of 16 words of 4
taps, shifted to i8, with the column sums the zero point needs) by one of:

* ``pack_pointwise_int8``: 1×1 stride 1, a column per pixel, 4 vector loads a word row;
* ``pack_shifted_int8``: stride 1, a column per pixel of the zero-point-bordered image's padded
  width, so a tap of 16 columns is one vector load; ``crop_columns`` drops the extra columns;
  strided kernels (3×3/2, the stems) become such a convolution through ops/conv_int8_strided.py's
  space-to-depth copy and weights, and 1×1 strided ones are a pointwise convolution of a
  subsampled copy, but for small outputs on many channels (``IM2COL_MAX_PIXELS``);
* ops/conv_int8.py's im2col ``pack_im2col_int8`` (V = 8) for the rest, pixel by pixel where a
  panel passes an output row's end.

The weights are A, made once per constant array: shifted to u8 (their zero points with them),
padded with zero bytes to whole words; zero point, scale and bias per row (output channel).
Where M % 32 == 0 and K % 64 == 0 a QLinearConv folds the weights' row sums times x's zero point
into that bias, and the tiles read the weights in place (no packing pass).
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, i32, i64
from ops import packed_constants
from ops.conv_int8 import STRIDED_MAX_CHANNELS, pack_im2col, pad_image_int8, packed_conv_ok
from ops.conv_int8_strided import depth_weights, space_to_depth, strided_geometry_ok, taps_to_channels_int8
from ops.conv_int8_direct import launched
from ops.conv_int8_implicit import conv_int8_implicit, implicit_ok
from ops.gemm_int8 import THREADS
from ops.gemm_int8_amx import BLOCK, K_STEP, PANEL, amx_usable, qgemm_amx, qgemm_amx_packed_b

X = dsl.TypeVar("X")
# strided convolutions on more than STRIDED_MAX_CHANNELS channels take im2col's packing only up to
# this many output pixels: space-to-depth's 16/9 more products (3×3/2) cost less than im2col's
# pixel-by-pixel packing at 14×14 and more outputs (256x28x28 3×3/2: 1.77 against 2.25 ms),
# more at 7×7 (512x14x14: 1.65 against 1.46 ms); the same for 1×1/2 ones through a subsampled copy
# (256x56x56->512: 0.95 against 1.41 ms; 1024x14x14->2048: 0.91 against 0.75 ms); one thread on
# this Xeon, benchmarks/RESULTS.md
IM2COL_MAX_PIXELS = 64
Y = dsl.TypeVar("Y")


@dsl.kernel(threads=THREADS)
def pack_pointwise_int8(x: In[X, 3], x_zp: In[X, 1], bp: Out[i32, 2], bu: Out[i32, 2], bz: Out[i32, 2],
                        flip: i32):
    """x (N, C, P) of a 1×1, stride-1, unpadded convolution as the tile GEMM's B panels (16 pixels a
    panel, K/4 rows of 16 words of 4 channels, shifted to i8 by ``flip``), with the column sums the
    zero point needs (bu = C·zb - colsum, bz = zb; 0 past P).  Every channel's pixels are one
    stretch, so a word row of a whole panel is 4 vector loads (im2col's packing sees 16 pixels
    past one image row as a gather, pixel by pixel)."""
    cn = x.shape[1]
    pixels = x.shape[2]
    k4 = (cn + 3) // 4
    np_cols = bu.shape[1]
    npan = np_cols // 16
    zi = (i32(x_zp.flat[0]) & 0xFF) ^ flip
    zb = zi - ((zi & 0x80) << 1)
    lo, hi = dsl.split(x.shape[0] * npan, grid=True)
    for item in range(lo, hi):
        t = item // npan
        panel = item - t * npan
        p0 = panel * 16
        dst = t * bp.shape[1] + panel * k4 * 16
        xbase = t * cn * pixels + p0
        cs = dsl.splat(0, 16, i32)
        if p0 + 16 <= pixels and cn % 4 == 0:
            for q in range(k4):
                wv = dsl.splat(0, 16, i32)
                for j in dsl.static_range(4):
                    bv = (dsl.i32(x.vload(xbase + (4 * q + j) * pixels, 16)) & 0xFF) ^ flip
                    cs += bv - (bv & 0x80) * 2
                    wv = wv | bv * (1 << (8 * j))
                bp.vstore(dst + q * 16, wv)
            bu.vstore(t * np_cols + p0, i32(cn) * zb - cs)
            bz.vstore(t * np_cols + p0, dsl.splat(zb, 16, i32))
        else:
            for c in range(16):
                col = p0 + c
                s = i32(0)
                for q in range(k4):
                    w = i32(0)
                    if col < pixels:
                        for j in dsl.static_range(4):
                            if 4 * q + j < cn:
                                v = (i32(x.flat[xbase + (4 * q + j) * pixels + c]) & 0xFF) ^ flip
                                s += v - ((v & 0x80) << 1)
                                w = w | (v << (8 * j))
                    bp.flat[dst + q * 16 + c] = w
                bu.flat[t * np_cols + col] = i32(cn) * zb - s if col < pixels else i32(0)
                bz.flat[t * np_cols + col] = zb if col < pixels else i32(0)


@dsl.kernel(threads=THREADS)
def pack_shifted_int8(xp: In[X, 3], x_zp: In[X, 1], bp: Out[i32, 2], bu: Out[i32, 2], bz: Out[i32, 2],
                      geom: dsl.Vec[i64, 3], flip: i32):
    """The B panels of a stride-1 convolution over a zero-point-bordered image xp (N, C, HP·WP),
    geom = (KH, KW, WP), with a column per pixel of the *padded* width: column j = oh·WP + ow reads
    tap (c, kh, kw) at xp[c, j + kh·WP + kw], so a panel of 16 columns is one vector load per tap
    (im2col's columns of OW pixels pass row ends).  Columns with ow >= OW are computed and dropped
    (``crop_columns``); xp holds enough rows past the image that every load stays in its plane."""
    cn = xp.shape[1]
    plane = xp.shape[2]
    kh_n = geom[0]
    kw_n = geom[1]
    wp = geom[2]
    kk = cn * kh_n * kw_n
    k4 = (kk + 3) // 4
    np_cols = bu.shape[1]
    npan = np_cols // 16
    zi = (i32(x_zp.flat[0]) & 0xFF) ^ flip
    zb = zi - ((zi & 0x80) << 1)
    lo, hi = dsl.split(xp.shape[0] * npan, grid=True)
    for item in range(lo, hi):
        t = item // npan
        panel = item - t * npan
        p0 = panel * 16
        dst = t * bp.shape[1] + panel * k4 * 16
        xbase = t * cn * plane + p0
        cs = dsl.splat(0, 16, i32)
        ci = 0
        kh = 0
        kw = 0
        for q in range(k4):
            wv = dsl.splat(0, 16, i32)
            for j in dsl.static_range(4):
                if 4 * q + j < kk:
                    bv = (dsl.i32(xp.vload(xbase + ci * plane + kh * wp + kw, 16)) & 0xFF) ^ flip
                    cs += bv - (bv & 0x80) * 2
                    wv = wv | bv * (1 << (8 * j))
                    kw += 1
                    if kw == kw_n:
                        kw = 0
                        kh += 1
                        if kh == kh_n:
                            kh = 0
                            ci += 1
            bp.vstore(dst + q * 16, wv)
        bu.vstore(t * np_cols + p0, i32(kk) * zb - cs)
        bz.vstore(t * np_cols + p0, dsl.splat(zb, 16, i32))


@dsl.kernel(threads=THREADS)
def crop_columns(wide: In[Y, 3], y: Out[Y, 3]):
    """y (R, OH, OW) = wide (R, OH, WP)[:, :, :OW]: the shifted packing's product without its
    columns past each output row."""
    oh_n = y.shape[1]
    ow_n = y.shape[2]
    wp = wide.shape[2]
    lo, hi = dsl.split(y.shape[0] * oh_n)
    for r in range(lo, hi):
        for j in range(ow_n):
            y.flat[r * ow_n + j] = wide.flat[r * wp + j]


# the tiles take a convolution of at least this many input and output channels; shallower ones
# keep the VNNI direct kernel, faster there (one thread, alternated, the integrator's merge of
# sessions 18's slices: 64x56x56 3x3 0.54 vnni / 0.68 ms tiles, 64->256 1x1 0.41 / 0.48, the
# 3->64 stem 1.11 / 1.22, light_squeezenet 6.40 / 7.57 ms; 128x28x28 3x3 0.53 / 0.46,
# 256x14x14 3x3 0.50 / 0.39, 1024->256 1x1 on 14x14 0.38 / 0.25; 512x7x7 3x3 alike)
AMX_MIN_CHANNELS = 128
AMX_MIN_OUTPUTS = 64
# ... but k×k convolutions of one stride both ways (the implicit GEMM, ops/conv_int8_implicit.py)
# from this many input channels (stride 1, strided): on fewer its K, padded to 64-byte steps, wastes
# products (16x56x56->64 3x3 0.33 against the B panels' 0.13 ms, the stem's 12 space-to-depth
# channels 1.56 against 0.43), while strided ones save the space-to-depth copy (32x112x112->64 3x3/2
# 0.60 against 1.33 ms); 64x56x56 3x3 0.37 against the VNNI kernel's 0.51, 128x56x56 3x3/2 0.43
# against 1.54 (launches, one thread, benchmarks/bench_conv_int8_split.py)
IMPLICIT_MIN_CHANNELS = (64, 32)


def implicit_pays(channels: int, stride: int) -> bool:
    """Whether the implicit GEMM beats the B-panel packings on this many input channels."""
    return channels >= IMPLICIT_MIN_CHANNELS[stride > 1]


def amx_conv_ok(x, w, group: int, backend, kernel=None, strides=None, dilations=None) -> bool:
    """Whether the tile GEMM takes this convolution: one conv_int8 would take (2-D, one group, known
    shapes), deep enough for the tiles to beat the VNNI kernel (``AMX_MIN_CHANNELS``, or
    ``implicit_pays`` for a k×k one the implicit GEMM takes, given its ``kernel``, ``strides`` and
    ``dilations``), on a backend that runs the tiles on AMX."""
    if not (amx_usable(backend) and packed_conv_ok(x, w, group, backend) and w.shape[0] >= AMX_MIN_OUTPUTS):
        return False
    strides, dilations = tuple(strides or (1, 1)), tuple(dilations or (1, 1))
    if (kernel is not None and len(kernel) == 2 and kernel[0] * kernel[1] > 1 and len(set(strides)) == 1
            and dilations == (1, 1) and w.shape[1] % 4 == 0):
        return implicit_pays(w.shape[1], strides[0])
    return w.shape[1] >= AMX_MIN_CHANNELS


def _empty_aligned(shape, dtype) -> np.ndarray:
    """Uninitialised ``shape`` starting on a 64-byte line (a 64-byte tile row then spans one line)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + size].view(dtype).reshape(shape)


def _weights_u8(w: np.ndarray, w_zp: np.ndarray, images: int) -> tuple:
    """(A (images, M, K4·4) u8, its zero points (1, M|1) u8, its row sums (M,) i32): i8 weights and
    zero points shifted by 128, u8 ones as they are; K padded with zero bytes (they meet the
    packing's padding words)."""
    m = w.shape[0]
    kk = int(np.prod(w.shape[1:]))
    k4 = -(-kk // 4)
    flat = w.reshape(m, kk)
    zp = np.asarray(w_zp).reshape(1, -1)
    if w.dtype == np.int8:
        flat = (flat.view(np.uint8) ^ 0x80)
        zp = zp.astype(np.int8).view(np.uint8) ^ 0x80
    a = np.zeros((images, m, 4 * k4), np.uint8)
    a[:, :, :kk] = flat
    return a, np.ascontiguousarray(zp, np.uint8), a[0].sum(axis=1, dtype=np.int32)


def weights_u8(w: np.ndarray, w_zp: np.ndarray, images: int) -> tuple:
    """``_weights_u8`` once per constant weight array (and zero points, image count)."""
    if not packed_constants.immutable(w):
        return _weights_u8(w, w_zp, images)
    zp = np.asarray(w_zp)
    key = ("conv_int8_amx A",) + packed_constants.view_key(w) + (zp.tobytes(), zp.dtype.str, images)
    return packed_constants.once_per_array(w, key, lambda: _weights_u8(w, w_zp, images))


def conv_int8_amx(x, w, y, x_zp, w_zp, geom, mult=None, bias=None, y_zp=0, backend=None, clamp=None,
                  launch=None, implicit=None) -> None:
    """y (N, M, OH, OW) = conv(x, w) as ops/conv_int8.py's ``conv_int8`` (same arguments) on the tile
    GEMM; ``launch``: a recorder of every launch, for a model's launch plan; ``implicit``: whether
    ops/conv_int8_implicit.py's implicit GEMM runs it (None: wherever ``implicit_ok`` and
    ``implicit_pays``; False: the packings below, a benchmark's other side; True: the
    implicit GEMM or an error)."""
    backend = backend or "numba"
    geom = [int(g) for g in geom]
    if implicit is None:
        implicit = implicit_ok(x, w, w_zp, geom) and implicit_pays(x.shape[1], geom[2])
    if implicit:
        if not implicit_ok(x, w, w_zp, geom):
            raise ValueError(f"conv_int8_amx(implicit=True): the implicit GEMM takes 2-D convolutions of more than "
                             f"one tap, one stride both ways, no dilation, on C % 4 == 0 channels with weights whose "
                             f"zero point is 0 once i8; got x {x.shape}, w {w.shape} {w.dtype}, geom {geom[:8]}: "
                             f"pass implicit=None")
        conv_int8_implicit(x, w, y, x_zp, geom, mult, bias, y_zp, *(clamp or (None, None)), backend=backend,
                           launch=launch)
        return
    if shifted_geometry_ok(geom):
        _conv_shifted(x, w, y, x_zp, w_zp, geom, mult, bias, y_zp, backend, clamp, launch)
        return
    if geom[:2] == [1, 1] and geom[2] == geom[3] > 1 and geom[6:8] == [1, 1] and geom[8] * geom[9] > IM2COL_MAX_PIXELS:
        # 1×1 strided: a subsampled copy (ops/conv_int8_strided.py's taps image of one tap), then pointwise
        oh, ow = y.shape[2:]
        xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
        xt = np.empty(x.shape[:2] + (oh, ow), x.dtype)
        launched(taps_to_channels_int8, launch)(np.ascontiguousarray(x), xz, xt,
                                                np.asarray([1, 1, geom[2], geom[4], geom[5]], np.int64),
                                                backend=backend)
        conv_int8_amx(xt, w, y, xz, w_zp, [1, 1, 1, 1, 0, 0, 1, 1, oh, ow], mult, bias, y_zp, backend, clamp, launch)
        return
    if strided_geometry_ok(geom) and (x.shape[1] <= STRIDED_MAX_CHANNELS or geom[8] * geom[9] > IM2COL_MAX_PIXELS):
        s, pt, pl = geom[2], geom[4], geom[5]  # space-to-depth, then a stride-1 convolution
        wd = depth_weights(w, w_zp, s)
        ka, kb = wd.shape[2:]
        oh, ow = y.shape[2:]
        xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
        xs = np.empty((x.shape[0], x.shape[1] * s * s, oh + ka - 1, ow + kb - 1), x.dtype)
        space_to_depth(x, xz, xs, s, pt, pl, backend, launch)
        conv_int8_amx(xs, wd, y, xz, w_zp, [ka, kb, 1, 1, 0, 0, 1, 1, oh, ow], mult, bias, y_zp, backend, clamp,
                      launch, implicit=False)
        return
    n, m = y.shape[:2]
    pixels = y.shape[2] * y.shape[3]
    kk = int(np.prod(w.shape[1:]))
    k4 = -(-kk // 4)
    np_cols = -(-pixels // BLOCK) * BLOCK
    bp = _empty_aligned((n, np_cols * k4 + 15 * PANEL), np.int32)  # + 15 rows: the last K step's overreach
    bu = np.empty((n, np_cols), np.int32)
    bz = np.empty((n, np_cols), np.int32)
    xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
    if geom[:8] == [1, 1, 1, 1, 0, 0, 1, 1]:  # 1×1, stride 1, no padding: the image is B's columns
        launched(pack_pointwise_int8, launch)(np.ascontiguousarray(x).reshape(n, x.shape[1], pixels), xz, bp, bu, bz,
                                              0x80 if x.dtype == np.uint8 else 0, backend=backend)
    else:
        pack_im2col(x, xz, (bp, bu, bz), geom, PANEL // 2, backend, launch)
    _gemm(x, w, xz, w_zp, (bp, bu, bz), y.reshape(n, m, pixels), mult, bias, y_zp, backend, clamp, launch)


def shifted_geometry_ok(geom) -> bool:
    """Stride 1, no dilation, more than one tap: ``pack_shifted_int8``'s convolutions."""
    kh, kw, sh, sw, _, _, dh, dw = geom[:8]
    return sh == sw == dh == dw == 1 and kh * kw > 1


def _conv_shifted(x, w, y, x_zp, w_zp, geom, mult, bias, y_zp, backend, clamp, launch) -> None:
    """A stride-1 convolution through ``pack_shifted_int8``: bordered image, GEMM over the padded
    width, then ``crop_columns``."""
    kh, kw, _, _, ph, pw, _, _, oh, ow = geom
    n, m = y.shape[:2]
    wp = max(x.shape[3] + pw, ow + kw - 1)
    cols = oh * wp
    np_cols = -(-cols // BLOCK) * BLOCK
    hp = max(x.shape[2] + ph, -(-(np_cols + (kh - 1) * wp + kw) // wp))  # every tap's load inside its plane
    xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
    xp = np.empty(x.shape[:2] + (hp, wp), x.dtype)
    launched(pad_image_int8, launch)(np.ascontiguousarray(x), xz, xp, ph, pw, backend=backend)
    kk = int(np.prod(w.shape[1:]))
    bp = _empty_aligned((n, np_cols * -(-kk // 4) + 15 * PANEL), np.int32)
    bu = np.empty((n, np_cols), np.int32)
    bz = np.empty((n, np_cols), np.int32)
    launched(pack_shifted_int8, launch)(xp.reshape(n, x.shape[1], hp * wp), xz, bp, bu, bz,
                                        np.asarray([kh, kw, wp], np.int64), 0x80 if x.dtype == np.uint8 else 0,
                                        backend=backend)
    wide = np.empty((n, m, oh, wp), y.dtype)
    _gemm(x, w, xz, w_zp, (bp, bu, bz), wide.reshape(n, m, cols), mult, bias, y_zp, backend, clamp, launch)
    launched(crop_columns, launch)(wide.reshape(n * m, oh, wp), y.reshape(n * m, oh, ow), backend=backend)


def _gemm(x, w, xz, w_zp, packed, y3, mult, bias, y_zp, backend, clamp, launch) -> None:
    """The tile GEMM of the prepared weights by the packed image into y3 (N, M, columns)."""
    n, m = y3.shape[:2]
    a, za, rowsum = weights_u8(w, np.zeros(1, w.dtype) if w_zp is None else w_zp, n)
    lo, hi = clamp or (None, None)
    fold = mult is not None and m % BLOCK == 0 and a.shape[2] % K_STEP == 0
    if fold:  # x's zero point is one number: -rowsum[m]·zb joins the bias, the tiles read A in place
        zi = int(xz[0]) & 0xFF ^ (0x80 if x.dtype == np.uint8 else 0)
        zb = zi - 256 if zi & 0x80 else zi
        b32 = np.zeros(m, np.int32) if bias is None else np.broadcast_to(np.asarray(bias, np.int32).reshape(-1), (m,))
        bias = b32 - rowsum * np.int32(zb)
    qgemm_amx_packed_b(a, packed, y3, a_zp=za, mult=mult, bias=bias, y_zp=y_zp,
                       q_lo=lo, q_hi=hi, backend=backend, kernel=launched(qgemm_amx, launch), per_row=True,
                       row_sums_folded=fold)
