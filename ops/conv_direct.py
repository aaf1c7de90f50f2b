"""Direct f32 convolution with a SIMD register tile (oneDNN's / PPL.NN's NCHWc16 loop order).

Why not im2col + GEMM: a 3×3 or 7×7 convolution's im2col panel is gathered element by element
and, on the small deep layers (7×7 and 14×14 images), most of a 32-column GEMM tile is wasted on
ragged panels.  Here a work item is a register tile of ``P`` output pixels × ``NV`` vectors of
``V`` output channels (``dsl.local((P, NV), dsl.simd(f32, V))``); the loops over input-channel
blocks, kh and kw run outside, and per input channel the kernel loads ``NV`` weight vectors and
broadcasts one input value per pixel: P·NV fused multiply-adds for NV + P loads.

* **Loop order**: a full 16-channel block of a blocked image read at dilation 1 runs the kw
  taps of a kernel row as one loop of kw·16 input channels (contiguous in x and in the weights).
  A full block at unit channel stride steps U channels at a time (``DirectConfig.U``, unrolled:
  constant displacements for the U weight rows and input channels, the walk's counters once per
  step); other blocks (partial ones, plain unpadded images) step one channel.
* **Weights** are reordered once into ``[oc group][ic block][kh][kw][16 ic][OCT oc]``
  (``pack_conv_weights``, OCT = NV·V, zero-padded), so the NV weight vectors of one input
  channel are contiguous.  Constant weights (read-only arrays: graph constants, BN-folded ones)
  are packed the first time a node runs and kept as long as the constant lives
  (``packed_weights``); writable ones are packed at every call.
* **Layouts**: the image is read through strides, so the input may be plain NCHW or NCHWc16;
  the output is written in the input's format (vector stores for NCHWc16, lane stores for
  plain), and so is the residual ``res``.
* **Padding**: an NCHWc16 image (the models' layers) is read in place: ``pixel_tables`` splits
  the output into regions of equal valid taps (3×3, padding 1: the interior, four edges, four
  corners) and tiles each region's pixels, so a tile's walk over the taps starts at its first
  valid tap and skips the rest of a kernel row, and the tile loop has no border tests at all
  (a copy into a zero-bordered buffer cost 2-11 % of a ResNet-50 layer).  A padded plain image
  is still copied (``PHASE_PAD``) into a zero-bordered NCHWc16 buffer (so the 16 channels of
  the innermost loop share a cache line per pixel; plain below 16 channels), one region.  A
  region's last partial tile repeats its last pixel and does not store the copies, and a tile
  of one pixel (7×7 images: 49 = 8·6 + 1; corners) sums it alone instead of a whole tile's
  P·NV vectors.
* **Weight reuse**: a work item is a group of up to TG tiles of one oc group (groups of even
  size: 9 tiles at TG = 8 are 5 + 4, not 8 + 1); per input-channel
  block (kh·kw·16·OCT weights, 18 KB for 3×3) every tile of the group runs, its partial sums
  waiting in scratch, so the deep layers' weights are streamed from L2 once per TG tiles.
* **Prefetch**: in a model every layer's weights arrive cold (from L3 or memory), and the first
  tile of each input-channel block waited on its 36 KB (3×3, 64 channels); so the unrolled walk
  prefetches two lines a step of the next block (after a group's last block, the worker's next
  item's group), each tile of the group its share (``pf``, from PREFETCH_MIN_BYTES of packed
  weights on: ResNet-50's 64-channel layers, 147 KB, gained nothing in the model).
* **Epilogue**: bias, the residual and Relu / Clip / LeakyRelu are applied to the tile before
  its one store (what ops/conv_fusion.py's FusedConv asks for); whole NCHWc16 tiles under Relu
  are stored from the registers after the last input block, the others go
  through the scratch and one run-time epilogue loop (for a plain y one run per output
  channel over the whole group's pixels, consecutive in y).
"""
from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np

import dsl
from dsl import In, InOut, Out, f32, i32, i64
from dsl.runtime.cache_lines import line_aligned
from ops.gemm_packed import ACT_RELU, activation

THREADS = 4
BLOCK = 16  # input channels per weight block, channels per NCHWc16 block
PHASE_PAD = 0   # copy the image into the zero-bordered buffer
PHASE_CONV = 1  # the convolution proper

# geometry vector (``geom``) slots
G_N, G_C, G_M, G_KH, G_KW, G_SH, G_SW, G_DH, G_DW, G_OH, G_OW = range(11)
G_SXN, G_SXB, G_SXC, G_SXH, G_SXW = range(11, 16)   # strides of the image the tiles read
G_H, G_W, G_PT, G_PL, G_HP, G_WP, G_LANES = range(16, 23)  # the padding copy (LANES: 1 plain, 16 blocked)
G_TRANSPOSE = 23  # 1: the padding copy turns a plain image into NCHWc16
GEOM = 24


@dsl.func
def store_last_block(y, stage, stage_at, at, vec, valid, lanes):
    """``vec`` into ``y.flat[at:at + lanes]`` where only its first ``valid`` lanes are output
    channels: the rest of the last, partly filled NCHWc16 block must stay zero (its padding), so a
    vector that reaches past ``valid`` goes lane by lane through ``stage`` (the thread's scratch)."""
    if valid >= lanes:
        y.vstore(at, vec)
    else:
        stage.vstore(stage_at, vec)
        for k in range(lanes):
            v = f32(0)
            if k < valid:
                v = stage.flat[stage_at + k]
            y.flat[at + k] = v


@dataclass(frozen=True)
class DirectConfig:
    """Register tile of one target: P pixels × NV vectors of V lanes (OCT = NV·V channels)."""

    V: int
    NV: int
    P: int
    TG: int = 8  # tiles sharing one pass over the weights
    U: int = 1  # input channels a step of the tile loop over a full block at unit channel stride (1: no unrolled walk)

    def __post_init__(self):
        if self.V not in (2, 4, 8, 16):
            raise ValueError(f"DirectConfig V={self.V}: lanes must be 2, 4, 8 or 16 (a divisor of the "
                             f"NCHWc16 block)")
        if self.U not in (1, 2, 4, 8):
            raise ValueError(f"DirectConfig U={self.U}: the unrolled walk takes 1, 2, 4 or 8 channels a step "
                             f"(a divisor of the 16-channel block)")
        if self.NV < 1 or self.P < 1 or self.TG < 1:
            raise ValueError(f"DirectConfig NV={self.NV}, P={self.P}, TG={self.TG}: the tile needs at least "
                             f"one vector, one pixel and one tile per group")

    @property
    def OCT(self) -> int:
        return self.V * self.NV


def direct_config(backend: str = "numba", m: int = 0) -> DirectConfig:
    """AVX-512: 6 pixels × 64 channels (24 accumulators, 4 weight vectors, one broadcast: 30 of
    32 registers, 24 FMAs per 10 loads) when the ``m`` output channels fill 64-channel groups,
    else 7 pixels × 32 channels (14 accumulators: a 14-pixel tile left too few registers for the
    pixel offsets, ResNet's widths 112, 56, 28, 14, 7 are multiples of 7).  On Intel (two 512-bit
    FMA ports) the 6×64 tile ran squeezenet's 3×3 expands and ResNet-50's 3×3 layers as fast
    as 7×32 or up to ~15 % faster on one thread (benchmarks/RESULTS.md, ninth session); groups of up
    to 12 tiles share a pass over the weights (a 7×7 image's 9 tiles one pass, not 8 + 1; 14×14's
    33 three, not five: 3-8 % less time on ResNet-50's deep 3×3 layers, eighteenth session).
    Full blocks are walked 4 channels a step with AVX-512 (serial kernel, ResNet-50's 3×3
    layers: 0.95-0.99 of the one-channel loop's time, +0.3-0.5 s compile; 8 a step was no faster
    and compiles longer; benchmarks/RESULTS.md, twentieth session, slice pw2).
    AVX2: 12 of 16 registers (6 pixels × 16 channels), groups of up to 8 tiles, one channel a step."""
    if "avx512f" in dsl.target(backend).features:
        if m and m % 64 == 0:
            return DirectConfig(V=16, NV=4, P=6, TG=12, U=4)
        return DirectConfig(V=16, NV=2, P=7, U=4)
    return DirectConfig(V=8, NV=2, P=6)


@dsl.func
def pad_bias(b, bp, m):
    """bp = b, zero past its ``m`` channels: the packed bias every conv packing kernel writes
    (bp's length is its output channels rounded up to whole register-tile groups)."""
    lo, hi = dsl.split(bp.size)
    for i in range(lo, hi):
        v = f32(0)
        if i < m:
            v = b.flat[i]
        bp.flat[i] = v


@dsl.kernel
def pack_conv_weights(w: In[f32], b: In[f32], wp: Out[f32], bp: Out[f32], m: i64, c: i64, khw: i64,
                      OCT: dsl.const[i64]):
    """wp[g, icb, k, ci, o] = w[g·OCT + o, icb·16 + ci, k] (0 outside), bp[o] = b[o] (0 past m):
    the direct kernel's weight order, made once per constant."""
    cb = (c + BLOCK - 1) // BLOCK
    lo, hi = dsl.split(wp.size)
    for i in range(lo, hi):
        o = i % OCT
        r = i // OCT
        ci = r % BLOCK
        r = r // BLOCK
        k = r % khw
        r = r // khw
        icb = r % cb
        oc = (r // cb) * OCT + o
        ic = icb * BLOCK + ci
        v = f32(0)
        if oc < m and ic < c:
            v = w.flat[(oc * c + ic) * khw + k]
        wp.flat[i] = v
    pad_bias(b, bp, m)


@dsl.kernel(threads=THREADS)
def conv_direct(x: In[f32], w: In[f32], bias: In[f32], res: In[f32], y: Out[f32], xp: InOut[f32],
                pix: In[i64], tinfo: In[i64], geom: dsl.Vec[i64, 24], phase: i32, blocked_out: i32, add_res: i32, act: i32,
                act_lo: f32, act_hi: f32, pf: i64, V: dsl.const[i64], NV: dsl.const[i64], P: dsl.const[i64],
                TG: dsl.const[i64], U: dsl.const[i64]):
    """PHASE_PAD: xp = x with a zero border (geom's H, W, PT, PL, HP, WP, LANES).  PHASE_CONV:
    y = act(conv(x, w) + bias [+ res]) with x read through geom's strides, ``w``/``bias`` from
    pack_conv_weights, y (and res) NCHWc16 when ``blocked_out`` else plain; the tiles' pixels
    and taps from ``pixel_tables`` (``pix``: x offset of the first valid tap and y pixel per
    tile slot, ``tinfo``: first tap, kernel rows, taps a row and real pixels per tile)."""
    if phase == PHASE_PAD:
        lanes = geom[G_LANES]
        wrow = geom[G_WP] * lanes
        planes = xp.size // (geom[G_HP] * wrow)  # N · (C or C/16)
        lo, hi = dsl.split(planes * geom[G_HP], grid=True)
        for row in range(lo, hi):
            hp = row % geom[G_HP]
            plane = row // geom[G_HP]
            ih = hp - geom[G_PT]
            dst = row * wrow
            if ih < 0 or ih >= geom[G_H]:
                for e in range(wrow):
                    xp.flat[dst + e] = f32(0)
            else:
                left = geom[G_PL] * lanes
                inner = geom[G_W] * lanes
                src = (plane * geom[G_H] + ih) * inner
                for e in range(left):
                    xp.flat[dst + e] = f32(0)
                if geom[G_TRANSPOSE] == 1:  # plain x -> NCHWc16 xp: each element written once,
                    # the 16 channels of a pixel read from 16 input rows (zero past C)
                    cb_n = (geom[G_C] + BLOCK - 1) // BLOCK
                    c0 = (plane % cb_n) * BLOCK
                    cnt = min(BLOCK, geom[G_C] - c0)
                    hw = geom[G_H] * geom[G_W]
                    src = (((plane // cb_n) * geom[G_C] + c0) * geom[G_H] + ih) * geom[G_W]
                    for iw in range(geom[G_W]):
                        at = dst + left + iw * BLOCK
                        for cj in range(BLOCK):  # a constant trip count: LLVM unrolls it, numba types one copy
                            v = f32(0)
                            if cj < cnt:
                                v = x.flat[src + cj * hw + iw]
                            xp.flat[at + cj] = v
                else:
                    for e in range(inner):
                        xp.flat[dst + left + e] = x.flat[src + e]
                for e in range(left + inner, wrow):
                    xp.flat[dst + e] = f32(0)
        return
    OCT = V * NV
    n_img = geom[G_N]
    c_in = geom[G_C]
    m_out = geom[G_M]
    kh_n = geom[G_KH]
    kw_n = geom[G_KW]
    ow_n = geom[G_OW]
    ohw = geom[G_OH] * ow_n
    sxn = geom[G_SXN]
    sxb = geom[G_SXB]
    sxc = geom[G_SXC]
    sxh = geom[G_SXH]
    sxw = geom[G_SXW]
    tap_h = geom[G_DH] * sxh
    tap_w = geom[G_DW] * sxw
    cb = (c_in + BLOCK - 1) // BLOCK
    mb = (m_out + BLOCK - 1) // BLOCK  # NCHWc16 blocks of y
    ocg_n = (m_out + OCT - 1) // OCT
    if blocked_out == 1:  # every lane of the last block is written, zero past m_out
        ocg_n = (mb * BLOCK + OCT - 1) // OCT
    tiles = tinfo.size // 4
    wblock = kh_n * kw_n * BLOCK * OCT  # packed weights of one input-channel block of an oc group
    wgroup = cb * wblock  # packed weights of one oc group
    tgroups = (tiles + TG - 1) // TG
    tg_size = (tiles + tgroups - 1) // max(1, tgroups)  # groups of even size, at most TG tiles (9 = 5 + 4, not 8 + 1)
    tile = dsl.scratch((THREADS, TG * P * NV * V), f32)  # the group's partial sums, then its results
    row = dsl.thread_id() * TG * P * OCT
    lo, hi = dsl.split(ocg_n * n_img * tgroups, grid=True)  # oc group outermost: its weights stay in cache
    for item in range(lo, hi):
        tg = item % tgroups
        r = item // tgroups
        nb = r % n_img
        g = r // n_img
        t_lo = tg * tg_size
        t_hi = min(tiles, t_lo + tg_size)
        # NCHWc16 y under Relu (one unrolled copy: a second, for no activation, cost ~3 s more
        # compile CPU per specialization), every vector of the group all real channels or
        # past the last block: whole tiles are stored from the registers after the last block
        reg_store = blocked_out == 1 and act == ACT_RELU and (
            g * OCT + OCT <= m_out or (m_out == mb * BLOCK and (m_out - g * OCT) % V == 0))
        # per input-channel block, every tile of the group: the block's weights (kh·kw·16·OCT)
        # are read from L1 by all of them; the tiles' sums wait in ``tile`` between blocks
        for icb in range(cb):
            cn = min(BLOCK, c_in - icb * BLOCK)
            for t in range(t_lo, t_hi):
                q0 = t * P
                at_t = row + (t - t_lo) * P * OCT
                # the tile's taps: kernel rows nkh from tap k0 on, nkw taps a row (fewer at the
                # image's border when the kernel reads an unpadded NCHWc16 image)
                k0 = tinfo[t * 4]
                nkh = tinfo[t * 4 + 1]
                nkw = tinfo[t * 4 + 2]
                # a full block of a blocked image read at dilation 1: the kw taps' 16 channels follow
                # each other in x as in the packed weights, so one run covers the whole kernel row
                kw_run = 1
                if cn == BLOCK and tap_w == BLOCK * sxc and nkw > 0:
                    kw_run = nkw
                run = cn * kw_run  # consecutive channels in x and in the weights
                kw_steps = nkw  # nkw // kw_run without a division a tile
                if kw_run > 1:
                    kw_steps = 1
                w_skip = (BLOCK * kw_run - run) * OCT  # a partial block's missing channels
                row_skip = (kw_n - nkw) * BLOCK * OCT  # the taps of a kernel row past the border
                x_skip = tap_w - run * sxc  # from the end of one kw tap's channels to the next tap
                if tinfo[t * 4 + 3] == 1 and P > 1:
                    # a tile of one pixel (7×7 and 13×13 images: 49 = 8·6 + 1, a corner) sums that
                    # pixel alone: NV vectors a step instead of the P·NV of a tile that repeats it
                    xo = nb * sxn + pix[q0 * 2] + icb * sxb
                    one = dsl.local((NV,), dsl.simd(f32, V))
                    two = dsl.local((NV,), dsl.simd(f32, V))  # odd steps: two FMA chains a vector
                    if icb > 0:
                        for j in dsl.static_range(NV):
                            one[j] = tile.vload(at_t + j * V, V)
                    wo = g * wgroup + (icb * kh_n * kw_n + k0) * BLOCK * OCT
                    xrow = xo
                    left = run
                    kleft = kw_steps
                    for r in range(nkh * kw_steps * run):  # the tile loop's walk over the taps, below
                        xv = dsl.splat(x.flat[xo], V)
                        for j in dsl.static_range(NV):
                            s = dsl.fma(xv, w.vload(wo + j * V, V), two[j])
                            two[j] = one[j]
                            one[j] = s
                        wo += OCT
                        xo += sxc
                        left -= 1
                        if left == 0:
                            left = run
                            wo += w_skip
                            kleft -= 1
                            if kleft == 0:
                                kleft = kw_steps
                                wo += row_skip
                                xrow += tap_h
                                xo = xrow
                            else:
                                xo += x_skip
                    for j in dsl.static_range(NV):
                        tile.vstore(at_t + j * V, one[j] + two[j])
                else:
                    # each pixel's first valid tap in x (slots past a region's pixels repeat its last)
                    off = dsl.local((P,), i64)
                    for p in dsl.static_range(P):
                        off[p] = nb * sxn + pix[(q0 + p) * 2]
                    acc = dsl.local((P, NV), dsl.simd(f32, V))
                    if icb > 0:
                        for p in dsl.static_range(P):
                            for j in dsl.static_range(NV):
                                acc[p, j] = tile.vload(at_t + p * OCT + j * V, V)
                    # every (kh, kw, ci) of the block in one loop: the weights run on by OCT, x by sxc,
                    # and at the end of each run of consecutive channels both skip to the next tap (a
                    # counter, no division); a loop per kh and kw cost ~10 % of the FMAs' time
                    wo = g * wgroup + (icb * kh_n * kw_n + k0) * BLOCK * OCT
                    xo = icb * sxb
                    xrow = xo
                    left = run
                    kleft = kw_steps
                    steps = nkh * kw_steps * run
                    if U > 1 and cn == BLOCK and sxc == 1:
                        steps = 0  # the unrolled walk below takes the whole block
                        # the weights of the next input block (or the next item's group) are on
                        # their way while this block runs: two lines a step, when ``pf`` (a
                        # stride of 0 prefetches one line of this tile's own weights again)
                        pf_at = wo
                        if pf > 0:  # each tile its share of the next block's lines
                            pf_at = (t - t_lo) * ((wblock // BLOCK + (t_hi - t_lo) - 1) // (t_hi - t_lo)) * BLOCK
                            if icb < cb - 1:
                                pf_at += g * wgroup + (icb + 1) * wblock
                            else:  # the oc group of this worker's next item
                                pf_at += (((item + 1) // tgroups) // n_img) * wgroup
                        for r in range(nkh * kw_steps * (run // U)):
                            dsl.prefetch(w, pf_at)
                            dsl.prefetch(w, pf_at + BLOCK)
                            pf_at += pf
                            for u in dsl.static_range(U):
                                uv = dsl.local((NV,), dsl.simd(f32, V))
                                for j in dsl.static_range(NV):
                                    uv[j] = w.vload(wo + u * OCT + j * V, V)
                                for p in dsl.static_range(P):
                                    ux = dsl.splat(x.flat[xo + off[p] + u], V)
                                    for j in dsl.static_range(NV):
                                        acc[p, j] = dsl.fma(ux, uv[j], acc[p, j])
                            wo += U * OCT
                            xo += U
                            left -= U
                            if left == 0:
                                left = run
                                wo += w_skip
                                kleft -= 1
                                if kleft == 0:
                                    kleft = kw_steps
                                    wo += row_skip
                                    xrow += tap_h
                                    xo = xrow
                                else:
                                    xo += x_skip
                    for r in range(steps):
                        wv = dsl.local((NV,), dsl.simd(f32, V))
                        for j in dsl.static_range(NV):
                            wv[j] = w.vload(wo + j * V, V)
                        for p in dsl.static_range(P):
                            xv = dsl.splat(x.flat[xo + off[p]], V)
                            for j in dsl.static_range(NV):
                                acc[p, j] = dsl.fma(xv, wv[j], acc[p, j])
                        wo += OCT
                        xo += sxc
                        left -= 1
                        if left == 0:
                            left = run
                            wo += w_skip
                            kleft -= 1
                            if kleft == 0:
                                kleft = kw_steps
                                wo += row_skip
                                xrow += tap_h
                                xo = xrow
                            else:
                                xo += x_skip
                    if reg_store and icb == cb - 1 and tinfo[t * 4 + 3] == P:
                        # bias, residual and Relu on the registers, one store per vector (no scratch
                        # round trip through the run-time epilogue below)
                        for j in dsl.static_range(NV):
                            if g * OCT + j * V < m_out:
                                rfo = g * OCT + j * V
                                rbv = bias.vload(rfo, V)
                                rya = (nb * mb + rfo // BLOCK) * ohw * BLOCK + rfo % BLOCK
                                for p in dsl.static_range(P):
                                    rv = acc[p, j] + rbv
                                    ryp = rya + pix[(q0 + p) * 2 + 1] * BLOCK
                                    if add_res == 1:
                                        rv = rv + res.vload(ryp, V)
                                    y.vstore(ryp, dsl.where(rv <= 0, 0.0, rv))
                    else:
                        for p in dsl.static_range(P):
                            for j in dsl.static_range(NV):
                                tile.vstore(at_t + p * OCT + j * V, acc[p, j])
        # the epilogue reads the results back at run time (one compiled copy, not P × NV × V
        # unrolled ones)
        if blocked_out == 1:
            for t in range(t_lo, t_hi):
                q0 = t * P
                at_t = row + (t - t_lo) * P * OCT
                npix = tinfo[t * 4 + 3]
                if reg_store and npix == P:
                    npix = 0  # stored from the registers
                for px in range(npix):
                    q = pix[(q0 + px) * 2 + 1]
                    for jv in range(NV):
                        o0 = g * OCT + jv * V  # first output channel of this vector
                        if o0 < mb * BLOCK:
                            vec = tile.vload(at_t + px * OCT + jv * V, V) + bias.vload(o0, V)
                            at = ((nb * mb + o0 // BLOCK) * ohw + q) * BLOCK + o0 % BLOCK
                            if add_res == 1:
                                vec = vec + res.vload(at, V)
                            vec = activation(vec, act, act_lo, act_hi)
                            if o0 + V <= m_out:  # inline: a call per vector cost as much as the
                                y.vstore(at, vec)  # FMAs of a 16-channel tile
                            else:
                                store_last_block(y, tile, at_t + px * OCT + jv * V, at, vec, m_out - o0, V)
        else:  # plain y (one region, pixels in y's order): per output channel, the group's pixels are consecutive in y and OCT apart
            # in the scratch, so one run per channel covers every tile of the group (a run per
            # tile and channel, P pixels long, cost a third of a 64-channel 56×56 layer's time)
            q_lo = t_lo * P
            npix = min(t_hi * P, ohw) - q_lo
            # bias (padded to whole groups) and, without a residual, the activation go on
            # whole vectors in the scratch first: a scalar activation per element cost more
            # than the FMAs of a 64-channel layer on AVX2 (RESULTS.md, issue 29 f32 slice)
            for px in range(npix):
                for jv in range(NV):
                    if g * OCT + jv * V < m_out:
                        vec = tile.vload(row + px * OCT + jv * V, V) + bias.vload(g * OCT + jv * V, V)
                        if add_res == 0:
                            vec = activation(vec, act, act_lo, act_hi)
                        tile.vstore(row + px * OCT + jv * V, vec)
            for o in range(min(OCT, m_out - g * OCT)):
                at = (nb * m_out + g * OCT + o) * ohw + q_lo
                if add_res == 1:
                    for px in range(npix):
                        v = tile.flat[row + px * OCT + o] + res.flat[at + px]
                        y.flat[at + px] = activation(v, act, act_lo, act_hi)
                else:
                    for px in range(npix):
                        y.flat[at + px] = tile.flat[row + px * OCT + o]


# --------------------------------------------------------------------------- weights


_PACKED: dict = {}  # (id(constant weights), key) -> (weakref to them, weakref to the bias, packed arrays)


def cached_pack(w: np.ndarray, b, key, pack):
    """``pack()`` (packed weights and bias), kept per read-only weight array and ``key`` while
    the array lives (graph constants, BN-folded ones); writable weights are packed every call."""
    keep = not w.flags.writeable and (b is None or not b.flags.writeable)
    slot = (id(w), key)
    if keep and slot in _PACKED:
        ref, bref, packed = _PACKED[slot]
        if ref() is w and (bref() if bref is not None else None) is b:
            return packed
    packed = pack()
    for a in packed:
        a.setflags(write=False)
    if keep:
        try:
            _PACKED[slot] = (weakref.ref(w, lambda _, k=slot: _PACKED.pop(k, None)),
                             None if b is None else weakref.ref(b), packed)
        except TypeError:  # not weak-referenceable: pack every call
            pass
    return packed


def packed_weights(w: np.ndarray, b: np.ndarray, cfg: DirectConfig, backend: str):
    """(weights, bias) in the direct kernel's order, once per constant weight array and config."""
    def pack():
        m, c = w.shape[0], w.shape[1]
        khw = int(np.prod(w.shape[2:]))
        groups = oc_groups(m, cfg.OCT)
        wp = line_aligned(groups * -(-c // BLOCK) * khw * BLOCK * cfg.OCT)
        bp = line_aligned(groups * cfg.OCT)
        bias = np.zeros(m, np.float32) if b is None else b.reshape(-1)
        pack_conv_weights(w.reshape(-1), bias, wp, bp, m, c, khw, OCT=cfg.OCT, backend=backend)
        return wp, bp
    return cached_pack(w, b, cfg, pack)


# --------------------------------------------------------------------------- pixel tiles


def tap_segments(out: int, size: int, k: int, stride: int, dil: int, begin: int):
    """Runs of output positions along one axis with the same valid taps: [(o0, o1, k0, k1)], taps
    k0..k1-1 reading inside ``size`` input positions (all ``k`` taps when nothing is padded)."""
    segs = []
    for o in range(out):
        start = o * stride - begin
        k0 = min(k, max(0, -(-(-start) // dil)))
        k1 = max(k0, min(k, (size - 1 - start) // dil + 1 if size - 1 >= start else 0))
        if segs and segs[-1][2:] == (k0, k1):
            segs[-1] = (segs[-1][0], o + 1, k0, k1)
        else:
            segs.append((o, o + 1, k0, k1))
    return segs


@functools.lru_cache(maxsize=256)
def pixel_tables(oh: int, ow: int, h: int, w: int, kh: int, kw: int, strides, dil, begin, P: int,
                 sxh: int, sxw: int):
    """(pix, tinfo) for conv_direct: the output pixels in regions of equal valid taps (one region
    for an image padded beforehand; nine for a 3×3 padding 1 read in place: the interior, four
    edges, four corners), each region's pixels row by row in tiles of ``P`` (a partial last tile
    repeats its last pixel).  pix: per tile slot, x offset of its first valid tap and y pixel;
    tinfo: per tile, first tap (kh·kw index), kernel rows, taps a row, real pixels.  Tiles that
    never cross a border need no border test in the FMA loop."""
    pix, tinfo = [], []
    for h0, h1, a0, a1 in tap_segments(oh, h, kh, strides[0], dil[0], begin[0]):
        for w0, w1, b0, b1 in tap_segments(ow, w, kw, strides[1], dil[1], begin[1]):
            qh, qw = np.meshgrid(np.arange(h0, h1), np.arange(w0, w1), indexing="ij")
            qh, qw = qh.reshape(-1), qw.reshape(-1)
            xo = (qh * strides[0] - begin[0] + a0 * dil[0]) * sxh + (qw * strides[1] - begin[1] + b0 * dil[1]) * sxw
            if a1 == a0 or b1 == b0:
                xo[:] = 0  # no tap inside the image: bias only, nothing read
            n = qh.size
            tiles = -(-n // P)
            fill = np.minimum(np.arange(tiles * P), n - 1)
            pix.append(np.stack([xo[fill], (qh * ow + qw)[fill]], 1).reshape(-1))
            real = np.minimum(P, n - np.arange(tiles) * P)
            tinfo.append(np.stack([np.full(tiles, a0 * kw + b0), np.full(tiles, a1 - a0), np.full(tiles, b1 - b0),
                                   real], 1).reshape(-1))
    pix = np.concatenate(pix).astype(np.int64)
    tinfo = np.concatenate(tinfo).astype(np.int64)
    pix.setflags(write=False)
    tinfo.setflags(write=False)
    return pix, tinfo


# --------------------------------------------------------------------------- launch


def balanced_grid(items: int, threads: int = THREADS, most: int = 64) -> int:
    """Teams for ``items`` work items shared by ``dsl.split(items, grid=True)``.

    split gives every worker ceil(items / workers) items, so workers past the last full chunk
    get none, and the parallel entry hands each OS thread a contiguous run of workers: with
    110 items on 27·4 workers (chunk 2) one thread ran 108 of them and squeezenet's 55-pixel
    expands did not get faster on two cores.  Here the workers are just enough for the chunk,
    so every one but the last has a full chunk."""
    chunk = -(-items // (most * threads))
    workers = -(-items // chunk)
    return max(1, min(most, -(-workers // threads)))


def oc_groups(m: int, oct_: int, blocked: bool = True) -> int:
    """Groups of ``oct_`` output channels a kernel runs for ``m`` channels: whole NCHWc16 blocks
    of them when ``blocked`` (the padding channels are computed and stored as zeros)."""
    channels = -(-m // BLOCK) * BLOCK if blocked else m
    return -(-channels // oct_)


PREFETCH_MIN_BYTES = 1 << 18  # packed weights from which a block prefetches the next one's (as conv_pointwise's)


def prefetch_stride(weight_bytes: int) -> int:
    """``pf`` for conv_direct: elements the prefetch address moves a step of the unrolled walk
    (two lines: the interior tiles of a group cover the next block's weights), 0 when the packed
    weights are under PREFETCH_MIN_BYTES."""
    return 2 * BLOCK if weight_bytes >= PREFETCH_MIN_BYTES else 0


def direct_supported(x, w, group: int) -> bool:
    """Shapes and dtypes the direct kernel takes: f32, one group, 1-D or 2-D images."""
    return x.dtype == dsl.f32 and group == 1 and x.ndim in (3, 4) and w.ndim == x.ndim


def launch_conv_direct(impl, x, w, bias, y, res, strides, dil, begin, blocked: bool, backend,
                       act: int, lo: float, hi: float, cfg: DirectConfig = None) -> None:
    """Run ``impl`` (conv_direct, or a model's recorder of it) on 4-D views: x (N, C, H, W) plain
    or its NCHWc16 array when ``blocked`` (then y and res are NCHWc16 too).  A padded plain
    image is first copied into a zero-bordered NCHWc16 buffer (the padding copy); an NCHWc16
    image is read in place, the border pixels in tiles of their own that skip the taps outside."""
    cfg = cfg or direct_config(backend or "numba", w.shape[0])
    for name, a in (("x", x), ("w", w), ("y", y), ("B", bias), ("Z", res)):
        if a is not None and a.dtype != np.float32:
            raise ValueError(f"conv_direct computes f32; {name} is {a.dtype} (f16, bf16 and f64 run the GEMM "
                             f"or conv_nchw kernels)")
    m, c, kh, kw = w.shape
    channels = x.shape[1] * BLOCK if blocked else x.shape[1]
    if c > channels or (not blocked and c != channels):
        raise ValueError(f"conv_direct takes one group: weights {tuple(w.shape)} need C/group = input channels, "
                         f"the input has {channels if not blocked else f'up to {channels}'} input channels")
    n = x.shape[0]
    h, wd = x.shape[2], x.shape[3]
    oh, ow = y.shape[2], y.shape[3]
    wp, bp = packed_weights(w, bias, cfg, backend)
    hp = (oh - 1) * strides[0] + (kh - 1) * dil[0] + 1
    wpad = (ow - 1) * strides[1] + (kw - 1) * dil[1] + 1
    padded = begin[0] > 0 or begin[1] > 0 or hp > h or wpad > wd
    # a blocked image's border is handled by the tiles (pixel_tables), unless its regions have a
    # quarter more tiles than the padded image's flattened ones: a 7×7 image (pad 1) is 13 tiles
    # in regions, 9 flat, and 512,7 ran 7-13 % slower in place (56×56 +0.6 %, 14×14 +9 %, 13×13
    # +14 %: 3-11 % faster without the copy; benchmarks/RESULTS.md, nineteenth session, conv2)
    copy = padded and not blocked
    if padded and blocked:
        regions = pixel_tables(oh, ow, h, wd, kh, kw, tuple(strides), tuple(dil), tuple(begin), cfg.P,
                               wd * BLOCK, BLOCK)[1].size // 4
        copy = 4 * regions > 5 * -(-(oh * ow) // cfg.P)
    hs, ws = (max(hp, begin[0] + h), max(wpad, begin[1] + wd)) if copy else (h, wd)
    # the padding copy of a plain image of >= 16 channels is NCHWc16: the 16 channels a tile
    # loops over innermost then share one cache line per pixel instead of 16
    transpose = copy and not blocked and c >= BLOCK
    reads_blocked = blocked or transpose
    lanes = BLOCK if reads_blocked else 1
    planes = n * (-(-c // BLOCK) if reads_blocked else c)
    geom = np.zeros(GEOM, np.int64)
    geom[[G_N, G_C, G_M, G_KH, G_KW, G_SH, G_SW, G_DH, G_DW, G_OH, G_OW]] = \
        (n, c, m, kh, kw, strides[0], strides[1], dil[0], dil[1], oh, ow)
    if reads_blocked:  # x[n, c // 16, h, w, c % 16]
        nblk = x.shape[1] if blocked and not copy else -(-c // BLOCK)  # x's blocks, or the copy's
        geom[[G_SXN, G_SXB, G_SXC, G_SXH, G_SXW]] = (nblk * hs * ws * BLOCK, hs * ws * BLOCK, 1,
                                                     ws * BLOCK, BLOCK)
    else:
        geom[[G_SXN, G_SXB, G_SXC, G_SXH, G_SXW]] = (c * hs * ws, BLOCK * hs * ws, hs * ws, ws, 1)
    geom[G_TRANSPOSE] = int(transpose)
    geom[[G_H, G_W, G_PT, G_PL, G_HP, G_WP, G_LANES]] = (h, wd, begin[0], begin[1], hs, ws, lanes)
    pix, tinfo = pixel_tables(oh, ow, hs, ws, kh, kw, tuple(strides), tuple(dil),
                              (0, 0) if copy or not padded else tuple(begin), cfg.P,
                              int(geom[G_SXH]), int(geom[G_SXW]))
    flat_x = x.reshape(-1)
    flat_y = y.reshape(-1)
    flat_res = np.zeros(1, np.float32) if res is None else res.reshape(-1)
    kw_args = dict(blocked_out=int(blocked), add_res=int(res is not None), act=act, act_lo=float(lo),
                   act_hi=float(hi), pf=prefetch_stride(wp.nbytes), V=cfg.V, NV=cfg.NV, P=cfg.P, TG=cfg.TG, U=cfg.U,
                   backend=backend)
    ocg = oc_groups(m, cfg.OCT, blocked)
    items = -(-(tinfo.size // 4) // cfg.TG) * n * ocg
    grid = balanced_grid(items)
    if copy:
        buf = np.empty(planes * hs * ws * lanes, np.float32)
        # only x and buf are touched by the copy: placeholders for the rest keep a small image's
        # copy under the backend's serial-launch size (waking the second core cost 20-150 us for
        # a 10 us copy; squeezenet's 64->256 weights alone are over that size)
        none = np.zeros(1, np.float32)
        no_tab = np.zeros(1, np.int64)
        impl(flat_x, none, none, none, np.zeros(1, np.float32), buf, no_tab, no_tab, geom, phase=PHASE_PAD,
             grid=max(1, min(grid, planes // 8)), **kw_args)
        src = buf
    else:
        src = flat_x
    impl(src, wp, bp, flat_res, flat_y, np.zeros(1, np.float32), pix, tinfo, geom, phase=PHASE_CONV, grid=grid,
         **kw_args)
