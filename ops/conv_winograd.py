"""Winograd F(2×2, 3×3) convolution on NCHWc16 images: 16 multiplies per 2×2 outputs, not 36.

Why: the direct 3×3 kernel (ops/conv_direct.py) already runs near the FMA peak, so more speed on
a 3×3 layer needs fewer multiplies.  F(2×2, 3×3) (Lavin & Gray's minimal filtering) computes a
2×2 block of output pixels from a 4×4 block of input pixels as

    Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A,      summed over the input channels,

so per 4×4 tile and transform point ξ (16 of them) the channel sum is a GEMM: M[ξ] (tiles × M)
= V[ξ] (tiles × C) · U[ξ] (C × M), 2.25x fewer multiply-adds than the direct kernel.

* **Weights**: U[ξ] = (G g Gᵀ)[ξ] is made once per constant weight array (``pack_winograd_weights``,
  kept as the direct kernel keeps its packed weights) in the order the GEMM reads it:
  ``[ξ][oc group][ic][OCT oc]`` (zero past M and C), so a register tile's NV vectors of one input
  channel are contiguous.
* **One fused work item** is a block of ``TB`` tiles of one image: its input transform (the 16
  vectors of 16 channels of each 4×4 tile, zero outside the image: padding read in place) into
  the worker's V scratch ``[ξ][tile][C]`` (all workers' within L2: ``work_split``); then per
  chunk of RB tiles (``chunk_tiles``) and OCT output channels the 16 GEMMs on an MR × NV·V
  register tile into its M scratch ``[ξ][RB][OCT]`` and the output transform with the conv
  epilogue (bias, residual, Relu / Clip / LeakyRelu) storing the 2×2 pixels (the odd last row /
  column dropped).  Deep layers on small images split a block's output channels over the
  workers instead (``work_split``).
* **Output**: NCHWc16 like the input, every lane of the last block written (zero past M, as the
  blocked kernels keep the padding channels), so a Concat's half written in place (a view of the
  Concat's buffer, dsl/opgraph/concat_inplace.py) needs nothing more.
* **Accuracy**: the transforms only add and subtract (and scale the weights by ½ and ¼, exact in
  binary); against a float64 reference the error relative to the largest output was 2-8·10⁻⁷
  on SqueezeNet's and ResNet-50's 3×3 layers (benchmarks/RESULTS.md, slice wino).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from dsl.runtime.cache_lines import line_aligned
from ops.conv_direct import cached_pack, pad_bias
from ops.gemm_packed import activation

THREADS = 4
BLOCK = 16  # channels per NCHWc16 block
XI = 16  # transform points of F(2×2, 3×3): a 4×4 tile
L2_BUDGET = 1 << 20  # bytes of V scratch all workers together may fill (Zen 4's L2; half of this Xeon's)
U_CACHED = 1 << 19  # transformed weights up to this many bytes are read from L2 again cheaply
SMALL_BLOCK = 4  # register tiles of MR tiles a block where U is cached

# geometry vector (``geom``) slots
G_N, G_CB, G_H, G_W, G_PT, G_PL, G_OH, G_OW, G_MB, G_TB, G_KP, G_MP, G_RB, G_PARTS = range(14)
GEOM = 14


@dataclass(frozen=True)
class WinogradConfig:
    """GEMM register tile of one target: MR tiles × NV vectors of V lanes (OCT = NV·V channels)."""

    V: int
    NV: int
    MR: int

    @property
    def OCT(self) -> int:
        return self.V * self.NV


def winograd_config(backend: str = "numba", m: int = 0) -> WinogradConfig:
    """AVX-512: 6 tiles × 64 channels (24 accumulators) when M fills 64-channel groups, else
    8 × 32 (16); AVX2: 6 × 16 (12 of 16 registers), as the direct kernel's tiles."""
    if "avx512f" in dsl.target(backend).features:
        if m and m % 64 == 0:
            return WinogradConfig(V=16, NV=4, MR=6)
        return WinogradConfig(V=16, NV=2, MR=8)
    return WinogradConfig(V=8, NV=2, MR=6)


@dsl.func
def g_coef(a, i):
    """G[a][i] of F(2×2, 3×3): rows (1 0 0), (½ ½ ½), (½ -½ ½), (0 0 1)."""
    v = f32(0)
    if a == 0:
        if i == 0:
            v = f32(1)
    elif a == 3:
        if i == 2:
            v = f32(1)
    else:
        v = f32(0.5)
        if a == 2 and i == 1:
            v = f32(-0.5)
    return v


@dsl.kernel
def pack_winograd_weights(w: In[f32], b: In[f32], u: Out[f32], bp: Out[f32], m: i64, c: i64, kp: i64,
                          OCT: dsl.const[i64]):
    """u[ξ, g, ic, o] = (G w[g·OCT + o, ic] Gᵀ)[ξ] (0 past m and c), bp[o] = b[o] (0 past m)."""
    groups = bp.size // OCT
    lo, hi = dsl.split(u.size)
    for e in range(lo, hi):
        o = e % OCT
        r = e // OCT
        ic = r % kp
        r = r // kp
        g = r % groups
        xi = r // groups
        oc = g * OCT + o
        v = f32(0)
        if oc < m and ic < c:
            a = xi // 4
            bb = xi % 4
            base = (oc * c + ic) * 9
            for i in range(3):
                ga = g_coef(a, i)
                if ga != 0:
                    for j in range(3):
                        v += ga * w.flat[base + i * 3 + j] * g_coef(bb, j)
        u.flat[e] = v
    pad_bias(b, bp, m)


@dsl.kernel(threads=THREADS)
def conv_winograd(x: In[f32], u: In[f32], bias: In[f32], res: In[f32], y: Out[f32], vs: InOut[f32],
                  ms: InOut[f32], geom: dsl.Vec[i64, 14], add_res: i32, act: i32, act_lo: f32, act_hi: f32,
                  V: dsl.const[i64], NV: dsl.const[i64], MR: dsl.const[i64]):
    """y = act(conv3×3(x, w) + bias [+ res]), stride 1, x, y and res NCHWc16; ``u``/``bias`` from
    pack_winograd_weights; ``vs``/``ms`` the threads' V and M scratch (16·TB·KP and 16·RB·OCT
    floats a thread), geom's slots the G_* above."""
    OCT = V * NV
    n_img = geom[G_N]
    cb = geom[G_CB]
    h = geom[G_H]
    w = geom[G_W]
    pt = geom[G_PT]
    pl = geom[G_PL]
    oh = geom[G_OH]
    ow = geom[G_OW]
    mb = geom[G_MB]
    tb = geom[G_TB]
    kp = geom[G_KP]
    mp = geom[G_MP]
    rb = geom[G_RB]
    parts = geom[G_PARTS]  # work items per tile block, each for its share of the oc groups
    th = (oh + 1) // 2
    tw = (ow + 1) // 2
    tiles = th * tw
    tblocks = (tiles + tb - 1) // tb
    groups = mp // OCT
    own = dsl.tile_id() * THREADS + dsl.thread_id()
    vrow = own * XI * tb * kp
    mrow = own * XI * rb * OCT
    lo, hi = dsl.split(n_img * tblocks * parts, grid=True)
    for item in range(lo, hi):
        part = item % parts
        nb = item // (tblocks * parts)
        t0 = ((item // parts) % tblocks) * tb
        g_lo = groups * part // parts
        g_hi = groups * (part + 1) // parts
        nt = min(tb, tiles - t0)
        # input transform: V[ξ][tile][ic] = (Bᵀ d B)[ξ] of the tile's 4×4 pixels, V lanes at a time
        for tl in range(nt):
            t = t0 + tl
            iy0 = (t // tw) * 2 - pt
            ix0 = (t % tw) * 2 - pl
            inside = iy0 >= 0 and ix0 >= 0 and iy0 + 4 <= h and ix0 + 4 <= w
            for cv in range(cb * (BLOCK // V)):
                base = ((nb * cb + cv // (BLOCK // V)) * h * w) * BLOCK + (cv % (BLOCK // V)) * V
                d = dsl.local((16,), dsl.simd(f32, V))  # zero: the padding
                if inside:  # no border test a pixel
                    for i in dsl.static_range(4):
                        for j in dsl.static_range(4):
                            d[i * 4 + j] = x.vload(base + ((iy0 + i) * w + ix0 + j) * BLOCK, V)
                else:
                    for i in dsl.static_range(4):
                        for j in dsl.static_range(4):
                            iy = iy0 + i
                            ix = ix0 + j
                            if iy >= 0 and iy < h and ix >= 0 and ix < w:
                                d[i * 4 + j] = x.vload(base + (iy * w + ix) * BLOCK, V)
                tr = dsl.local((16,), dsl.simd(f32, V))
                for j in dsl.static_range(4):  # Bᵀ d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3
                    tr[j] = d[j] - d[8 + j]
                    tr[4 + j] = d[4 + j] + d[8 + j]
                    tr[8 + j] = d[8 + j] - d[4 + j]
                    tr[12 + j] = d[4 + j] - d[12 + j]
                at = vrow + tl * kp + cv * V
                step = tb * kp  # from one ξ's matrix to the next
                for i in dsl.static_range(4):  # (Bᵀ d) B: the same on the columns
                    vs.vstore(at + (i * 4) * step, tr[i * 4] - tr[i * 4 + 2])
                    vs.vstore(at + (i * 4 + 1) * step, tr[i * 4 + 1] + tr[i * 4 + 2])
                    vs.vstore(at + (i * 4 + 2) * step, tr[i * 4 + 2] - tr[i * 4 + 1])
                    vs.vstore(at + (i * 4 + 3) * step, tr[i * 4 + 1] - tr[i * 4 + 3])
        # per chunk of RB tiles and OCT output channels: the 16 products M[ξ] = V[ξ] · U[ξ] on
        # MR × NV·V register tiles (rows past nt repeat the last tile, their results unused)
        # into the thread's M scratch (16·RB·OCT floats), then the output transform Aᵀ M A
        # (rows m0 + m1 + m2, m1 - m2 - m3) and the epilogue; every lane of y's blocks is
        # written (zero past M: bias and U are zero there).  U[ξ]'s OCT columns (KP·OCT floats)
        # are read once a chunk, M once a product: few input channels want small chunks (M in
        # L1), many want long ones (U from L2 fewer times; ``chunk_tiles``)
        # counted chunks: a range step known only at run time gets an error record
        # (backends/bounds.py), and a launcher with one keeps no warm-start record
        for chunk in range((nt + rb - 1) // rb):
            c0 = chunk * rb
            cn = min(rb, nt - c0)
            for g in range(g_lo, g_hi):
                for xi in range(XI):
                    wo = (xi * groups + g) * kp * OCT
                    for r0 in range(c0, c0 + cn, MR):
                        rows = dsl.local((MR,), i64)
                        for r in dsl.static_range(MR):
                            rows[r] = vrow + (xi * tb + min(r0 + r, nt - 1)) * kp
                        acc = dsl.local((MR, NV), dsl.simd(f32, V))
                        for k in range(kp):
                            wv = dsl.local((NV,), dsl.simd(f32, V))
                            for j in dsl.static_range(NV):
                                wv[j] = u.vload(wo + k * OCT + j * V, V)
                            for r in dsl.static_range(MR):
                                av = dsl.splat(vs.flat[rows[r] + k], V)
                                for j in dsl.static_range(NV):
                                    acc[r, j] = dsl.fma(av, wv[j], acc[r, j])
                        for r in dsl.static_range(MR):
                            for j in dsl.static_range(NV):
                                ms.vstore(mrow + (xi * rb + r0 - c0 + r) * OCT + j * V, acc[r, j])
                for q in range(cn):
                    t = t0 + c0 + q
                    oy0 = (t // tw) * 2
                    ox0 = (t % tw) * 2
                    for jv in range(NV):
                        o0 = g * OCT + jv * V
                        if o0 < mb * BLOCK:
                            at = mrow + q * OCT + jv * V
                            step = rb * OCT  # from one ξ's results to the next
                            s = dsl.local((8,), dsl.simd(f32, V))
                            for j in dsl.static_range(4):  # Aᵀ M: two rows of four
                                m0 = ms.vload(at + j * step, V)
                                m1 = ms.vload(at + (4 + j) * step, V)
                                m2 = ms.vload(at + (8 + j) * step, V)
                                m3 = ms.vload(at + (12 + j) * step, V)
                                s[j] = m0 + m1 + m2
                                s[4 + j] = m1 - m2 - m3
                            bv = bias.vload(o0, V)
                            ybase = ((nb * mb + o0 // BLOCK) * oh) * ow * BLOCK + o0 % BLOCK
                            for i in dsl.static_range(2):
                                for j in dsl.static_range(2):
                                    if oy0 + i < oh and ox0 + j < ow:
                                        vec = bv
                                        if j == 0:
                                            vec = vec + s[i * 4] + s[i * 4 + 1] + s[i * 4 + 2]
                                        else:
                                            vec = vec + s[i * 4 + 1] - s[i * 4 + 2] - s[i * 4 + 3]
                                        ya = ybase + ((oy0 + i) * ow + ox0 + j) * BLOCK
                                        if add_res == 1:
                                            vec = vec + res.vload(ya, V)
                                        y.vstore(ya, activation(vec, act, act_lo, act_hi))


# --------------------------------------------------------------------------- weights and launch


def winograd_supported(x, w, group: int, k, strides, dil) -> bool:
    """Shapes the Winograd kernel takes: f32 2-D images, one group, a 3×3 kernel at stride 1,
    dilation 1 (any padding; the image NCHWc16 when it runs)."""
    return (x.dtype == dsl.f32 and group == 1 and x.ndim == 4 and w.ndim == 4 and tuple(k) == (3, 3)
            and tuple(strides) == (1, 1) and tuple(dil) == (1, 1))


MIN_CHANNELS = 32  # fewer input channels: products 16 long, the transforms dominate


def winograd_chosen(x, w, group: int, k, strides, dil, out_hw) -> bool:
    """Whether Conv.select takes this kernel over the direct one (on NCHWc16 input, numba): the
    supported shapes with at least ``MIN_CHANNELS`` input channels and at least as many 2×2
    output tiles as output channels.  In a model (one core, this Xeon; benchmarks/RESULTS.md,
    slice wino) those ran at 0.67-0.73 of the direct kernel's time (ResNet-50's 64 @56 and
    128 @28) and 0.93-0.96 (SqueezeNet's 32->128 @27); the others lost: 16 input channels
    (SqueezeNet's 16->64 @55, 1.05-1.07) and deep layers on small images, whose transformed
    weights (16/9 of the direct kernel's bytes, cold in a model) outweigh the image (13×13
    expands 1.25, ResNet-50's 256 @14 1.07-1.21, 512 @7 1.4)."""
    c, m = x.shape[1], w.shape[0]
    if not winograd_supported(x, w, group, k, strides, dil) or c is None or m is None or c < MIN_CHANNELS:
        return False
    if any(s is None for s in out_hw):
        return False
    return -(-out_hw[0] // 2) * -(-out_hw[1] // 2) >= m


def packed_winograd_weights(w: np.ndarray, b, cfg: WinogradConfig, kp: int, backend: str):
    """(U, bias) in conv_winograd's order, once per constant weight array, config and ``kp``
    (input channels padded to whole blocks)."""
    def pack():
        m, c = w.shape[0], w.shape[1]
        groups = -(-(-(-m // BLOCK) * BLOCK) // cfg.OCT)
        u = line_aligned(XI * groups * kp * cfg.OCT)
        bp = line_aligned(groups * cfg.OCT)
        bias = np.zeros(m, np.float32) if b is None else b.reshape(-1)
        pack_winograd_weights(np.ascontiguousarray(w).reshape(-1), bias, u, bp, m, c, kp, OCT=cfg.OCT,
                              backend=backend)
        return u, bp
    return cached_pack(w, b, ("winograd", cfg, kp), pack)


def work_split(tiles: int, kp: int, mp: int, mr: int, oct_: int, workers: int) -> tuple:
    """(TB, parts): the tiles of a work item's block and the work items per block, each for
    its share of the output channels, for ``workers`` workers of which each OS thread runs a
    contiguous run (so the items come in multiples of ``workers`` where they can).

    Where U (16·KP·MP floats) outweighs the image's V (deep layers on small images: ResNet-50's
    256 @14, 512 @7) the workers split the output channels of one block (each reads its share
    of U once) rather than the tiles (each would read all of U); elsewhere the tiles.  Where U
    fits in L2 (``U_CACHED``) it is read again cheaply and blocks are short (``SMALL_BLOCK``
    register tiles): a worker's V scratch then stays in cache from one block to the next
    instead of being written cold; else blocks as large as keep V within ``L2_BUDGET``."""
    groups = mp // oct_
    if mp > tiles and L2_BUDGET // (XI * 4 * kp) >= tiles and groups > 1:
        return tiles, min(groups, workers)
    fit = max(mr, L2_BUDGET // workers // (XI * 4 * kp) // mr * mr)  # all workers' V: one thread may run them all
    if XI * 4 * kp * mp <= U_CACHED:
        fit = min(fit, SMALL_BLOCK * mr)
    blocks = -(-(-(-tiles // fit)) // workers) * workers
    return max(mr, -(-(-(-tiles // blocks)) // mr) * mr), 1


def chunk_tiles(kp: int, mr: int) -> int:
    """Tiles whose 16 products are made before their output transform: 2·MR for up to 64 input
    channels (their M, 16·2·MR·OCT floats, stays in L1 and is a large share of the traffic
    when a product is only KP long), else the whole block (U's columns from L2 once a block).
    One thread, this Xeon (benchmarks/RESULTS.md, slice wino): 256->256 @14 1.05 ms with the
    whole block of 30 tiles against 1.77 ms with chunks of 6; 16->64 @55 0.39 ms with chunks of
    6 or 12 against 0.45 ms with the block."""
    return 2 * mr if kp <= 64 else 1 << 20


def launch_conv_winograd(impl, x, w, bias, y, res, begin, backend, act: int, lo: float, hi: float,
                         cfg: WinogradConfig = None, tb: int = None, rb: int = None,
                         parts: int = None) -> None:
    """Run ``impl`` (conv_winograd, or a model's recorder of it) on NCHWc16 x (N, CB, H, W, 16),
    y and res (N, MB, OH, OW, 16), weights (M, C, 3, 3) plain; ``begin`` the top and left
    padding.  ``tb``/``rb``/``parts`` override the tiles a work item takes, the tiles of one M
    chunk and the work items a block's output channels are split into (tests reach several
    blocks, chunks and parts; benchmarks compare them)."""
    cfg = cfg or winograd_config(backend or "numba", w.shape[0])
    for name, a in (("x", x), ("w", w), ("y", y), ("B", bias), ("Z", res)):
        if a is not None and a.dtype != np.float32:
            raise ValueError(f"conv_winograd computes f32; {name} is {a.dtype}")
    if x.ndim != 5 or y.ndim != 5 or w.shape[2:] != (3, 3):
        raise ValueError(f"conv_winograd takes NCHWc16 images and 3×3 weights; got x {x.shape}, w {w.shape}, "
                         f"y {y.shape}")
    m, c = w.shape[0], w.shape[1]
    n, cb, h, wd = x.shape[:4]
    if c > cb * BLOCK or y.shape[1] * BLOCK < m:
        raise ValueError(f"conv_winograd: weights {tuple(w.shape)} need at most {cb * BLOCK} input channels "
                         f"(x {x.shape}) and y blocks for {m} output channels (y {y.shape})")
    oh, ow = y.shape[2], y.shape[3]
    kp = cb * BLOCK
    u, bp = packed_winograd_weights(w, bias, cfg, kp, backend)
    mp = bp.size
    tiles = -(-oh // 2) * -(-ow // 2)
    grid = max(1, -(-dsl.target(backend or "numba").compute_units // THREADS))  # teams: a core's share of workers
    workers = grid * THREADS
    tb_auto, parts_auto = work_split(tiles, kp, mp, cfg.MR, cfg.OCT, workers)
    tb = tb or tb_auto
    parts = min(parts or parts_auto, mp // cfg.OCT)
    rb = -(-min(rb or chunk_tiles(kp, cfg.MR), tb) // cfg.MR) * cfg.MR  # whole register tiles
    geom = np.zeros(GEOM, np.int64)
    geom[:] = (n, cb, h, wd, begin[0], begin[1], oh, ow, y.shape[1], tb, kp, mp, rb, parts)
    vs = line_aligned(workers * XI * tb * kp)
    ms = line_aligned(workers * XI * rb * cfg.OCT)
    flat_res = np.zeros(1, np.float32) if res is None else res.reshape(-1)
    impl(x.reshape(-1), u, bp, flat_res, y.reshape(-1), vs, ms, geom, add_res=int(res is not None), act=act,
         act_lo=float(lo), act_hi=float(hi), V=cfg.V, NV=cfg.NV, MR=cfg.MR, backend=backend, grid=grid)
