"""Int8 2-D convolution as the packed u8×i8 GEMM (ops/gemm_int8.py): QLinearConv and ConvInteger.

Per image, Y (M, OH·OW) = W (M, C·KH·KW) · im2col(X) (C·KH·KW, OH·OW), so the output lands in
NCHW with no transpose.  The weights are the GEMM's A side (packed by the GEMM's team at each
run: M·K bytes, small next to the product), with their zero point per row (per output channel)
and the requantization scale and bias per row as well.  The image is the B side: ``pack_im2col_int8``
writes its im2col matrix straight into the GEMM's B panels (4 window taps per i32 word, the
padding as the zero point, so it adds nothing) with the column sums the zero-point terms need,
one panel (NR output pixels) per work item: a word whose pixels read one in-image stretch of an
input row is built from vector loads of V pixels, widened and shifted into place; the rest pixel
by pixel.  A padded convolution first copies the image inside a border of its zero point
(``pad_image_int8``), so the padding's words are vectors too.  Taps are walked with counters, no
division per byte.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, i32, i64
from ops.conv_int8_direct import conv_int8_direct, direct_conv_ok, launched
from ops.conv_int8_strided import conv_int8_strided, strided_geometry_ok
from ops.gemm_int8 import THREADS, int8_tile, qgemm_int8, qgemm_packed

X = dsl.TypeVar("X")
# strided convolutions of up to this many input channels take space-to-depth + the direct kernel
# (ops/conv_int8_strided.py): the 7x7/2 stem on 3 channels ran 2.8x faster than on im2col, while
# 3x3/2 layers of 128-512 channels ran 1.2-1.3x slower (their im2col packing is cheap next to the
# products, which space-to-depth multiplies by 16/9); measured on Zen 3, AVX2
STRIDED_MAX_CHANNELS = 16


@dsl.kernel(threads=THREADS)
def pack_im2col_int8(x: In[X, 4], x_zp: In[X, 1], bp: Out[i32, 2], bu: Out[i32, 2], bz: Out[i32, 2],
                     geom: dsl.Vec[i64, 10], flip: i32, V: dsl.const[i64]):
    """im2col of every image of x (N, C, H, W) in qgemm_packed's B layout (panels of NR = 2·V
    columns): column = output pixel, row = (c, kh, kw); geom = (KH, KW, stride h, stride w, pad h,
    pad w, dilation h, dilation w, OH, OW).  A word of 4 taps whose NR pixels read one stretch of
    one input row (stride 1, inside the image) is packed as vectors of V pixels; any other word
    pixel by pixel, the padding as the zero point."""
    NR = 2 * V
    cn = x.shape[1]
    hh = x.shape[2]
    ww = x.shape[3]
    kh_n = geom[0]
    kw_n = geom[1]
    ow_n = geom[9]
    kk = cn * kh_n * kw_n
    k4 = (kk + 3) // 4
    np_cols = bu.shape[1]
    npan = np_cols // NR
    pixels = geom[8] * ow_n
    zi = (i32(x_zp.flat[0]) & 0xFF) ^ flip
    zb = zi - ((zi & 0x80) << 1)
    lo, hi = dsl.split(x.shape[0] * npan, grid=True)
    for item in range(lo, hi):
        t = item // npan
        panel = item - t * npan
        p0 = panel * NR
        dst = t * bp.shape[1] + panel * k4 * NR
        oh0 = p0 // ow_n
        ow0 = p0 - oh0 * ow_n
        row_run = geom[3] == 1 and ow0 + NR <= ow_n and p0 + NR <= pixels  # one output row, stride 1
        xbase = t * cn * hh * ww
        csv = dsl.local((2,), dsl.simd(i32, V))
        csl = dsl.local((2 * V,), i32)
        ci = 0
        kh = 0
        kw = 0
        for q in range(k4):
            inside = row_run and 4 * q + 3 < kk
            if inside:  # every tap of this word reads one in-image stretch of NR pixels?
                c2 = ci
                h2 = kh
                w2 = kw
                for j in dsl.static_range(4):
                    ih = oh0 * geom[2] - geom[4] + h2 * geom[6]
                    iw = ow0 - geom[5] + w2 * geom[7]
                    if ih < 0 or ih >= hh or iw < 0 or iw + NR > ww:
                        inside = False
                    w2 += 1
                    if w2 == kw_n:
                        w2 = 0
                        h2 += 1
                        if h2 == kh_n:
                            h2 = 0
                            c2 += 1
            if inside:
                for h in dsl.static_range(2):
                    wv = dsl.splat(0, V, i32)
                    c2 = ci
                    h2 = kh
                    w2 = kw
                    for j in dsl.static_range(4):
                        ih = oh0 * geom[2] - geom[4] + h2 * geom[6]
                        iw = ow0 - geom[5] + w2 * geom[7] + h * V
                        bv = dsl.i32(x.vload(xbase + (c2 * hh + ih) * ww + iw, V)) ^ flip
                        csv[h] += bv - (bv & 0x80) * 2
                        wv = wv | bv * (1 << (8 * j))
                        w2 += 1
                        if w2 == kw_n:
                            w2 = 0
                            h2 += 1
                            if h2 == kh_n:
                                h2 = 0
                                c2 += 1
                    bp.vstore(dst + q * NR + h * V, wv)
            else:
                for c in range(NR):
                    p = p0 + c
                    w = i32(0)
                    if p < pixels:
                        oh = p // ow_n
                        ih0 = oh * geom[2] - geom[4]
                        iw0 = (p - oh * ow_n) * geom[3] - geom[5]
                        c2 = ci
                        h2 = kh
                        w2 = kw
                        for j in dsl.static_range(4):
                            if 4 * q + j < kk:
                                ih = ih0 + h2 * geom[6]
                                iw = iw0 + w2 * geom[7]
                                v = zi
                                if ih >= 0 and ih < hh and iw >= 0 and iw < ww:
                                    v = (i32(x.flat[xbase + (c2 * hh + ih) * ww + iw]) & 0xFF) ^ flip
                                csl[c] += v - ((v & 0x80) << 1)
                                w = w | (v << (8 * j))
                                w2 += 1
                                if w2 == kw_n:
                                    w2 = 0
                                    h2 += 1
                                    if h2 == kh_n:
                                        h2 = 0
                                        c2 += 1
                    bp.flat[dst + q * NR + c] = w
            for j in dsl.static_range(4):  # the next word's first tap
                kw += 1
                if kw == kw_n:
                    kw = 0
                    kh += 1
                    if kh == kh_n:
                        kh = 0
                        ci += 1
        for h in dsl.static_range(2):  # the vector column sums join the per-pixel ones
            for lane in dsl.static_range(V):
                csl[h * V + lane] += csv[h][lane]
        for c in range(NR):  # a loop, not 2·V unrolled copies of two stores (compile time)
            col = p0 + c
            bu.flat[t * np_cols + col] = i32(kk) * zb - csl[c] if col < pixels else i32(0)
            bz.flat[t * np_cols + col] = zb if col < pixels else i32(0)


@dsl.kernel(threads=THREADS)
def pad_image_int8(x: In[X, 4], x_zp: In[X, 1], xp: Out[X, 4], ph: i64, pw: i64):
    """x inside a border of its zero point (xp is x's size plus the pads), so that every window
    tap of the packing reads the image: the padding's words are vectors too."""
    hh = x.shape[2]
    ww = x.shape[3]
    hp = xp.shape[2]
    wp = xp.shape[3]
    z = x_zp.flat[0]
    lo, hi = dsl.split(xp.shape[0] * xp.shape[1] * hp, grid=True)
    for r in range(lo, hi):
        plane = r // hp
        ih = r - plane * hp - ph
        dst = r * wp
        if ih < 0 or ih >= hh:
            for j in range(wp):
                xp.flat[dst + j] = z
        else:
            src = (plane * hh + ih) * ww
            for j in range(pw):
                xp.flat[dst + j] = z
            for j in range(ww):
                xp.flat[dst + pw + j] = x.flat[src + j]
            for j in range(pw + ww, wp):
                xp.flat[dst + j] = z


def pack_im2col(x, xz, packed, geom, v: int, backend, launch=None) -> None:
    """``pack_im2col_int8`` of x into ``packed`` = (bp, bu, bz), panels of 2·v columns; a padded
    convolution's image first gets a border of its zero point (``pad_image_int8``), once, so the
    packing reads no padding and its words there are vectors too."""
    if geom[4] or geom[5]:
        span_h = (geom[0] - 1) * geom[6] + 1
        span_w = (geom[1] - 1) * geom[7] + 1
        hp = max(x.shape[2] + geom[4], (geom[8] - 1) * geom[2] + span_h)
        wp = max(x.shape[3] + geom[5], (geom[9] - 1) * geom[3] + span_w)
        xp = np.empty(x.shape[:2] + (hp, wp), x.dtype)
        launched(pad_image_int8, launch)(np.ascontiguousarray(x), xz, xp, geom[4], geom[5], backend=backend)
        x, geom = xp, geom[:4] + [0, 0] + geom[6:]
    launched(pack_im2col_int8, launch)(np.ascontiguousarray(x), xz, *packed, np.asarray(geom, np.int64),
                                       0x80 if x.dtype == np.uint8 else 0, V=v, backend=backend)


def packed_conv_ok(x, w, group: int, backend) -> bool:
    """Whether conv_int8 takes this convolution: 2-D, one group, compiled backends, known shapes."""
    return (backend in ("numba", "opencl") and x.ndim == 4 and group == 1
            and all(d is not None for d in tuple(x.shape) + tuple(w.shape)))


def conv_int8(x, w, y, x_zp, w_zp, geom, mult=None, bias=None, y_zp=0, backend=None, kernel=None,
              clamp=None, launch=None, arithmetic="exact") -> None:
    """y (N, M, OH, OW) = conv(x, w) (N, C, H, W), (M, C, KH, KW) with zero points, requantized when
    ``mult`` (per tensor or per output channel) is given; ``geom`` as pack_im2col_int8's; ``kernel``:
    the GEMM launch (a graph's recorder stands in for it); ``clamp``: (lo, hi) of the requantized
    output within its type (a fused Relu/Clip); ``launch``: a recorder of every launch
    (``ops.conv_int8_direct.launched``), for a model's launch plan.  Stride-1 and 1×1 convolutions
    read the image in place (ops/conv_int8_direct.py), strided ones with few input channels (the
    stems) through a space-to-depth copy of it (ops/conv_int8_strided.py); those two take
    ``arithmetic="saturating"`` (``ops.conv_int8_direct.choose_products``), the im2col GEMM below
    stays exact."""
    backend = backend or "numba"
    if direct_conv_ok(w, w_zp, geom):
        conv_int8_direct(x, w, y, x_zp, geom, mult, bias, y_zp, *(clamp or (None, None)), backend=backend, w_zp=w_zp,
                         launch=launch, arithmetic=arithmetic)
        return
    if strided_geometry_ok(geom) and x.shape[1] <= STRIDED_MAX_CHANNELS:
        conv_int8_strided(x, w, y, x_zp, w_zp, geom, mult, bias, y_zp, *(clamp or (None, None)), backend=backend,
                          launch=launch, arithmetic=arithmetic)
        return
    tile = int8_tile(backend)
    n, m = y.shape[:2]
    pixels = y.shape[2] * y.shape[3]
    kk = w.shape[1] * w.shape[2] * w.shape[3]
    np_cols = -(-pixels // tile.NR) * tile.NR
    bp = np.empty((n, np_cols * -(-kk // 4)), np.int32)
    bu = np.empty((n, np_cols), np.int32)
    bz = np.empty((n, np_cols), np.int32)
    xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
    pack_im2col(x, xz, (bp, bu, bz), [int(g) for g in geom], tile.V, backend, launch)
    a = np.ascontiguousarray(np.broadcast_to(w.reshape(1, m, kk), (n, m, kk)))
    extra = {} if kernel is None else {"kernel": kernel}
    if launch is not None:
        extra["kernel"] = launch(kernel or qgemm_packed)
    lo, hi = clamp or (None, None)
    qgemm_int8(a, None, y.reshape(n, m, pixels), a_zp=w_zp, mult=mult, bias=bias, y_zp=y_zp, q_lo=lo, q_hi=hi,
               backend=backend, tile=tile, per_row=True, packed=(bp, bu, bz), **extra)
