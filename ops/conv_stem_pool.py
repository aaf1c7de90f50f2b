"""A CNN's stem convolution and the MaxPool after it in one kernel (squeezenet's Conv 3x3/2 ->
Relu -> MaxPool 3x3/2): the convolution's output never goes to memory.

Why: the stem writes a large plain output (64x111x111 f32 = 3.1 MB for squeezenet) that the
MaxPool reads straight back.  Here a work item is a band of ``B`` pooled rows of one image; it
computes the stem rows the band's windows cover ((B-1)·stride + kernel rows) with
ops/conv_stem.py's method (phase-split zero-bordered input rows, a register tile of R rows x
NO output channels of V-pixel vectors) into its worker's slice of ``cs``, applies bias and
activation there, then pools each channel vertically (vector max over rows) and horizontally
(per pooled pixel) and stores pooled rows, plain or NCHWc16 (a pixel's 16 channels together:
the 1×1 convolutions after the stem read their input fastest that way; from plain x ResNet-50's
64→256 projection ran ~1.4x slower).  3-wide windows (both models' pools) take
unrolled three-load maxima (the general loops over rows and columns cost 70 µs of 245 on one
core).  Items are shared out evenly (worker·items // workers): split's ceil chunks gave one core
8 of squeezenet's 14 bands and the other 6.  Pool padding and ceil_mode clip the windows
to the convolution's output, as MaxPool's pads are never the maximum.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from ops.conv_direct import balanced_grid
from ops.conv_stem import StemConfig, copy_rows_phase_split, stem_weights
from ops.gemm_packed import activation

THREADS = 4
# pooled rows per work item: 2B+1 = 15 stem rows, five whole 3-row tiles; 8 items at 55 or 56 rows
# (4 a core), 8 % of the stem rows computed twice against 13.5 % at B = 4 (9 rows, 14 items): one
# core, ResNet-50's 7x7 stem + pool 0.92x and squeezenet's 0.95x the time of B = 4 (RESULTS.md,
# nineteenth session); B = 6 and 8 (13 and 17 rows: a tile repeats rows) were slower
BAND = 7

# geometry vector slots: the stem's, then the pool's
(G_N, G_C, G_M, G_KH, G_KW, G_SH, G_SW, G_DH, G_OH, G_OW, G_H, G_W, G_PT, G_PL, G_KR, G_WQ,
 G_PKH, G_PKW, G_PSH, G_PSW, G_PPT, G_PPL, G_PH, G_PW, G_BAND, G_CR, G_OWP, G_BLOCKED) = range(28)
BLOCK = 16  # channels per NCHWc16 block
GEOM = 32


def stem_pool_config(backend: str = "numba") -> StemConfig:
    """Three stem rows per tile: a band of B pooled rows of a 3-wide, stride-2 pool needs 2B+1 rows,
    a multiple of 3 for B = 1, 4, 7, where conv_stem's two-row tile computes one row twice.
    AVX-512: 3 x 8 accumulators of 16 lanes (of 32 registers); narrower: 3 x 4 of 8 lanes."""
    if "avx512f" in dsl.target(backend).features:
        return StemConfig(V=16, R=3, NO=8)
    return StemConfig(V=8, R=3, NO=4)


@dataclass(frozen=True)
class PoolWindow:
    """MaxPool's 2-D window: kernel, strides, begin pads and output size (from pool_geometry)."""

    kernel: tuple
    strides: tuple
    begin: tuple
    out: tuple


@dsl.kernel(threads=THREADS)
def conv_stem_pool(x: In[f32], w: In[f32], bias: In[f32], y: Out[f32], xp: InOut[f32], cs: InOut[f32],
                   koff: In[i64], geom: dsl.Vec[i64, 32], act: i32, act_lo: f32, act_hi: f32,
                   V: dsl.const[i64], R: dsl.const[i64], NO: dsl.const[i64]):
    """y = maxpool(act(conv(x, w) + bias)), x plain, y plain or (geom[G_BLOCKED]) NCHWc16 with M a
    multiple of 16.  ``xp``: each worker's padded input
    rows (as conv_stem); ``cs``: each worker's stem rows [NO][CR][OWP], a row of vertical maxima
    and a row of their sliding maxima over the pool's width; ``koff[t]``: tap t's offset in a
    worker's rows."""
    c_in = geom[G_C]
    m_out = geom[G_M]
    kh_n = geom[G_KH]
    kw_n = geom[G_KW]
    sh = geom[G_SH]
    sw = geom[G_SW]
    oh_n = geom[G_OH]
    ow_n = geom[G_OW]
    h_n = geom[G_H]
    w_n = geom[G_W]
    pl = geom[G_PL]
    wq_n = geom[G_WQ]
    kr_n = geom[G_KR]
    pkh = geom[G_PKH]
    pkw = geom[G_PKW]
    psh = geom[G_PSH]
    psw = geom[G_PSW]
    ppt = geom[G_PPT]
    ppl = geom[G_PPL]
    ph_n = geom[G_PH]
    pw_n = geom[G_PW]
    band = geom[G_BAND]
    cr_n = geom[G_CR]
    owp = geom[G_OWP]
    row_len = sw * wq_n
    plane = kr_n * row_len
    ocg_n = (m_out + NO - 1) // NO
    vecs = owp // V
    bands = (ph_n + band - 1) // band
    ckk = c_in * kh_n * kw_n
    worker = dsl.tile_id() * THREADS + dsl.thread_id()
    base = worker * c_in * plane
    cbase = worker * (NO * cr_n * owp + 2 * owp + pkw)
    vrow = cbase + NO * cr_n * owp  # one channel's vertical maxima of one pooled row (+ pkw slack)
    hrow = vrow + owp + pkw  # their sliding maxima over pkw columns
    pc_a = min(pw_n, (ppl + psw - 1) // psw)  # pooled columns [pc_a, pc_b) have whole windows
    pc_b = max(pc_a, min(pw_n, (ow_n - pkw + ppl) // psw + 1))
    items = geom[G_N] * bands  # an even share per worker (split's ceil chunks left 8 of 14 on one core)
    workers = dsl.num_tiles() * THREADS
    lo = worker * items // workers
    hi = (worker + 1) * items // workers
    for item in range(lo, hi):
        p0 = (item % bands) * band
        nb = item // bands
        npr = min(band, ph_n - p0)
        c0 = max(0, p0 * psh - ppt)  # the stem rows the band's windows cover
        c1 = min(oh_n, (p0 + npr - 1) * psh - ppt + pkh)
        ncr = c1 - c0
        ih0 = c0 * sh - geom[G_PT]
        copy_rows_phase_split(x, xp, base, nb, ih0, c_in, kr_n, row_len, h_n, w_n, pl, sw, wq_n)
        for g in range(ocg_n):
            wg = g * ckk * NO
            for r0 in range(0, ncr, R):
                # rows past the band repeat its last one (same values stored twice)
                org = dsl.local((R,), i64)
                at_r = dsl.local((R,), i64)
                for rr in dsl.static_range(R):
                    r = min(r0 + rr, ncr - 1)
                    org[rr] = base + r * sh * row_len
                    at_r[rr] = cbase + r * owp
                for vi in range(vecs):
                    ow0 = vi * V
                    acc = dsl.local((R, NO), dsl.simd(f32, V))
                    for t in range(ckk):
                        xr = dsl.local((R,), dsl.simd(f32, V))
                        for rr in dsl.static_range(R):
                            xr[rr] = xp.vload(org[rr] + ow0 + koff[t], V)
                        for j in dsl.static_range(NO):
                            wv = dsl.splat(w.flat[wg + t * NO + j], V)
                            for rr in dsl.static_range(R):
                                acc[rr, j] = dsl.fma(xr[rr], wv, acc[rr, j])
                    for j in dsl.static_range(NO):
                        bj = bias.flat[g * NO + j]
                        for rr in dsl.static_range(R):
                            cs.vstore(at_r[rr] + j * cr_n * owp + ow0,
                                      activation(acc[rr, j] + bj, act, act_lo, act_hi))
            for jc in range(min(NO, m_out - g * NO)):
                oc = g * NO + jc
                ch = cbase + jc * cr_n * owp - c0 * owp  # stem row r of channel oc at ch + r·owp
                for pr in range(npr):
                    prow = p0 + pr
                    r_lo = max(0, prow * psh - ppt)
                    r_hi = min(oh_n, prow * psh - ppt + pkh)
                    if r_hi - r_lo == 3:
                        a0 = ch + r_lo * owp
                        for vi in range(vecs):
                            cs.vstore(vrow + vi * V, max(max(cs.vload(a0 + vi * V, V), cs.vload(a0 + owp + vi * V, V)),
                                                         cs.vload(a0 + 2 * owp + vi * V, V)))
                    else:
                        for vi in range(vecs):
                            v = cs.vload(ch + r_lo * owp + vi * V, V)
                            for r in range(r_lo + 1, r_hi):
                                v = max(v, cs.vload(ch + r * owp + vi * V, V))
                            cs.vstore(vrow + vi * V, v)
                    if pkw == 3:
                        for vi in range(vecs):
                            cs.vstore(hrow + vi * V, max(max(cs.vload(vrow + vi * V, V), cs.vload(vrow + vi * V + 1, V)),
                                                         cs.vload(vrow + vi * V + 2, V)))
                    else:
                        for vi in range(vecs):  # sliding maxima: hrow[q] = max(vrow[q : q + pkw])
                            hv = cs.vload(vrow + vi * V, V)
                            for q in range(1, pkw):
                                hv = max(hv, cs.vload(vrow + vi * V + q, V))
                            cs.vstore(hrow + vi * V, hv)
                    at = ((nb * m_out + oc) * ph_n + prow) * pw_n
                    step = 1  # between a channel's pooled pixels in y
                    if geom[G_BLOCKED] == 1:
                        at = (nb * m_out + oc - oc % BLOCK) * ph_n * pw_n + prow * pw_n * BLOCK + oc % BLOCK
                        step = BLOCK
                    for pc in range(pc_a, pc_b):  # windows inside the row: one pick each
                        y.flat[at + pc * step] = cs.flat[hrow + pc * psw - ppl]
                    for e in range(pc_a + pw_n - pc_b):  # windows clipped by the pads or ceil_mode
                        pc = e
                        if e >= pc_a:
                            pc = pc_b + e - pc_a
                        q_lo = pc * psw - ppl
                        q_hi = min(ow_n, q_lo + pkw)
                        q_lo = max(0, q_lo)
                        mx = cs.flat[vrow + q_lo]
                        for q in range(q_lo + 1, q_hi):
                            mx = max(mx, cs.flat[vrow + q])
                        y.flat[at + pc * step] = mx


def launch_conv_stem_pool(impl, x, w, bias, y, strides, dil, begin, conv_out, pool: PoolWindow, backend,
                          act: int, lo: float, hi: float, cfg: StemConfig = None, band: int = BAND) -> None:
    """Run ``impl`` on plain x (N, C, H, W) -> y, plain (N, M, PH, PW) or NCHWc16 (N, M/16, PH, PW,
    16) for M a multiple of 16; ``conv_out`` is the stem's (OH, OW), ``begin`` its begin pads."""
    cfg = cfg or stem_pool_config(backend or "numba")
    for name, a in (("x", x), ("w", w), ("y", y), ("B", bias)):
        if a is not None and a.dtype != np.float32:
            raise ValueError(f"conv_stem_pool computes f32; {name} is {a.dtype}")
    if x.ndim != 4 or y.ndim not in (4, 5):
        raise ValueError(f"conv_stem_pool reads plain (N, C, H, W) images and writes plain or NCHWc16 "
                         f"(N, M/16, H, W, 16) ones; x has shape {tuple(x.shape)}, y {tuple(y.shape)}")
    if band < 1:
        raise ValueError(f"conv_stem_pool band={band}: a work item needs at least one pooled row")
    m, c, kh, kw = w.shape
    if c != x.shape[1]:
        raise ValueError(f"conv_stem_pool takes one group: weights {tuple(w.shape)} need C = {x.shape[1]}")
    n, _, h, wd = x.shape
    oh, ow = conv_out
    (pkh, pkw), (psh, psw), (ppt, ppl), (ph, pw) = pool.kernel, pool.strides, pool.begin, pool.out
    blocked = y.ndim == 5
    want = (n, m // BLOCK, ph, pw, BLOCK) if blocked else (n, m, ph, pw)
    if tuple(y.shape) != want or (blocked and m % BLOCK):
        raise ValueError(f"conv_stem_pool: y has shape {tuple(y.shape)}, expected {want}"
                         + (f" (NCHWc16 output needs M a multiple of {BLOCK}, M = {m})" if blocked and m % BLOCK
                            else ""))
    wp, bp = stem_weights(w, bias, cfg, m, backend)
    sh, sw = strides
    band = min(band, ph)
    cr = (band - 1) * psh + pkh
    kr = (cr - 1) * sh + (kh - 1) * dil[0] + 1
    owp = -(-ow // cfg.V) * cfg.V
    wq = owp + ((kw - 1) * dil[1]) // sw
    row = sw * wq
    ic_, kh_, kw_ = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw) * dil[1], indexing="ij")
    koff = (ic_ * kr * row + kh_ * dil[0] * row + (kw_ % sw) * wq + kw_ // sw).reshape(-1).astype(np.int64)
    geom = np.zeros(GEOM, np.int64)
    geom[:28] = (n, c, m, kh, kw, sh, sw, dil[0], oh, ow, h, wd, begin[0], begin[1], kr, wq,
                 pkh, pkw, psh, psw, ppt, ppl, ph, pw, band, cr, owp, int(blocked))
    items = n * -(-ph // band)
    grid = balanced_grid(items, THREADS)
    workers = grid * THREADS
    xp = np.empty(workers * c * kr * row, np.float32)
    cs = np.empty(workers * (cfg.NO * cr * owp + 2 * owp + pkw), np.float32)
    impl(x.reshape(-1), wp, bp, y.reshape(-1), xp, cs, koff, geom, act=act, act_lo=float(lo), act_hi=float(hi),
         V=cfg.V, R=cfg.R, NO=cfg.NO, backend=backend, grid=grid)
