"""Direct f32 convolution vectorized over output pixels, for images with few input channels.

Why a second direct kernel: ops/conv_direct.py vectorizes over 16 output channels and
broadcasts one input value per pixel, so a plain output (the first layers of a CNN run on
plain images) is written by a transposing epilogue of scalar stores, and with 3 input channels
that epilogue was half of squeezenet's 3×3/2 stem.  Here a SIMD value holds ``V``
consecutive output pixels of one row and one output channel, so plain rows are stored with
vector stores and a tap's weights are scalars broadcast from a small packed array:

* **Padding copy**: a work item (a band of row tiles of one image, every column and output
  channel: one band a core, ``stem_band``) first copies the input rows it reads into its
  worker's slice of ``xp``, zero-bordered and split by column phase: padded column ``q·SW + s``
  at ``s·WQ + q``, so the ``V`` input columns one tap needs for ``V`` consecutive output pixels
  are consecutive for any stride (one vector load), and each row is long enough for a whole
  last vector (lanes past the image read zeros and are not stored).  One launch, no
  image-sized buffer (a band's copy stays under MAX_ITEM_BYTES).
* **Register tile**: ``R`` output rows × ``NO`` output channels of one ``V``-pixel vector
  (``R·NO`` accumulators); per tap (input channel, kh, kw) it loads ``R`` input vectors and
  broadcasts ``NO`` weights, packed ``[oc group][ic][kh][kw][NO]`` (zero past M).  Each oc
  group walks the band's row tiles, so its channels' output rows are written front to back.
* **Epilogue**: a whole plain tile is stored from the registers, bias, the residual and the
  activation applied per vector; edge tiles (a partial last vector or row tile) and NCHWc16
  output go through per-thread scratch and a run-time loop (one compiled copy): plain rows a
  vector at a time (a partial last vector lane by lane), NCHWc16 per pixel (zero past M).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from ops.conv_direct import BLOCK, balanced_grid, cached_pack, pad_bias
from ops.gemm_packed import activation
from ops.register_tiles import fits
from ops.work_split import rows_per_core

THREADS = 4
# Conv.select's rule, measured (benchmarks/RESULTS.md, CPU time against ops/conv_direct.py):
# images of <= FEW_CHANNELS channels always (the direct tile's channel loop is too short), up to
# MAX_CHANNELS when rows are at least WIDE pixels (direct wins at 14-28 pixels: 16-pixel vectors
# waste lanes there, and the direct kernel tiles the flattened image with no waste)
FEW_CHANNELS = 4
MAX_CHANNELS = 32
WIDE = 48
# most input bytes a work item copies (its rows of every channel): bands of big images stay in L2
MAX_ITEM_BYTES = 1 << 20

# geometry vector (``geom``) slots
G_N, G_C, G_M, G_KH, G_KW, G_SH, G_SW, G_DH, G_OH, G_OW = range(10)
G_H, G_W, G_PT, G_PL, G_KR, G_WQ = range(10, 16)  # KR: input rows an item of R output rows reads
GEOM = 16


@dataclass(frozen=True)
class StemConfig:
    """Register tile: R output rows × NO output channels of one V-pixel vector."""

    V: int = 16
    R: int = 2
    NO: int = 8

    def __post_init__(self):
        if self.V not in (4, 8, 16):
            raise ValueError(f"StemConfig V={self.V}: lanes must be 4, 8 or 16")
        if self.R < 1 or self.NO < 1:
            raise ValueError(f"StemConfig R={self.R}, NO={self.NO}: the tile needs at least one row and "
                             f"one output channel")


def stem_config(backend: str = "numba") -> StemConfig:
    """AVX-512: 3 rows × 8 channels of 16 pixels (24 accumulators, 3 input vectors and a
    broadcast of 32 registers: per tap 11 loads for 24 FMAs, 0.94-0.96x the time of 2 × 8 on
    ResNet-50's plain stem; benchmarks/RESULTS.md, twentieth session, slice stem); 16 registers
    (AVX2): 2 rows × 6 channels of 8 pixels."""
    if "avx512f" in dsl.target(backend).features:
        return StemConfig(V=16, R=3, NO=8) if fits(24, 3, backend) else StemConfig(V=16, R=2, NO=8)
    return StemConfig(V=8, R=2, NO=6)


@dsl.kernel
def pack_stem_weights(w: In[f32], b: In[f32], wp: Out[f32], bp: Out[f32], m: i64, ckk: i64, NO: dsl.const[i64]):
    """wp[g, r, j] = w[g·NO + j, r] for r over (ic, kh, kw) (0 past m), bp[o] = b[o] (0 past m)."""
    lo, hi = dsl.split(wp.size)
    for i in range(lo, hi):
        j = i % NO
        r = (i // NO) % ckk
        oc = (i // (NO * ckk)) * NO + j
        v = f32(0)
        if oc < m:
            v = w.flat[oc * ckk + r]
        wp.flat[i] = v
    pad_bias(b, bp, m)


@dsl.func
def copy_rows_phase_split(x, xp, base, nb, ih0, c_in, kr_n, row_len, h_n, w_n, pl, sw, wq_n):
    """Input rows ``ih0 .. ih0 + kr_n`` of every channel of image ``nb`` into ``xp`` from
    ``base``, zero-bordered and split by column phase: padded column q·sw + s goes to
    s·wq_n + q, so a tap's columns for consecutive output pixels are one vector load."""
    for cr in range(c_in * kr_n):
        ih = ih0 + cr % kr_n
        dst = base + cr * row_len
        if ih < 0 or ih >= h_n:
            for e in range(row_len):
                xp.flat[dst + e] = f32(0)
        else:
            src = ((nb * c_in + cr // kr_n) * h_n + ih) * w_n - pl
            for s in range(sw):
                q_lo = min(wq_n, (pl - s + sw - 1) // sw)
                q_hi = max(q_lo, min(wq_n, (w_n + pl - s + sw - 1) // sw))
                at = dst + s * wq_n
                for q in range(q_lo):
                    xp.flat[at + q] = f32(0)
                for q in range(q_lo, q_hi):
                    xp.flat[at + q] = x.flat[src + q * sw + s]
                for q in range(q_hi, wq_n):
                    xp.flat[at + q] = f32(0)


@dsl.kernel(threads=THREADS)
def conv_stem(x: In[f32], w: In[f32], bias: In[f32], res: In[f32], y: Out[f32], xp: InOut[f32],
              koff: In[i64], geom: dsl.Vec[i64, 16], blocked_out: i32, add_res: i32, act: i32,
              act_lo: f32, act_hi: f32, band: i64, V: dsl.const[i64], R: dsl.const[i64], NO: dsl.const[i64]):
    """y = act(conv(x, w) + bias [+ res]) for plain x; y (and res) NCHWc16 when ``blocked_out``
    else plain.  ``xp`` holds each worker's padded input rows (geom's KR rows per channel);
    ``koff[t]`` is the offset of tap t = (ic, kh, kw) in a worker's rows (ic·KR·SW·WQ +
    kh·DH·SW·WQ + phase·WQ + shift)."""
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
    row_len = sw * wq_n  # one padded input row in xp
    plane = kr_n * row_len  # one input channel's rows of a work item
    mb = (m_out + BLOCK - 1) // BLOCK
    m_pad = m_out
    if blocked_out == 1:  # every lane of the last block is written, zero past m_out
        m_pad = mb * BLOCK
    ocg_n = (m_pad + NO - 1) // NO
    vecs = (ow_n + V - 1) // V
    item_rows = R * band  # a work item: ``band`` row tiles of R output rows
    items = (oh_n + item_rows - 1) // item_rows
    ckk = c_in * kh_n * kw_n
    tile = dsl.scratch((THREADS, R * NO * V), f32)
    at_s = dsl.thread_id() * R * NO * V
    worker = dsl.tile_id() * THREADS + dsl.thread_id()
    base = worker * c_in * plane  # this worker's rows in xp
    # an even share per worker: split's ceil chunks put both of two items on the first OS thread's
    # workers (the parallel entry hands each thread a contiguous run of workers)
    workers = dsl.num_tiles() * THREADS
    lo = worker * (geom[G_N] * items) // workers
    hi = (worker + 1) * (geom[G_N] * items) // workers
    for item in range(lo, hi):
        oh_b = (item % items) * item_rows
        nb = item // items
        # the item's input rows, zero-bordered and split by column phase
        ih0 = oh_b * sh - geom[G_PT]
        copy_rows_phase_split(x, xp, base, nb, ih0, c_in, kr_n, row_len, h_n, w_n, pl, sw, wq_n)
        for g in range(ocg_n):  # one oc group's weights stay in L1 across the item's rows
            wg = g * ckk * NO
            for oh0 in range(oh_b, min(oh_n, oh_b + item_rows), R):
                nr = min(R, oh_n - oh0)
                # each output row's origin in xp: rows past the image repeat the last one (not stored)
                org = dsl.local((R,), i64)
                for rr in dsl.static_range(R):
                    org[rr] = base + (min(oh0 + rr, oh_n - 1) - oh_b) * sh * row_len
                for vi in range(vecs):
                    ow0 = vi * V
                    acc = dsl.local((R, NO), dsl.simd(f32, V))
                    for t in range(ckk):  # every (ic, kh, kw) tap in one loop: koff holds its offset
                        xr = dsl.local((R,), dsl.simd(f32, V))
                        for rr in dsl.static_range(R):
                            xr[rr] = xp.vload(org[rr] + ow0 + koff[t], V)
                        for j in dsl.static_range(NO):
                            wv = dsl.splat(w.flat[wg + t * NO + j], V)
                            for rr in dsl.static_range(R):
                                acc[rr, j] = dsl.fma(xr[rr], wv, acc[rr, j])
                    npx = min(V, ow_n - ow0)
                    if blocked_out == 0 and nr == R and npx == V and (g + 1) * NO <= m_pad:
                        # a whole tile of plain rows: stored from the registers, one vector each
                        for j in dsl.static_range(NO):
                            b_j = bias.flat[g * NO + j]
                            for rr in dsl.static_range(R):
                                at = ((nb * m_out + g * NO + j) * oh_n + oh0 + rr) * ow_n + ow0
                                vec = acc[rr, j] + b_j
                                if add_res == 1:
                                    vec = vec + res.vload(at, V)
                                y.vstore(at, activation(vec, act, act_lo, act_hi))
                        continue
                    for rr in dsl.static_range(R):
                        for j in dsl.static_range(NO):
                            tile.vstore(at_s + (rr * NO + j) * V, acc[rr, j])
                    # edges and NCHWc16: the epilogue at run time, one compiled copy of it
                    for jo in range(min(NO, m_pad - g * NO)):
                        oc = g * NO + jo
                        for ri in range(nr):
                            oh = oh0 + ri
                            ts = at_s + (ri * NO + jo) * V
                            if blocked_out == 1:
                                at = ((nb * mb + oc // BLOCK) * oh_n + oh) * ow_n * BLOCK + oc % BLOCK
                                for px in range(npx):
                                    v = f32(0)
                                    if oc < m_out:
                                        v = tile[dsl.thread_id(), ts - at_s + px] + bias.flat[oc]
                                        if add_res == 1:
                                            v += res.flat[at + (ow0 + px) * BLOCK]
                                        v = activation(v, act, act_lo, act_hi)
                                    y.flat[at + (ow0 + px) * BLOCK] = v
                            else:
                                at = ((nb * m_out + oc) * oh_n + oh) * ow_n + ow0
                                if npx == V:
                                    vec = tile.vload(ts, V) + bias.flat[oc]
                                    if add_res == 1:
                                        vec = vec + res.vload(at, V)
                                    y.vstore(at, activation(vec, act, act_lo, act_hi))
                                else:  # the row's partial last vector
                                    for px in range(npx):
                                        v = tile[dsl.thread_id(), ts - at_s + px] + bias.flat[oc]
                                        if add_res == 1:
                                            v += res.flat[at + px]
                                        y.flat[at + px] = activation(v, act, act_lo, act_hi)


# --------------------------------------------------------------------------- launch


def stem_weights(w: np.ndarray, b, cfg: StemConfig, m_pad: int, backend: str):
    """(weights, bias) packed [oc group][ic][kh][kw][NO] for ``m_pad`` output channels; constant
    weights once per array (conv_direct's cache)."""
    def pack():
        m = w.shape[0]
        ckk = int(np.prod(w.shape[1:]))
        groups = -(-m_pad // cfg.NO)
        wp = np.empty(groups * ckk * cfg.NO, np.float32)
        bp = np.empty(groups * cfg.NO, np.float32)
        bias = np.zeros(m, np.float32) if b is None else b.reshape(-1)
        pack_stem_weights(w.reshape(-1), bias, wp, bp, m, ckk, NO=cfg.NO, backend=backend)
        return wp, bp
    return cached_pack(w, b, ("stem", cfg, m_pad), pack)


def stem_band(images: int, row_tiles: int, item_bytes, backend: str = "numba") -> int:
    """Row tiles per work item: as many as give each of ``dsl.target``'s cores one item (with a
    whole image a core), fewer where the input rows an item copies (``item_bytes(tiles)``) pass
    MAX_ITEM_BYTES.  Long items write each output channel's rows front to back, one oc group
    after the other: on ResNet-50's plain stem (one core) items of 19 row tiles took 0.86-0.89x
    the time of one-tile items, whose stores went to 64 channel planes at once
    (benchmarks/RESULTS.md, twentieth session, slice stem)."""
    band = rows_per_core(row_tiles, images, backend)
    while band > 1 and item_bytes(band) > MAX_ITEM_BYTES:
        band = -(-band // 2)
    return max(1, band)


def stem_supported(x, w, group: int, out_width) -> bool:
    """Plain f32 images, one group, 1-D or 2-D, of few channels (see FEW_CHANNELS): where this
    kernel measured faster than the direct one.  ``out_width`` may be None (not known)."""
    if not (x.dtype == dsl.f32 and group == 1 and x.ndim in (3, 4) and w.ndim == x.ndim
            and x.format != "nchwc16" and x.shape[1] is not None):
        return False
    c = x.shape[1]
    return c <= FEW_CHANNELS or (c <= MAX_CHANNELS and out_width is not None and out_width >= WIDE)


def launch_conv_stem(impl, x, w, bias, y, res, strides, dil, begin, blocked_out: bool, backend,
                     act: int, lo: float, hi: float, cfg: StemConfig = None, band: int = None) -> None:
    """Run ``impl`` (conv_stem, or a model's recorder of it) on plain 4-D x (N, C, H, W); y and
    res plain (N, M, OH, OW) or NCHWc16 (N, M/16, OH, OW, 16) when ``blocked_out``; ``band``:
    row tiles per work item (``stem_band``'s by default)."""
    cfg = cfg or stem_config(backend or "numba")
    for name, a in (("x", x), ("w", w), ("y", y), ("B", bias), ("Z", res)):
        if a is not None and a.dtype != np.float32:
            raise ValueError(f"conv_stem computes f32; {name} is {a.dtype} (f16, bf16 and f64 run the GEMM "
                             f"or conv_nchw kernels)")
    if x.ndim != 4:
        raise ValueError(f"conv_stem reads plain (N, C, H, W) images; x has shape {tuple(x.shape)}")
    m, c, kh, kw = w.shape
    if c != x.shape[1]:
        raise ValueError(f"conv_stem takes one group: weights {tuple(w.shape)} need C = {x.shape[1]} input "
                         f"channels, got C/group = {c}")
    n, _, h, wd = x.shape
    oh, ow = y.shape[2], y.shape[3]
    if (y.ndim == 5) != blocked_out:
        raise ValueError(f"conv_stem: y has shape {tuple(y.shape)}, expected "
                         f"{'NCHWc16 (N, M/16, OH, OW, 16)' if blocked_out else 'plain (N, M, OH, OW)'}")
    m_pad = -(-m // BLOCK) * BLOCK if blocked_out else m
    wp, bp = stem_weights(w, bias, cfg, m_pad, backend)
    sh, sw = strides
    # a row holds whole vectors of output pixels for the widest tap shift
    wq = -(-ow // cfg.V) * cfg.V + ((kw - 1) * dil[1]) // sw
    row = sw * wq

    def rows_read(tiles):  # input rows an item of ``tiles`` row tiles reads
        return (min(cfg.R * tiles, oh + cfg.R - 1) - 1) * sh + (kh - 1) * dil[0] + 1
    if band is None:
        band = stem_band(n, -(-oh // cfg.R), lambda t: 4 * c * rows_read(t) * row, backend or "numba")
    if band < 1:
        raise ValueError(f"conv_stem band={band}: a work item needs at least one row tile")
    kr = rows_read(band)
    ic_, kh_, kw_ = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw) * dil[1], indexing="ij")
    koff = (ic_ * kr * row + kh_ * dil[0] * row + (kw_ % sw) * wq + kw_ // sw).reshape(-1).astype(np.int64)
    geom = np.zeros(GEOM, np.int64)
    geom[:] = (n, c, m, kh, kw, sh, sw, dil[0], oh, ow, h, wd, begin[0], begin[1], kr, wq)
    flat_res = np.zeros(1, np.float32) if res is None else res.reshape(-1)
    items = n * -(-oh // (cfg.R * band))
    grid = balanced_grid(items, THREADS)
    buf = np.empty(grid * THREADS * c * kr * sw * wq, np.float32)
    impl(x.reshape(-1), wp, bp, flat_res, y.reshape(-1), buf, koff, geom, blocked_out=int(blocked_out),
         add_res=int(res is not None), act=act, act_lo=float(lo), act_hi=float(hi), band=band, V=cfg.V, R=cfg.R,
         NO=cfg.NO, backend=backend, grid=grid)
