"""Stride-1 int8 convolution as an implicit GEMM on the matrix tiles: no im2col, no column sums.

ops/conv_int8_amx.py's shifted packing writes every window tap of every pixel into ``tdpbusd``'s
B panels (K·pixels words, 9x the image for a 3×3) and the column sums its zero points need.
Here the image is the tiles' A side instead (u8 rows of 64 bytes: pixels × channels):

* ``pack_nhwc_int8`` writes x (N, C, H, W) once, at its own size, as (N, Hs·Wp, Cp) bytes: the
  zero-point-bordered image, pixel-major, channels padded to a multiple of 64 (Wp the padded
  width, Hs the padded height plus the rows the last block's taps reach);
* output position p = oh·Wp + ow runs over the padded width, so window tap (kh, kw) of 16
  consecutive positions is 16 rows Cp bytes apart starting at pixel p + kh·Wp + kw: one
  ``tile_load`` of the image as it lies, 64 channels a K step; with stride S the positions run
  over Wp / S a row, the rows are S·Cp bytes apart and the image's rows go in S planes (row
  S·r + f in plane f) so that a tap's rows of consecutive output rows are consecutive (no
  space-to-depth copy, no 16/9 more products for a 3×3/2);
* the weights are the B side (i8 in ``tdpbusd``'s layout, packed once per constant array), so
  a product Σ x·w needs only -zx·Σw per output channel, folded into the bias: the weights' zero
  point must be 0 (symmetric i8 weights, u8 ones around 128: what quantizers write,
  ``implicit_ok``);
* the C tiles (positions × channels) are requantized a pixel at a time (16 channels a vector)
  and stored transposed into y (N, M, OH·OW), the columns past OW dropped on the way.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, i32, i64
from ops import packed_constants
from ops.gemm_int8 import THREADS, output_range

X = dsl.TypeVar("X")
Y = dsl.TypeVar("Y")

BLOCK = 32    # positions and output channels of a step: 2 × 2 C tiles
K_STEP = 64   # channels (bytes) of a tile row


@dsl.kernel(threads=THREADS)
def pack_nhwc_int8(x: In[X, 4], x_zp: In[X, 1], xq: Out[i32, 3], geom: dsl.Vec[i64, 4], flip: i32):
    """xq (N, S·Hs·Wp, Cp/4) = x bordered by its zero point, pixel-major, 4 channels a word (u8
    bytes: ``flip`` 0x80 shifts i8 data); geom = (pad top, pad left, Wp, S): with stride S the
    rows go in S planes of Hs rows, row r of plane f being bordered row S·r + f (so the rows a
    window tap reads for consecutive output rows are consecutive); channels C..Cp hold 0 (their
    weights are 0).  A row's interior goes 16 pixels at a time: 4 vector loads build
    the words of 4 channels, stored a pixel apart."""
    cn = x.shape[1]
    hh = x.shape[2]
    ww = x.shape[3]
    c4p = xq.shape[2]
    c4 = cn // 4
    pt = geom[0]
    pl = geom[1]
    wp = geom[2]
    st = geom[3]
    hs = xq.shape[1] // wp  # rows of all planes
    hsp = hs // st
    zb = (i32(x_zp.flat[0]) & 0xFF) ^ flip
    zword = zb | (zb << 8) | (zb << 16) | (zb << 24)
    lo, hi = dsl.split(x.shape[0] * hs, grid=True)
    for item in range(lo, hi):
        t = item // hs
        r = item - t * hs
        f = r // hsp
        ih = st * (r - f * hsp) + f - pt
        dst = (t * hs + r) * wp * c4p
        if ih < 0 or ih >= hh:
            for j in range(wp):
                for q in range(c4p):
                    xq.flat[dst + j * c4p + q] = zword if q < c4 else i32(0)
        else:
            for j in range(pl):
                for q in range(c4p):
                    xq.flat[dst + j * c4p + q] = zword if q < c4 else i32(0)
            for j in range(pl + ww, wp):
                for q in range(c4p):
                    xq.flat[dst + j * c4p + q] = zword if q < c4 else i32(0)
            src = (t * cn * hh + ih) * ww
            full = ww - ww % 16
            for iw in range(0, full, 16):
                row = dst + (pl + iw) * c4p
                for q in range(c4):
                    wv = dsl.splat(0, 16, i32)
                    for b in dsl.static_range(4):
                        bv = (dsl.i32(x.vload(src + (4 * q + b) * hh * ww + iw, 16)) & 0xFF) ^ flip
                        wv = wv | bv * (1 << (8 * b))
                    for lane in dsl.static_range(16):
                        xq.flat[row + lane * c4p + q] = wv[lane]
                for px in range(16):
                    for q in range(c4, c4p):
                        xq.flat[row + px * c4p + q] = 0
            for iw in range(full, ww):
                row = dst + (pl + iw) * c4p
                for q in range(c4p):
                    w = i32(0)
                    if q < c4:
                        for b in dsl.static_range(4):
                            w = w | (((i32(x.flat[src + (4 * q + b) * hh * ww + iw]) & 0xFF) ^ flip) << (8 * b))
                    xq.flat[row + q] = w


@dsl.kernel(threads=THREADS)
def qconv_amx_implicit(xq: In[i32, 3], wb: In[i32, 2], corr: In[i32, 1], mult: In[dsl.f32, 1], y: Out[Y, 3],
                       geom: dsl.Vec[i64, 6], requantize: i32, y_zp: dsl.f32, q_lo: dsl.f32, q_hi: dsl.f32):
    """y (N, M, OH·OW) = conv of the packed image xq (``pack_nhwc_int8``) with the packed weights wb
    (Mp/16, KH·KW·Cp/64 tiles of 256 words: ``packed_weights``) plus corr[m] (bias - zx·Σw),
    requantized (requantize = 1: f32 scale ``mult[m]``, y_zp, clamp to [q_lo, q_hi]) or as i32;
    geom = (KH, KW, Wo, OH, OW, S): positions p = oh·Wo + ow, stride S, so position p's tap
    (kh, kw) is pixel S·p + (kh // S)·S·Wo + kw of xq's plane kh % S (planes of width S·Wo): a
    tile's rows S pixels apart.  Work items: per image, (32 output channels, 32 positions),
    positions inner, so a channel block's weights stay in L1 while the image streams from L2."""
    cw = dsl.scratch((THREADS, BLOCK * BLOCK), i32)        # this thread's C block: positions × channels
    kh_n = geom[0]
    kw_n = geom[1]
    wp = geom[2]
    oh_n = geom[3]
    ow_n = geom[4]
    st = geom[5]
    m_out = y.shape[1]
    c4p = xq.shape[2]
    row = st * c4p  # words between a tile's rows
    plane = xq.shape[1] // st  # pixels of a row plane
    cb_n = c4p // 16
    wstride = wb.shape[1]
    mblocks = wb.shape[0] // 2
    npb = (oh_n * wp + BLOCK - 1) // BLOCK
    per_img = mblocks * npb
    tid = dsl.thread_id()
    cb = tid * BLOCK * BLOCK
    lo, hi = dsl.split(y.shape[0] * per_img)
    for item in range(lo, hi):
        t = item // per_img
        r = item - t * per_img
        jm = r // npb
        p0 = (r - jm * npb) * BLOCK
        xb = (t * xq.shape[1] + st * p0) * c4p
        wa = 2 * jm * wstride
        dsl.tile_zero(0)
        dsl.tile_zero(1)
        dsl.tile_zero(2)
        dsl.tile_zero(3)
        ks = 0
        for kh in range(kh_n):
            for kw in range(kw_n):
                xo = xb + ((kh % st) * plane + (kh // st) * st * wp + kw) * c4p
                for c in range(cb_n):
                    dsl.tile_load(4, xq, xo + c * 16, row)
                    dsl.tile_load(5, xq, xo + 16 * row + c * 16, row)
                    dsl.tile_load(6, wb, wa + ks * 256, 16)
                    dsl.tile_load(7, wb, wa + wstride + ks * 256, 16)
                    dsl.tile_dot_u8i8(0, 4, 6)
                    dsl.tile_dot_u8i8(1, 4, 7)
                    dsl.tile_dot_u8i8(2, 5, 6)
                    dsl.tile_dot_u8i8(3, 5, 7)
                    ks += 1
        dsl.tile_store(0, cw, cb, BLOCK)
        dsl.tile_store(1, cw, cb + 16, BLOCK)
        dsl.tile_store(2, cw, cb + 16 * BLOCK, BLOCK)
        dsl.tile_store(3, cw, cb + 16 * BLOCK + 16, BLOCK)
        m0 = jm * BLOCK
        cv0 = corr.vload(m0, 16)
        cv1 = corr.vload(m0 + 16, 16)
        mv0 = mult.vload(m0, 16)
        mv1 = mult.vload(m0 + 16, 16)
        # requantized a position at a time (its 32 channels, two vectors) and stored transposed
        # into y, lane by lane, a run of kept positions (one output row's) at a time
        ysize = oh_n * ow_n  # a channel's plane of y
        mcount = min(BLOCK, m_out - m0)
        oh = p0 // wp
        ow = p0 - oh * wp
        i = 0
        while i < BLOCK and oh < oh_n:
            if ow >= ow_n:  # the columns past OW: computed, dropped
                i += wp - ow
                ow = 0
                oh += 1
            else:
                run = min(ow_n - ow, BLOCK - i)
                yb = (t * m_out + m0) * ysize + oh * ow_n + ow
                for k in range(run):
                    src = cb + (i + k) * BLOCK
                    if requantize == 1:
                        v0 = dsl.i32(dsl.clamp(dsl.rint(dsl.f32(cw.vload(src, 16) + cv0) * mv0) + y_zp, q_lo, q_hi))
                        v1 = dsl.i32(dsl.clamp(dsl.rint(dsl.f32(cw.vload(src + 16, 16) + cv1) * mv1) + y_zp, q_lo,
                                               q_hi))
                        if mcount == BLOCK:
                            for j in dsl.static_range(16):
                                y.flat[yb + j * ysize + k] = v0[j]
                            for j in dsl.static_range(16):
                                y.flat[yb + (16 + j) * ysize + k] = v1[j]
                        else:  # the last, partial block of channels
                            for j in dsl.static_range(16):
                                if j < mcount:
                                    y.flat[yb + j * ysize + k] = v0[j]
                            for j in dsl.static_range(16):
                                if 16 + j < mcount:
                                    y.flat[yb + (16 + j) * ysize + k] = v1[j]
                    else:  # exact i32 sums: scalar copies (lanes of i32 vectors stored one by one ran 1.0-1.17x)
                        for ch in range(mcount):
                            y.flat[yb + ch * ysize + k] = cw.flat[src + ch] + corr.flat[m0 + ch]
                i += run
                ow += run


# --------------------------------------------------------------------------- host side


def _shifted_i8(w: np.ndarray) -> np.ndarray:
    return (w.view(np.uint8) ^ 0x80).view(np.int8) if w.dtype == np.uint8 else w


def implicit_ok(x, w, w_zp, geom) -> bool:
    """Whether ``conv_int8_implicit`` takes this convolution: 2-D, one stride both ways, no
    dilation, more than one tap, whole words of channels (C % 4 == 0), and weights whose zero
    point is 0 once they are i8 (u8 weights shifted by 128), so no window sums are needed."""
    kh, kw, sh, sw, _, _, dh, dw = (int(g) for g in geom[:8])
    if not (sh == sw and dh == dw == 1 and kh * kw > 1 and x.ndim == 4 and x.shape[1] % 4 == 0):
        return False
    zw = np.zeros(1, w.dtype) if w_zp is None else np.asarray(w_zp, w.dtype).reshape(-1)
    return not _shifted_i8(zw).any()


def _pack_weights(w: np.ndarray) -> tuple:
    m, c, kh, kw = w.shape
    mp = -(-m // BLOCK) * BLOCK
    cp = -(-c // K_STEP) * K_STEP
    full = np.zeros((mp, cp, kh, kw), np.int8)
    full[:m, :c] = _shifted_i8(w)
    # (16-channel block, n, 64-channel step, row r, byte j, kh, kw) -> (block, kh, kw, step, r, n, j)
    tiles = full.reshape(mp // 16, 16, cp // K_STEP, 16, 4, kh, kw).transpose(0, 5, 6, 2, 3, 1, 4)
    wb = np.ascontiguousarray(tiles).reshape(mp // 16, -1).view(np.int32)
    return wb, full.astype(np.int32).reshape(mp, -1).sum(axis=1)


def packed_weights(w: np.ndarray) -> tuple:
    """(wb, wsum): the weights as ``qconv_amx_implicit`` reads them and their sums per output
    channel (Mp, i32), once per constant array, at every call for any other."""
    if not packed_constants.immutable(w):
        return _pack_weights(w)
    key = ("conv_int8_implicit W",) + packed_constants.view_key(w)
    return packed_constants.once_per_array(w, key, lambda: _pack_weights(w))


def conv_int8_implicit(x, w, y, x_zp, geom, mult=None, bias=None, y_zp=0, q_lo=None, q_hi=None, backend=None,
                       launch=None) -> None:
    """y (N, M, OH, OW) = conv(x, w) as ops/conv_int8.py's ``conv_int8`` (same geometry and
    requantization arguments) where ``implicit_ok`` holds (the caller checks the weights' zero
    point); ``launch``: ops/conv_int8_direct.py's ``launched`` recorder."""
    from ops.conv_int8_direct import launched
    backend = backend or "numba"
    kh, kw, st, _, ph, pw, _, _, oh, ow = (int(g) for g in geom)
    n, m = y.shape[:2]
    wo = max(-(-(x.shape[3] + pw) // st), -(-(st * (ow - 1) + kw) // st))  # positions a row; st·wo pixels
    wp = st * wo
    positions = -(-(oh * wo) // BLOCK) * BLOCK
    # rows a plane: the image's, and every tap's rows of the last block inside it
    hs = max(-(-(x.shape[2] + ph) // st), -(-(st * (positions - 1) + (kh - 1) // st * wp + kw) // wp))
    cp = -(-x.shape[1] // K_STEP) * K_STEP
    xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
    flip = 0x80 if x.dtype == np.int8 else 0
    xq = np.empty((n, st * hs * wp, cp // 4), np.int32)
    launched(pack_nhwc_int8, launch)(np.ascontiguousarray(x), xz, xq, np.asarray([ph, pw, wp, st], np.int64), flip,
                                     backend=backend)
    wb, wsum = packed_weights(w)
    mp = wsum.shape[0]
    zx = (int(xz[0]) & 0xFF) ^ flip
    corr = -zx * wsum
    if bias is not None:
        corr[:m] += np.broadcast_to(np.asarray(bias, np.int32).reshape(-1), (m,))
    requantize = mult is not None
    mults = np.ones(mp, np.float32)
    lo = hi = 0.0
    if requantize:
        mults[:m] = np.broadcast_to(np.asarray(mult, np.float32).reshape(-1), (m,))
        lo, hi = output_range(y.dtype, q_lo, q_hi)
    launched(qconv_amx_implicit, launch)(xq, wb, corr.astype(np.int32), mults, y.reshape(n, m, oh * ow),
                                         np.asarray([kh, kw, wo, oh, ow, st], np.int64), int(requantize), float(y_zp),
                                         lo, hi, backend=backend)
