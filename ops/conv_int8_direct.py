"""Int8 2-D convolution that reads the activation in place: an implicit GEMM with ``dsl.dot4``.

The im2col path (ops/conv_int8.py) writes every window tap of every pixel into GEMM panels, KH·KW
times the image; here the image is repacked once, at its own size, and the micro-kernel reads it
where it lies:

* ``pack_nchw4c_int8`` writes x (N, C, H, W) as i32 words of 4 consecutive channels of one pixel
  (u8 bytes; i8 data shifted by 128), laid out (N, C/4, Hs, Wp) with the padding as the zero
  point, Wp the padded width and Hs the padded height plus the rows the last panel reads past it;
* output position p = oh·Wp + ow runs over the padded width (the KW - 1 columns past OW are
  computed and dropped), so the words a window tap (c4, kh, kw) needs for NR consecutive
  positions are NR consecutive words at p + kh·Wp + kw: two vector loads, no gather;
* the weights are packed once per constant array (``packed_weights``): per output channel,
  K4 = C/4·KH·KW words in (c4, kh, kw) order, i8 bytes (u8 weights shifted by 128), with their
  sums, so that Σ (x - zx)·w = Σ x·w - zx·Σ w (the padding, being zx, adds nothing);
* ``qconv_direct_int8`` keeps an MR (output channels) × 2·V (positions) tile in 2·MR i32
  vectors, as the GEMM does, and requantizes it in the store (bias, scale per tensor or per
  output channel, zero point, and the clamp a fused Relu/Clip narrows).

It takes stride-1 convolutions of any kernel size and padding, and 1×1 convolutions of any stride
(the packing subsamples the image, so they are a GEMM on the activation); the others go to the
im2col path.  Weights whose zero point is 0 after the shift (symmetric i8 weights, or u8 ones
around 128, what quantizers write) need nothing more; any other zero point (u8 weights around 0)
costs one more ``dot4`` per tap and panel, the window's byte sum.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

import dsl
from dsl import In, Out, i32, i64
from ops import packed_constants
from ops.gemm_int8 import THREADS, Int8Tile, int8_tile, output_range, pairs_fit_i16, saturating_pairs_pay

X = dsl.TypeVar("X")
Y = dsl.TypeVar("Y")

L1_WEIGHT_BYTES = 16384  # weights of the row tiles that share one pass over a panel of positions


@dsl.kernel(threads=THREADS)
def pack_nchw4c_int8(x: In[X, 4], x_zp: In[X, 1], xp: Out[i32, 4], geom: dsl.Vec[i64, 5], flip: i32,
                     V: dsl.const[i64], S: dsl.const[i64]):
    """xp (N, C/4, Hs, Wp) = x as words of 4 channels (byte j: channel 4·c4 + j, shifted to u8 by
    ``flip`` = 0x80 for i8 data); geom = (stride h, stride w, pad top, pad left, Hp): row r < Hp,
    column j read x[.., r·sh - pt, j·sw - pl]; the padding, channels past C and rows Hp..Hs hold
    the zero point.  Stride-1 rows go by vectors of V words, a row's tail too (one vector ending at
    its last image pixel, overlapping the one before: 14-pixel rows were 6 of 14 words one by one).
    S = 1: xp is (N, 2·C/4, Hs, Wp), each 4 channels as two planes of i16 pairs, bytes 0, 2 in
    the first and 1, 3 in the second (what ``dsl.dot2_i16`` multiplies by widened weights)."""
    cn = x.shape[1]
    hh = x.shape[2]
    ww = x.shape[3]
    c4_n = xp.shape[1] // (1 + S)
    hs = xp.shape[2]
    wp_n = xp.shape[3]
    sh = geom[0]
    sw = geom[1]
    pt = geom[2]
    pl = geom[3]
    hp = geom[4]
    zb = (i32(x_zp.flat[0]) & 0xFF) ^ flip
    zword = zb | (zb << 8) | (zb << 16) | (zb << 24)
    if S == 1:
        zword = zb | (zb << 16)
    odd = hs * wp_n  # the odd plane's offset (S = 1)
    lo, hi = dsl.split(x.shape[0] * c4_n * hs, grid=True)
    for item in range(lo, hi):
        t = item // (c4_n * hs)
        r = item - t * (c4_n * hs)
        c4 = r // hs
        r = r - c4 * hs
        dst = ((t * c4_n + c4) * (1 + S) * hs + r) * wp_n
        ih = r * sh - pt
        if r >= hp or ih < 0 or ih >= hh:
            for j in range(wp_n):
                xp.flat[dst + j] = zword
                if S == 1:
                    xp.flat[dst + odd + j] = zword
        else:
            src = ((t * cn + 4 * c4) * hh + ih) * ww
            j = 0
            jt = min(wp_n, ww + pl) - V  # where a vector ending at the row's last image pixel starts
            while j < wp_n:
                if sw == 1 and jt >= pl and jt < j and j < jt + V and 4 * c4 + 3 < cn:
                    j = jt  # the row's tail as one vector overlapping the last (same words again)
                iw = j * sw - pl
                if sw == 1 and iw >= 0 and iw + V <= ww and j + V <= wp_n and 4 * c4 + 3 < cn:
                    wv = dsl.splat(0, V, i32)
                    ov = dsl.splat(0, V, i32)
                    for b in dsl.static_range(4):
                        bv = (dsl.i32(x.vload(src + b * hh * ww + iw, V)) & 0xFF) ^ flip
                        if S == 1:
                            if b % 2 == 0:
                                wv = wv | bv * (1 << (8 * b))
                            else:
                                ov = ov | bv * (1 << (8 * b - 8))
                        else:
                            wv = wv | bv * (1 << (8 * b))
                    xp.vstore(dst + j, wv)
                    if S == 1:
                        xp.vstore(dst + odd + j, ov)
                    j += V
                else:
                    w = zword
                    wo = zword
                    if iw >= 0 and iw < ww:
                        w = i32(0)
                        wo = i32(0)
                        for b in dsl.static_range(4):
                            v = zb
                            if 4 * c4 + b < cn:
                                v = (i32(x.flat[src + b * hh * ww + iw]) & 0xFF) ^ flip
                            if S == 1:
                                if b % 2 == 0:
                                    w = w | (v << (8 * b))
                                else:
                                    wo = wo | (v << (8 * b - 8))
                            else:
                                w = w | (v << (8 * b))
                    xp.flat[dst + j] = w
                    if S == 1:
                        xp.flat[dst + odd + j] = wo
                    j += 1


@dsl.kernel(threads=THREADS)
def qconv_direct_int8(xp: In[i32, 4], wp: In[i32, 2], wsum: In[i32, 2], mult: In[dsl.f32, 2], bias: In[i32, 2],
                      wzp: In[i32, 2], post: In[dsl.f32, 2], y: Out[Y, 4], rb: i64, zx: i32, requantize: i32,
                      y_zp: dsl.f32, q_lo: dsl.f32, q_hi: dsl.f32, stage: i32, s1: dsl.f32, s2: dsl.f32, z2: dsl.f32,
                      lo2: dsl.f32, hi2: dsl.f32, KH: dsl.const[i64], KW: dsl.const[i64], V: dsl.const[i64],
                      MR: dsl.const[i64], ZW: dsl.const[i64], SAT: dsl.const[i64]):
    """y (N, M, OH, OW) = conv of the packed image xp (N, C/4, Hs, Wp) with the packed weights wp
    (Mp/MR, C/4·KH·KW·MR: a row tile's MR words of one tap side by side) (module docstring), minus zx·wsum[m], plus bias, requantized (requantize = 1:
    f32 scale ``mult`` per tensor or output channel, y_zp, clamp to [q_lo, q_hi]) or stored as i32.
    ZW = 1: the weights' zero point ``wzp`` (i8, per tensor or output channel) is not 0, so each
    panel also sums its window's bytes (one ``dot4`` with bytes of 1 per tap) for the term
    -wzp·(Σx - K·zx).
    stage = 1 (with requantize): a second per-channel requantization of those integers q, a
    QDQ BatchNormalization's (ops/quant_conv_batch_norm.py): y = clamp(rint(((q - y_zp)·s1·post[0, m]
    + post[1, m]) / s2) + z2, lo2, hi2), in f32 in that order, so y equals the two nodes' integers.
    SAT = 1: the products run on ``dsl.dot4_sat``, which the host chose because no pair of the
    weights' bytes can leave i16 (``ops.gemm_int8.pairs_fit_i16``), so it equals ``dot4``.
    SAT = 2: exact products on ``dsl.dot2_i16`` (``vpmaddwd``) for weights that could saturate:
    wp holds two words per weight word, its bytes 0, 2 and 1, 3 sign-extended to i16 at packing
    (``widened_weights``), and xp (N, 2·C/4, Hs, Wp) two planes per 4 channels, their bytes 0, 2
    and 1, 3 as i16 halves (``pack_nchw4c_int8`` with S = 1), so the loop widens nothing.
    Work items: per image, (block of ``rb`` row tiles, panel of 2·V positions), panels of one
    block consecutive; a block's row tiles run in turn on its panel (their weights stay in L1, the
    panel's words too).  A 1×1 kernel's last panel whose second vector holds no output position
    (ResNet's 14×14: 196 positions, 6.5 panels) runs one vector of products (dot4 only)."""
    NR = 2 * V
    n_img = y.shape[0]
    m_out = y.shape[1]
    oh_n = y.shape[2]
    ow_n = y.shape[3]
    ws = 2 if SAT == 2 else 1  # planes per 4 channels, words per weight word (SAT = 2: even and odd bytes)
    c4_n = xp.shape[1] // ws
    wp_n = xp.shape[3]
    plane = xp.shape[2] * wp_n
    mtiles = wp.shape[0]
    npan = (oh_n * wp_n + NR - 1) // NR
    nblk = (mtiles + rb - 1) // rb
    per_img = nblk * npan
    # a panel whose vectors cross an output row goes through scratch: its values (2·V lanes, then
    # room for the shifted loads) and the lane numbers that pick a row's lanes
    sf = dsl.scratch((THREADS, 5 * V), dsl.f32)
    si = dsl.scratch((THREADS, 5 * V), i32)
    own = dsl.thread_id() * (5 * V)
    for lane in range(V):
        si[dsl.thread_id(), 4 * V + lane] = i32(lane)
    lanes = si.vload(own + 4 * V, V)
    lo, hi = dsl.split(n_img * per_img)
    for item in range(lo, hi):
        t = item // per_img
        r = item - t * per_img
        blk = r // npan
        pan = r - blk * npan
        p0 = pan * NR
        xb = t * xp.shape[1] * plane + p0
        # where the panel's two vectors of positions land: (output row, column) of their first lane
        oh_a = p0 // wp_n
        ow_a = p0 - oh_a * wp_n
        oh_b = (p0 + V) // wp_n
        ow_b = p0 + V - oh_b * wp_n
        # the panel's kept positions are one stretch of y, [ya, yb): where a vector crosses a row
        # (KW > 1 drops KW - 1 columns there) it is stored as two vectors, at ya and at yb - V, each
        # lane picked from the panel's values at its position (a row narrower than V: more breaks)
        ra = oh_a if ow_a < ow_n else oh_a + 1
        ca = ow_a if ow_a < ow_n else 0
        rz = (p0 + NR - 1) // wp_n
        cz = min(p0 + NR - 1 - rz * wp_n, ow_n - 1)
        if rz >= oh_n:
            rz = oh_n - 1
            cz = ow_n - 1
        ya = ra * ow_n + ca
        ys = rz * ow_n + cz + 1 - V  # the second vector's first y index
        rs = ys // ow_n
        cs = ys - rs * ow_n
        la = ra * wp_n + ca - p0  # panel lanes of the two vectors' first y index
        ls = rs * wp_n + cs - p0
        crossing = not (oh_b < oh_n and ow_a + V <= ow_n and ow_b + V <= ow_n)
        picked = KW > 1 and KW <= V + 1 and crossing and ra < oh_n and ys >= ya
        for tile in range(blk * rb, min(blk * rb + rb, mtiles)):
            wb = tile * wp.shape[1]  # the tile's MR rows, interleaved word by word
            acc = dsl.local((2 * MR,), dsl.simd(i32, V))
            xs = dsl.local((2,), dsl.simd(i32, V))
            ones = dsl.splat(i32(0x01010101), V)
            ones16 = dsl.splat(i32(0x00010001), V)
            # a 1×1 kernel's last panel holding the image's last V positions or fewer: one vector of products
            half = KH == 1 and KW == 1 and SAT == 0 and ZW == 0 and p0 + V >= oh_n * wp_n
            if half:
                for c4 in range(c4_n):
                    b0 = xp.vload(xb + c4 * plane, V)
                    for i in dsl.static_range(MR):
                        acc[2 * i] = dsl.dot4(acc[2 * i], b0, dsl.splat(wp.flat[wb + c4 * MR + i], V))
            for c4 in range(0 if half else c4_n):
                xo = xb + c4 * ws * plane
                wo = wb + c4 * (KH * KW * MR * ws)
                for kh in dsl.static_range(KH):
                    for kw in dsl.static_range(KW):
                        if SAT == 2:  # the even plane (bytes 0, 2 as i16 halves), then the odd one (1, 3)
                            for par in dsl.static_range(2):  # one plane at a time: 2·MR + 4 registers
                                e0 = xp.vload(xo + par * plane + kh * wp_n + kw, V)
                                e1 = xp.vload(xo + par * plane + kh * wp_n + kw + V, V)
                                if ZW == 1:
                                    xs[0] = dsl.dot2_i16(xs[0], e0, ones16)
                                    xs[1] = dsl.dot2_i16(xs[1], e1, ones16)
                                for i in dsl.static_range(MR):
                                    we = dsl.splat(wp.flat[wo + ((kh * KW + kw) * MR + i) * 2 + par], V)
                                    acc[2 * i] = dsl.dot2_i16(acc[2 * i], e0, we)
                                    acc[2 * i + 1] = dsl.dot2_i16(acc[2 * i + 1], e1, we)
                        else:
                            b0 = xp.vload(xo + kh * wp_n + kw, V)
                            b1 = xp.vload(xo + kh * wp_n + kw + V, V)
                            if ZW == 1:  # bytes of 1: no pair can saturate
                                if SAT == 1:
                                    xs[0] = dsl.dot4_sat(xs[0], b0, ones)
                                    xs[1] = dsl.dot4_sat(xs[1], b1, ones)
                                else:
                                    xs[0] = dsl.dot4(xs[0], b0, ones)
                                    xs[1] = dsl.dot4(xs[1], b1, ones)
                            for i in dsl.static_range(MR):
                                wv = dsl.splat(wp.flat[wo + (kh * KW + kw) * MR + i], V)
                                if SAT == 1:
                                    acc[2 * i] = dsl.dot4_sat(acc[2 * i], b0, wv)
                                    acc[2 * i + 1] = dsl.dot4_sat(acc[2 * i + 1], b1, wv)
                                else:
                                    acc[2 * i] = dsl.dot4(acc[2 * i], b0, wv)
                                    acc[2 * i + 1] = dsl.dot4(acc[2 * i + 1], b1, wv)
            # ---- epilogue: zero-point term, bias, requantization; positions past OW are dropped (a
            # 1×1 kernel has none: Wp = OW, so a vector that crosses a row is still consecutive in y)
            for i in dsl.static_range(MR):
                m = tile * MR + i
                if m < m_out:
                    corr = bias.flat[m if bias.shape[1] > 1 else 0] - zx * wsum.flat[m]
                    scale = mult.flat[m if mult.shape[1] > 1 else 0]
                    pa = post[0, m if post.shape[1] > 1 else 0]
                    pb = post[post.shape[0] - 1, m if post.shape[1] > 1 else 0]
                    ybase = (t * m_out + m) * oh_n * ow_n
                    for h in dsl.static_range(2):
                        oh = oh_a if h == 0 else oh_b
                        ow = ow_a if h == 0 else ow_b
                        v = acc[2 * i + h] + corr
                        if ZW == 1:
                            v = v - wzp.flat[m if wzp.shape[1] > 1 else 0] * (xs[h] - i32(c4_n * 4 * KH * KW) * zx)
                        if requantize == 1:
                            f = dsl.clamp(dsl.rint(dsl.f32(v) * scale) + y_zp, q_lo, q_hi)
                            if stage == 1:
                                g = (f - y_zp) * s1 * pa + pb
                                f = dsl.clamp(dsl.rint(g / s2) + z2, lo2, hi2)
                            if picked:
                                sf.vstore(own + h * V, f)
                            elif oh < oh_n and (ow + V <= ow_n or KW == 1 and p0 + h * V + V <= oh_n * ow_n):
                                y.vstore(ybase + oh * ow_n + ow, f)
                            else:  # lane by lane from scratch (a V-lane copy unrolled per tile row passed the budget)
                                sf.vstore(own + h * V, f)
                                for cc in range(V):
                                    if oh < oh_n and ow < ow_n:
                                        y.flat[ybase + oh * ow_n + ow] = sf[dsl.thread_id(), h * V + cc]
                                    ow += 1
                                    if ow == wp_n:
                                        ow = 0
                                        oh += 1
                        else:
                            if picked:
                                si.vstore(own + h * V, v)
                            elif oh < oh_n and (ow + V <= ow_n or KW == 1 and p0 + h * V + V <= oh_n * ow_n):
                                y.vstore(ybase + oh * ow_n + ow, v)
                            else:
                                si.vstore(own + h * V, v)
                                for cc in range(V):
                                    if oh < oh_n and ow < ow_n:
                                        y.flat[ybase + oh * ow_n + ow] = si[dsl.thread_id(), h * V + cc]
                                    ow += 1
                                    if ow == wp_n:
                                        ow = 0
                                        oh += 1
                    if picked:  # the two vectors of y at ya and ys from the panel's values in scratch: lane j
                        # after k row breaks (the first at lane OW - column, then every OW) is k·(KW - 1) on
                        breaks_a = (V - 1 - (ow_n - ca)) // ow_n + 1
                        breaks_s = (V - 1 - (ow_n - cs)) // ow_n + 1
                        if requantize == 1:
                            fa = sf.vload(own + la, V)
                            fs = sf.vload(own + ls, V)
                            for k in range(1, breaks_a + 1):
                                fa = dsl.where(lanes < i32(ow_n - ca + (k - 1) * ow_n), fa, sf.vload(own + la + k * (KW - 1), V))
                            for k in range(1, breaks_s + 1):
                                fs = dsl.where(lanes < i32(ow_n - cs + (k - 1) * ow_n), fs, sf.vload(own + ls + k * (KW - 1), V))
                            y.vstore(ybase + ya, fa)
                            y.vstore(ybase + ys, fs)
                        else:
                            va = si.vload(own + la, V)
                            vs = si.vload(own + ls, V)
                            for k in range(1, breaks_a + 1):
                                va = dsl.where(lanes < i32(ow_n - ca + (k - 1) * ow_n), va, si.vload(own + la + k * (KW - 1), V))
                            for k in range(1, breaks_s + 1):
                                vs = dsl.where(lanes < i32(ow_n - cs + (k - 1) * ow_n), vs, si.vload(own + ls + k * (KW - 1), V))
                            y.vstore(ybase + ya, va)
                            y.vstore(ybase + ys, vs)


# --------------------------------------------------------------------------- host side



def _pack_weights(w: np.ndarray, tile: Int8Tile) -> tuple:
    m, c, kh, kw = w.shape
    c4 = -(-c // 4)
    mp = -(-m // tile.MR) * tile.MR
    ws = w.astype(np.int16) - (128 if w.dtype == np.uint8 else 0)  # i8 values
    full = np.zeros((mp, c4 * 4, kh, kw), np.int8)
    full[:m, :c] = ws.astype(np.int8)
    words = np.ascontiguousarray(full.reshape(mp, c4, 4, kh, kw).transpose(0, 1, 3, 4, 2))
    wp = words.view(np.int32).reshape(mp, c4 * kh * kw)  # little-endian: byte j is channel 4·c4 + j
    wp = wp.reshape(mp // tile.MR, tile.MR, -1).transpose(0, 2, 1).reshape(mp // tile.MR, -1)
    wsum = full.astype(np.int32).reshape(mp, -1).sum(axis=1).reshape(1, mp)
    return np.ascontiguousarray(wp), np.ascontiguousarray(wsum.astype(np.int32)), pairs_fit_i16(wp)


def packed_weights(w: np.ndarray, tile: Int8Tile) -> tuple:
    """(wp, wsum, fits) of ``w`` (M, C, KH, KW) as qconv_direct_int8 reads them, ``fits``: whether
    ``dot4_sat`` is exact on them (``pairs_fit_i16``); made once per constant array (kept while it
    lives), at every call for any other."""
    if not packed_constants.immutable(w):
        return _pack_weights(w, tile)
    key = ("conv_int8_direct W",) + packed_constants.view_key(w) + (tile,)
    return packed_constants.once_per_array(w, key, lambda: _pack_weights(w, tile))


def _widen(wp: np.ndarray) -> np.ndarray:
    by = np.ascontiguousarray(wp).view(np.int8).reshape(wp.shape[0], -1, 4).astype(np.int16)
    pairs = np.stack([by[..., 0::2], by[..., 1::2]], axis=2)  # (tiles, words, even | odd, 2 halves)
    return np.ascontiguousarray(pairs).view(np.int32).reshape(wp.shape[0], -1)


def widened_weights(w: np.ndarray, tile: Int8Tile) -> tuple:
    """(wp16, wsum) for ``products="dot2_i16"``: each word of ``packed_weights``' wp as two words,
    its bytes 0, 2 then 1, 3 sign-extended to i16 halves (what ``vpmaddwd`` multiplies), so the
    loop widens only the image; made once per constant array, like ``packed_weights``."""
    def make():
        wp, wsum, _ = packed_weights(w, tile)
        return _widen(wp), wsum
    if not packed_constants.immutable(w):
        return make()
    key = ("conv_int8_direct W16",) + packed_constants.view_key(w) + (tile,)
    return packed_constants.once_per_array(w, key, make)


def direct_tile(backend: str) -> Int8Tile:
    """The direct kernel's register tile: the GEMM's (``int8_tile``), but 8 rows of 2 zmm with
    AVX-512, where the GEMM takes 6 for its epilogue's unroll budget: 16 accumulators, 2 image
    vectors and a broadcast of 32 registers; with ``vpdpbusd`` 6 rows ran 1.12x (256×14×14 3×3)
    and 1.24x (512×7×7 3×3) the time of 8, and 10 or 12 no faster (benchmarks/RESULTS.md)."""
    tile = int8_tile(backend)
    return Int8Tile(V=16, MR=8) if tile.V == 16 else tile


PRODUCTS = ("dot4", "dot4_sat", "dot2_i16")


ARITHMETIC = ("exact", "saturating")


def choose_products(backend: str, fits: bool, arithmetic: str = "exact") -> str:
    """The product the direct kernel runs: ``dot4_sat`` (vpmaddubsw) where it pays and the weights
    keep it exact (``fits``), ``dot2_i16`` on widened weights where ``dot4_sat`` would pay but could
    saturate (AVX2 without VNNI; ``quantize_static``'s full-range weights), else ``dot4`` (one
    ``vpdpbusd`` with VNNI, plain arithmetic on the other backends).  ``arithmetic="saturating"``
    takes ``dot4_sat`` wherever it pays, fits or not: onnxruntime's AVX2 arithmetic (docs/ops.md)."""
    if arithmetic not in ARITHMETIC:
        raise ValueError(f"int8 arithmetic {arithmetic!r}: accepted {' or '.join(map(repr, ARITHMETIC))}")
    if not saturating_pairs_pay(backend):
        return "dot4"
    return "dot4_sat" if fits or arithmetic == "saturating" else "dot2_i16"


def row_block(mtiles: int, tile_bytes: int) -> int:
    """Row tiles per block: as many as keep their weights within L1_WEIGHT_BYTES, in blocks of one
    size where up to twice the blocks allow it (16 tiles of 7 at most: 4 × 4, not 7, 7, 2), else
    evened out: the team splits the work items (block, panel) in equal counts, so a short block
    would leave a thread idle (the 7, 7, 2 split ran 2135 against 1113 tile-panels on 2 threads)."""
    most = max(1, min(mtiles, L1_WEIGHT_BYTES // tile_bytes))
    blocks = -(-mtiles // most)
    blocks = next((b for b in range(blocks, min(mtiles, 2 * blocks) + 1) if mtiles % b == 0), blocks)
    return -(-mtiles // blocks)


def pack_lanes(v: int, width: int) -> int:
    """The packing's vector: the tile's V, halved (down to 4) while an image row of ``width``
    pixels is narrower, since a row narrower than one vector packs word by word (with V = 16,
    ResNet's 14- and 7-pixel rows did: the 1×1 1024→256 on 14×14 packed in 0.25 ms, as long as
    its products took)."""
    while v > 4 and v > width:
        v //= 2
    return v


def launched(kernel, launch=None):
    """What to call for a launch of ``kernel``: itself, or ``launch(kernel)`` (a recorder that keeps the
    launch as data for a model's launch plan, ops/quant_conv_plan.py)."""
    return kernel if launch is None else launch(kernel)


def whole_planes(a: np.ndarray) -> np.ndarray:
    """A C-contiguous (N, C, H, W) array as a view (N, C, 1, H·W): a 1×1 stride-1 convolution is a
    GEMM on the pixels, so its image packs and its output stores as one row a channel, by whole
    vectors (ResNet's 14-pixel rows packed as a vector of 8 and an overlapping one each), the
    packed row padded to whole panels of 2·V words and no more (no rows for the last panel's
    loads: 64×56×56 packed 2 × 3136 words a plane that way)."""
    return a.reshape(a.shape[0], a.shape[1], 1, a.shape[2] * a.shape[3])


MAX_TAPS = 16  # KH·KW the kernel unrolls: 25 (5×5) passed the compiler's unroll budget


def direct_geometry_ok(geom) -> bool:
    """Stride 1, or a 1×1 kernel without padding; no dilation; at most MAX_TAPS window taps (geom
    as pack_im2col_int8's: KH, KW, strides, pads begin, dilations, OH, OW)."""
    kh, kw, sh, sw, ph, pw, dh, dw = (int(g) for g in geom[:8])
    return dh == 1 and dw == 1 and kh * kw <= MAX_TAPS and (
        (sh == 1 and sw == 1) or (kh == 1 and kw == 1 and ph == 0 and pw == 0))


def direct_conv_ok(w: np.ndarray, w_zp, geom) -> bool:
    """Whether ``conv_int8_direct`` takes this convolution: ``direct_geometry_ok`` (any weights'
    zero point: one that is not 0 once shifted to i8 costs a window sum per panel)."""
    return direct_geometry_ok(geom)


def shifted_weight_zero_point(w: np.ndarray, w_zp) -> np.ndarray:
    """The weights' zero point (None: 0) as the kernel's i8 weights see it (u8 ones shifted by
    128), (1, 1) or (1, M) i32."""
    zw = np.zeros(1, np.int32) if w_zp is None else np.asarray(w_zp).astype(np.int32).reshape(-1)
    return (zw - (128 if w.dtype == np.uint8 else 0)).reshape(1, -1)


def conv_int8_direct(x, w, y, x_zp, geom, mult=None, bias=None, y_zp=0, q_lo=None, q_hi=None,
                     backend=None, tile=None, w_zp=None, launch=None, saturating=None, post=None,
                     products=None, arithmetic="exact") -> None:
    """y (N, M, OH, OW) = conv(x (N, C, H, W), w (M, C, KH, KW)) on ``qconv_direct_int8``, exact in
    i32 (y i32) or requantized with ``mult`` (f32, per tensor or per output channel), ``bias``
    (i32, per output channel), ``y_zp`` and the clamp [q_lo, q_hi] (default: y's type range).
    ``geom`` as ``direct_conv_ok``'s, which must hold; ``w_zp``: the weights' zero point (None: 0),
    per tensor or per output channel; ``launch``: see ``launched``; ``products``: "dot4", "dot4_sat" or
    "dot2_i16" (``PRODUCTS``; None: ``choose_products`` for ``arithmetic``, "exact" or "saturating"),
    a test's way to reach each path on every backend ("dot4_sat" on weights that can saturate gives
    vpmaddubsw's saturated sums, onnxruntime's AVX2 arithmetic); ``saturating``: the older
    spelling, True for "dot4_sat", False for "dot4"; ``post``: a second requantization of the
    requantized integers in the store (``SecondRequantization``)."""
    backend = backend or "numba"
    if not direct_geometry_ok(geom):
        raise ValueError(f"conv_int8_direct takes stride-1 convolutions, or 1x1 ones without padding, with "
                         f"no dilation and at most {MAX_TAPS} window taps (geom KH, KW, strides, pads, dilations = {list(geom[:8])}): use "
                         f"ops.conv_int8.conv_int8, which takes any 2-D convolution")
    tile = tile or direct_tile(backend)
    kh, kw, sh, sw, pt, pl = (int(g) for g in geom[:6])
    x = np.ascontiguousarray(x)
    whole = kh == 1 and kw == 1 and sh == 1 and sw == 1 and y.flags.c_contiguous
    if whole:
        x, y = whole_planes(x), whole_planes(y)
    n, c = x.shape[:2]
    m, oh, ow = y.shape[1:]
    nr = tile.NR
    if kh == 1 and kw == 1:  # a GEMM on the (subsampled) image: rows of OW words, no padding
        hp, wp_n = oh, ow
        if whole:  # the row as whole panels: the last one's loads end where the plane does
            wp_n = -(-ow // nr) * nr
        pack_geom = [sh, sw, 0, 0, hp]
    else:
        wp_n = ow + kw - 1
        hp = oh + kh - 1
        pack_geom = [1, 1, pt, pl, hp]
    positions = -(-(oh * wp_n) // nr) * nr
    reach = positions + (kh - 1) * wp_n + kw - 1 + 2 * tile.V  # words the last panel's loads reach
    hs = 1 if whole else max(hp, -(-reach // wp_n))
    c4 = -(-c // 4)
    wpk, wsum, fits = packed_weights(w, tile)
    if products is None:
        products = choose_products(backend, fits, arithmetic) if saturating is None else \
            ("dot4_sat" if saturating else "dot4")
    if products not in PRODUCTS:
        raise ValueError(f"conv_int8_direct: products={products!r} is not one of {', '.join(PRODUCTS)} (or None: "
                         f"the exact choice for the target, ``choose_products``)")
    split = int(products == "dot2_i16")  # the image as even and odd planes of i16 pairs, the weights widened
    if split:
        wpk, wsum = widened_weights(w, tile)
    xp = np.empty((n, c4 * (1 + split), hs, wp_n), np.int32)
    xz = np.zeros(1, x.dtype) if x_zp is None else np.asarray(x_zp, x.dtype).reshape(1)
    launched(pack_nchw4c_int8, launch)(x, xz, xp, np.asarray(pack_geom, np.int64),
                     0x80 if x.dtype == np.int8 else 0, V=pack_lanes(tile.V, x.shape[3]), S=split, backend=backend)
    zx = (int(xz[0]) & 0xFF) ^ (0x80 if x.dtype == np.int8 else 0)
    requantize = mult is not None
    if requantize:
        lo, hi = output_range(y.dtype, q_lo, q_hi)
        mult = np.asarray(mult, np.float32).reshape(1, -1)
    else:
        lo = hi = 0.0
        mult = np.ones((1, 1), np.float32)
    bias = np.zeros((1, 1), np.int32) if bias is None else np.asarray(bias, np.int32).reshape(1, -1)
    rb = row_block(wpk.shape[0], wpk.shape[1] * 4)  # widened weights are twice the bytes: half the tiles
    wzp = shifted_weight_zero_point(w, w_zp)
    if post is not None and not requantize:
        raise ValueError("conv_int8_direct: a second requantization (post) needs the first one (mult)")
    stage = post or SecondRequantization.none()
    launched(qconv_direct_int8, launch)(xp, wpk, wsum, mult, bias, wzp, stage.table, y, rb, zx, int(requantize),
                      float(y_zp), lo, hi, int(post is not None), stage.s1, stage.s2, stage.z2, stage.lo, stage.hi,
                      KH=kh, KW=kw, V=tile.V, MR=tile.MR, ZW=int(np.any(wzp != 0)), SAT=PRODUCTS.index(products),
                      backend=backend)


class SecondRequantization(NamedTuple):
    """A per-channel affine map of a convolution's requantized integers q, done in its store:
    y = clamp(rint(((q - y_zp)·s1·a[m] + b[m]) / s2) + z2, lo, hi) in f32 (a QDQ
    BatchNormalization after the convolution, ops/quant_conv_batch_norm.py); ``table`` is
    (2, M) f32, rows a and b."""
    table: np.ndarray
    s1: float
    s2: float
    z2: float
    lo: float
    hi: float

    @staticmethod
    def none() -> "SecondRequantization":
        return SecondRequantization(np.zeros((1, 1), np.float32), 1.0, 1.0, 0.0, 0.0, 0.0)
