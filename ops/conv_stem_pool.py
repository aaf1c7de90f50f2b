"""A CNN's stem convolution and the MaxPool after it in one kernel (squeezenet's Conv 3x3/2 ->
Relu -> MaxPool 3x3/2, ResNet-50's 7x7/2 -> MaxPool 3x3/2): the convolution's output never
goes to memory.

Why: the stem writes a large output (64x111x111 f32 = 3.1 MB for squeezenet) that the MaxPool
reads straight back.  Here a work item is a band of ``B`` pooled rows of one image:

* **Input rows**: the rows the band's stem rows read are copied, zero-bordered, into the
  worker's slice of ``xp`` (vector copies), so every tap of every pixel is one in-bounds read.
* **Register tile over channels**: a SIMD value holds ``V`` consecutive output channels of one
  pixel; a tile is ``P`` pixels of a stem row × ``NV`` such vectors.  Per tap (input channel,
  kh, kw) it loads ``NV`` weight vectors (packed ``[oc group][ic][kh][kw][NV·V]``) and
  broadcasts ``P`` input values.  Bias and activation are applied per vector and the tile is
  stored, pixel-major with its channels together, into the worker's stem row in ``cs``.
* **Pooling row by row on whole vectors**: once a stem row is computed, its horizontal window
  maxima go into the running maxima of the pooled rows whose windows hold it, and a pooled
  row whose window ends is stored: NCHWc16 (a pixel's 16 channels together, what the 1×1
  convolutions after the stem read fastest) one vector at a time, plain lane by lane.  A
  worker's buffers are one stem row and a few pooled rows (70 KB for squeezenet), not the
  band's stem rows (430 KB): stores into a band that lives in L2 cost as much as the FMAs.

The previous kernel vectorized over pixels of a row (ops/conv_stem.py's tile): its per-pixel
picks into NCHWc16, phase-split scalar row copies and per-channel pooling made squeezenet's
stem + pool 1.4x this one's time, one core (benchmarks/RESULTS.md, twentieth session, slice
sq).  Items are shared out evenly (worker·items // workers).  Pool padding and ceil_mode clip
the windows to the convolution's output, as MaxPool's pads are never the maximum.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from dsl.runtime.cache_lines import line_aligned
from ops.conv_direct import balanced_grid
from ops.conv_stem import stem_weights
from ops.gemm_packed import activation
from ops.register_tiles import fits
from ops.work_split import rows_per_core

THREADS = 4
# fewest pooled rows per work item: a band of B pooled rows of a 3-wide stride-2 pool computes
# 2B+1 stem rows, one of them again in the next band (B = 4: 12 % of the rows twice)
MIN_BAND = 4
# most pooled rows per work item: a worker copies the input rows its band reads (28 rows of
# squeezenet: 115 input rows, 300 KB), so bands of large images stay bounded
MAX_BAND = 32

# geometry vector slots: the stem's, then the pool's
(G_N, G_C, G_M, G_KH, G_KW, G_SH, G_SW, G_DH, G_DW, G_OH, G_OW, G_H, G_W, G_PT, G_PL, G_KR, G_XW,
 G_PKH, G_PKW, G_PSH, G_PSW, G_PPT, G_PPL, G_PH, G_PW, G_BAND, G_OPEN, G_MG, G_BLOCKED) = range(29)
BLOCK = 16  # channels per NCHWc16 block
GEOM = 32


@dataclass(frozen=True)
class StemPoolConfig:
    """Register tile: ``P`` pixels of one stem row × ``NV`` vectors of ``V`` output channels."""

    V: int = 16
    P: int = 6
    NV: int = 4

    def __post_init__(self):
        if self.V not in (4, 8, 16):
            raise ValueError(f"StemPoolConfig V={self.V}: lanes must be 4, 8 or 16")
        if self.P < 1 or self.NV < 1:
            raise ValueError(f"StemPoolConfig P={self.P}, NV={self.NV}: the tile needs at least one pixel and "
                             f"one channel vector")

    @property
    def NO(self) -> int:
        """Output channels per group (stem_weights packs groups of this many)."""
        return self.V * self.NV


def stem_pool_config(backend: str = "numba", channels: int = 64) -> StemPoolConfig:
    """The widest vectors ``dsl.target`` has; ``NV`` vectors cover up to 64 channels (a group's
    weights per tap), and ``P`` pixels fill the registers left: AVX-512 6 × 4 of 16 lanes
    (24 accumulators + 4 weights of 32), AVX2 6 × 2 of 8 (12 + 2 of 16)."""
    wide = "avx512f" in dsl.target(backend).features
    v = 16 if wide else 8
    nv = max(1, min(64 // v, -(-channels // v)))
    while nv > 1 and not fits(6 * nv, nv, backend):
        nv -= 1
    p = 6
    while p > 1 and not fits(p * nv, nv, backend):
        p -= 1
    return StemPoolConfig(V=v, P=p, NV=nv)


def stem_band(images: int, pooled_rows: int, backend: str = "numba") -> int:
    """Pooled rows per work item: bands just many enough for each of ``dsl.target``'s cores to
    get one (with a whole image a core, one band an image), MIN_BAND to MAX_BAND rows.  Each band computes its first stem
    row again and starts its worker's buffers cold: on the 2-core Xeon squeezenet's stem + pool
    took 0.91x the time with bands of 28 rows instead of 7, ResNet-50's 0.83x (one core, caches
    swept; benchmarks/RESULTS.md, twentieth session, slice sq)."""
    return max(min(MIN_BAND, pooled_rows), min(MAX_BAND, rows_per_core(pooled_rows, images, backend)))


@dataclass(frozen=True)
class PoolWindow:
    """MaxPool's 2-D window: kernel, strides, begin pads and output size (from pool_geometry)."""

    kernel: tuple
    strides: tuple
    begin: tuple
    out: tuple


@dsl.func
def copy_rows_padded(x, xp, base, nb, ih0, c_in, kr_n, xw, h_n, w_n, pl):
    """Input rows ``ih0 .. ih0 + kr_n`` of every channel of image ``nb`` into ``xp`` from
    ``base`` (``xw`` floats a row): column j holds image column j - pl, zero outside the image."""
    zero = dsl.splat(f32(0), 16)
    for cr in range(c_in * kr_n):
        ih = ih0 + cr % kr_n
        dst = base + cr * xw
        n_img = 0  # image columns in this padded row
        if ih >= 0 and ih < h_n:
            n_img = max(0, min(w_n, xw - pl))
        head = min(pl, xw)
        if n_img == 0:
            head = xw
        for q in range(head):
            xp.flat[dst + q] = f32(0)
        src = ((nb * c_in + cr // kr_n) * h_n + max(0, ih)) * w_n
        q = 0
        while q + 16 <= n_img:
            xp.vstore(dst + pl + q, x.vload(src + q, 16))
            q += 16
        while q < n_img:
            xp.flat[dst + pl + q] = x.flat[src + q]
            q += 1
        q = head + n_img
        while q + 16 <= xw:
            xp.vstore(dst + q, zero)
            q += 16
        while q < xw:
            xp.flat[dst + q] = f32(0)
            q += 1


@dsl.kernel(threads=THREADS)
def conv_stem_pool(x: In[f32], w: In[f32], bias: In[f32], y: Out[f32], xp: InOut[f32], cs: InOut[f32],
                   koff: In[i64], geom: dsl.Vec[i64, 32], act: i32, act_lo: f32, act_hi: f32,
                   V: dsl.const[i64], P: dsl.const[i64], NV: dsl.const[i64]):
    """y = maxpool(act(conv(x, w) + bias)), x plain, y plain or (geom[G_BLOCKED]) NCHWc16 with M a
    multiple of 16.  ``xp``: each worker's zero-bordered input rows (geom's KR rows of XW floats
    per channel); ``cs``: each worker's stem row [OW][MG] (MG: M rounded up to whole groups of
    NV·V channels), the running maxima [OPEN][PW][MG] of the pooled rows whose windows are open
    (slot: pooled row % OPEN), a spare [PW][MG] row and V floats; ``koff[t]``: tap t's offset in a
    worker's rows."""
    c_in = geom[G_C]
    m_out = geom[G_M]
    sw = geom[G_SW]
    oh_n = geom[G_OH]
    ow_n = geom[G_OW]
    xw = geom[G_XW]
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
    mg = geom[G_MG]
    n_open = geom[G_OPEN]
    blocked = geom[G_BLOCKED]
    ocg_n = mg // (NV * V)
    bands = (ph_n + band - 1) // band
    ckk = c_in * geom[G_KH] * geom[G_KW]
    worker = dsl.tile_id() * THREADS + dsl.thread_id()
    base = worker * c_in * kr_n * xw
    crow = worker * ((ow_n + (n_open + 1) * pw_n) * mg + V)  # this worker's stem row
    vbase = crow + ow_n * mg  # its open windows' running maxima
    lanes = vbase + (n_open + 1) * pw_n * mg  # and V floats for a vector's lanes
    row_step = geom[G_SH] * xw  # between consecutive stem rows' inputs in xp
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
        copy_rows_padded(x, xp, base, nb, c0 * geom[G_SH] - geom[G_PT], c_in, kr_n, xw, geom[G_H], geom[G_W],
                         geom[G_PL])
        for r in range(c0, c1):
            org = base + (r - c0) * row_step
            for g in range(ocg_n):
                wg = g * ckk * NV * V
                for px0 in range(0, ow_n, P):
                    # pixels past the row repeat its last one (same values stored twice)
                    pix = dsl.local((P,), i64)
                    for p in dsl.static_range(P):
                        pix[p] = min(px0 + p, ow_n - 1)
                    acc = dsl.local((P, NV), dsl.simd(f32, V))
                    for t in range(ckk):
                        at = org + koff[t]
                        wv = dsl.local((NV,), dsl.simd(f32, V))
                        for k in dsl.static_range(NV):
                            wv[k] = w.vload(wg + (t * NV + k) * V, V)
                        for p in dsl.static_range(P):
                            xv = dsl.splat(xp.flat[at + pix[p] * sw], V)
                            for k in dsl.static_range(NV):
                                acc[p, k] = dsl.fma(xv, wv[k], acc[p, k])
                    for k in dsl.static_range(NV):
                        bv = bias.vload((g * NV + k) * V, V)
                        for p in dsl.static_range(P):
                            cs.vstore(crow + pix[p] * mg + (g * NV + k) * V,
                                      activation(acc[p, k] + bv, act, act_lo, act_hi))
            # the pooled rows whose windows hold stem row r: [wa, wb], wf the one it starts (or -1)
            wa = p0 + npr
            wb = p0 - 1
            wf = -1
            for prow in range(p0, p0 + npr):
                r_lo = max(0, prow * psh - ppt)
                if r >= r_lo and r < min(oh_n, prow * psh - ppt + pkh):
                    wa = min(wa, prow)
                    wb = max(wb, prow)
                    if r == r_lo:
                        wf = prow
            # the row's horizontal maxima, into the window it starts (else a spare row)
            hrow = vbase + n_open * pw_n * mg
            if wf >= 0:
                hrow = vbase + (wf % n_open) * pw_n * mg
            for pc in range(pw_n):
                q_lo = pc * psw - ppl
                q_hi = min(ow_n, q_lo + pkw)
                q_lo = max(0, q_lo)
                a = crow + q_lo * mg
                h = hrow + pc * mg
                if q_hi - q_lo == 3:  # both models' 3-wide windows inside the row
                    for c in range(0, mg, V):
                        cs.vstore(h + c, max(max(cs.vload(a + c, V), cs.vload(a + mg + c, V)), cs.vload(a + 2 * mg + c, V)))
                else:
                    for c in range(0, mg, V):
                        v = cs.vload(a + c, V)
                        for q in range(1, q_hi - q_lo):
                            v = max(v, cs.vload(a + q * mg + c, V))
                        cs.vstore(h + c, v)
            # into every window holding the row: a running maximum, or the pooled row once it ends
            for prow in range(wa, wb + 1):
                slot = vbase + (prow % n_open) * pw_n * mg
                if r == min(oh_n, prow * psh - ppt + pkh) - 1:
                    for pc in range(pw_n):
                        for c in range(0, m_out, V):
                            v = cs.vload(hrow + pc * mg + c, V)
                            if prow != wf:
                                v = max(v, cs.vload(slot + pc * mg + c, V))
                            if blocked == 1:
                                y.vstore((nb * m_out + c - c % BLOCK) * ph_n * pw_n + (prow * pw_n + pc) * BLOCK
                                         + c % BLOCK, v)
                            else:  # plain: the lanes one by one, through the worker's lane buffer
                                cs.vstore(lanes, v)
                                for e in range(min(V, m_out - c)):
                                    y.flat[((nb * m_out + c + e) * ph_n + prow) * pw_n + pc] = cs.flat[lanes + e]
                elif prow != wf:
                    for i in range(0, pw_n * mg, V):
                        cs.vstore(slot + i, max(cs.vload(slot + i, V), cs.vload(hrow + i, V)))


def launch_conv_stem_pool(impl, x, w, bias, y, strides, dil, begin, conv_out, pool: PoolWindow, backend,
                          act: int, lo: float, hi: float, cfg: StemPoolConfig = None, band: int = None) -> None:
    """Run ``impl`` on plain x (N, C, H, W) -> y, plain (N, M, PH, PW) or NCHWc16 (N, M/16, PH, PW,
    16) for M a multiple of 16; ``conv_out`` is the stem's (OH, OW), ``begin`` its begin pads;
    ``band``: pooled rows per work item (``stem_band``'s by default)."""
    for name, a in (("x", x), ("w", w), ("y", y), ("B", bias)):
        if a is not None and a.dtype != np.float32:
            raise ValueError(f"conv_stem_pool computes f32; {name} is {a.dtype}")
    if x.ndim != 4 or y.ndim not in (4, 5):
        raise ValueError(f"conv_stem_pool reads plain (N, C, H, W) images and writes plain or NCHWc16 "
                         f"(N, M/16, H, W, 16) ones; x has shape {tuple(x.shape)}, y {tuple(y.shape)}")
    if band is not None and band < 1:
        raise ValueError(f"conv_stem_pool band={band}: a work item needs at least one pooled row")
    m, c, kh, kw = w.shape
    if c != x.shape[1]:
        raise ValueError(f"conv_stem_pool takes one group: weights {tuple(w.shape)} need C = {x.shape[1]}")
    cfg = cfg or stem_pool_config(backend or "numba", m)
    n, _, h, wd = x.shape
    oh, ow = conv_out
    (pkh, pkw), (psh, psw), (ppt, ppl), (ph, pw) = pool.kernel, pool.strides, pool.begin, pool.out
    blocked = y.ndim == 5
    want = (n, m // BLOCK, ph, pw, BLOCK) if blocked else (n, m, ph, pw)
    if tuple(y.shape) != want or (blocked and m % BLOCK):
        raise ValueError(f"conv_stem_pool: y has shape {tuple(y.shape)}, expected {want}"
                         + (f" (NCHWc16 output needs M a multiple of {BLOCK}, M = {m})" if blocked and m % BLOCK
                            else ""))
    if blocked and BLOCK % cfg.V:
        raise ValueError(f"conv_stem_pool: NCHWc16 output needs vectors that divide {BLOCK} channels, V = {cfg.V}")
    mg = -(-m // cfg.NO) * cfg.NO
    wp, bp = stem_weights(w, bias, cfg, mg, backend)
    sh, sw = strides
    band = min(band or stem_band(n, ph, backend or "numba"), ph)
    cr = min(oh, (band - 1) * psh + pkh)
    kr = (cr - 1) * sh + (kh - 1) * dil[0] + 1
    xw = (ow - 1) * sw + (kw - 1) * dil[1] + 1
    n_open = -(-pkh // psh)  # pooled rows whose windows hold one stem row
    ic_, kh_, kw_ = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    koff = (ic_ * kr * xw + kh_ * dil[0] * xw + kw_ * dil[1]).reshape(-1).astype(np.int64)
    geom = np.zeros(GEOM, np.int64)
    geom[:29] = (n, c, m, kh, kw, sh, sw, dil[0], dil[1], oh, ow, h, wd, begin[0], begin[1], kr, xw,
                 pkh, pkw, psh, psw, ppt, ppl, ph, pw, band, n_open, mg, int(blocked))
    items = n * -(-ph // band)
    grid = balanced_grid(items, THREADS)
    workers = grid * THREADS
    xp = np.empty(workers * c * kr * xw, np.float32)
    cs = line_aligned(workers * ((ow + (n_open + 1) * pw) * mg + cfg.V))
    impl(x.reshape(-1), wp, bp, y.reshape(-1), xp, cs, koff, geom, act=act, act_lo=float(lo), act_hi=float(hi),
         V=cfg.V, P=cfg.P, NV=cfg.NV, backend=backend, grid=grid)
