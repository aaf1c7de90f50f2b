"""1×1 (pointwise) f32 convolution with a SIMD register tile, on plain NCHW or NCHWc16.

A 1×1 convolution is Y[oc, px] = Σ_ic W[oc, ic] · X[ic, px·s]: no window, no padding.  The
direct kernel (ops/conv_direct.py) keeps its partial sums in scratch between 16-channel
blocks because a 3×3 window's weights must stay in L1; here one tile sums over every input
channel in registers (oneDNN's 1×1 "reduce_dim" loop innermost), so a tile is loaded from and
stored to memory once.  The GEMM route (ops/gemm_packed.py) packs the activations into B
panels at every call and only reads and writes plain tensors; this kernel reads x in either
format, with any stride (in place, or gathered once into a compact NCHWc16 image), and writes
either format.

* **Tile**: ``P`` output pixels × ``NV`` vectors of ``V`` output channels
  (``dsl.local((P, NV), simd(f32, V))``).  Per input channel it loads ``NV`` weight vectors
  and broadcasts one input value per pixel: P·NV fused multiply-adds for NV + P loads.
  Plain x and y with stride 1 and few input channels use a second tile instead, ``RR``
  output channels × ``RNV`` vectors of consecutive pixels, weights broadcast, which
  stores rows of y as vectors (a plain y from the first tile is a transposing store); its
  shape follows the target's vector registers (``row_tile``).
* **Weights** are reordered once into ``[oc group][ic][OCT oc]`` (ops/conv_direct.py's
  ``pack_conv_weights`` with a 1-tap window, kept per constant array by ``packed_weights``).
* **Pixels**: tiles run along the flattened output image and read consecutive NCHWc16 pixels.
  A strided NCHWc16 x, and a plain x of 16 channels or more feeding an NCHWc16 y (unless plain
  pair items run, below) or a strided
  convolution of ``GATHER_PLAIN_MIN_M`` output channels or more, is first copied into a
  compact NCHWc16 image of the output's size (``gather_pixels``, oneDNN's "reduce to unit
  stride"; in place, ResNet's projections ran ~0.7x as fast).  Any other strided plain x is
  read in place, every ``s``-th pixel of every ``s``-th row, its pixel offsets a running (row,
  column) that wraps rows inside the tile.  A last partial tile repeats its last pixel and does
  not store the copies; one of at most P/3 pixels (a 7×7 image's 49th) is summed pixel by
  pixel instead: a whole tile cost six pixels' FMAs for it.
* **Pixel pairs**: NCHWc16 x with stride 1 runs items of 2P pixels (28 accumulators at
  AVX-512) whose x offsets are constants from one base (no offset registers to spill); the
  last item of a row overlaps the one before and stores only its new pixels, or, when at most
  P pixels are left (7×7 images: 3 items and 7 pixels), runs the P-pixel tile.  Whole groups
  under Relu, with or without a residual, are stored straight from the registers.  Measured on one core
  (benchmarks/bench_pointwise.py): squeezenet's 1×1 layers 10-25 % faster, the 1000-class head
  and ResNet's stride-1 1×1 layers ~10 %.  A plain x with stride 1 (``PAIR_PLAIN``, ``pair_mode``)
  runs them too where the pixel-vector tile does not: the 2P pixels are consecutive floats of
  each input channel's row, so the offsets are constants again (a run-time pixel step cost 5-10 %
  on every pair layer); one core, AVX-512: ResNet's plain 1024>256 14×14 0.80x the time of the
  7-pixel tile, and into NCHWc16 0.78-0.91x the time of the gather and NCHWc16 pairs.
* **Work split**: items are (oc group, image, row, tile), oc group outermost, split evenly
  over the team and the grid, so a thread's consecutive tiles reuse one group's weights
  (C·OCT·4 bytes, 128 KB at C = 1024) from L2; the pixel-vector tile's items run the row
  groups innermost (the tile's rows of x stay in L1, ≤ 128 channels × 192 bytes).  A thread
  decodes its first item and counts up from there: five integer divisions per item cost
  as much as a 16-channel tile's sums.  The grid is few teams (ops/work_split.py): a worker's
  start (~190 ns here) cost as much as 2-3 items of a 16-channel layer, and one worker per item
  ran squeezenet's 1×1 layers 1.3-1.8x slower on one core.
* **Prefetches** (``prefetch_mode``, ``dsl.prefetch``): with group after group, each group's
  packed weights came from L3 or memory on its first items in a model (100 MB of weights a ResNet-50
  run), so a group's last OCT/16 items prefetch one line of the next group's weights per input
  channel, in layers of ``PREFETCH_MIN_BYTES`` of weights or more.  One core, L2 swept: ResNet's
  7×7 layers 0.74-0.81x the time, 14×14 0.92-0.96x, hot ±3 %; the whole ResNet-50 0.92-1.01x
  (the gain grows with the other processes' load on the shared L3).  Prefetching the residual's
  lines did not pay (0.9-1.1x, noise) and was dropped.  From ``PREFETCH_X_MIN_C`` input channels
  (``PF_X``) a tile also prefetches x one 16-channel block ahead, one line per input channel: on
  NCHWc16 x the next block's pixel lines (a 14-pixel item's x, 56 KB at C = 1024, does not stay in
  L1, and each block of it is 12.5 KB past the last, beyond the hardware prefetchers' page), on
  plain x the row 16 channels ahead.  One core, alternated: ResNet's C ≥ 256 layers 0.92-0.97x the
  time, the plain 1024>256 row 0.90x; at C ≤ 64 it was 1.00-1.02x.  Up to ``PREFETCH_Y_MAX_C``
  input channels (``PF_Y``) pair items prefetch the next item's output lines (the residual's,
  where y is written over it): an item of 64 channels is too short to hide its 28 stores' misses
  (L2 evicted: ResNet's 64>64 and 64>256 + residual 0.86-0.89x; from 256 channels 1.0-1.1x).
  light_resnet50 with both against neither, 150 alternated rounds: 0.995x (no gain shown).
* **Epilogue**: bias, a residual (``res``, in y's format) and Relu / Clip / LeakyRelu while
  storing, the sums read back from scratch by a run-time loop (one compiled copy of the
  activation, not P × NV: ~2 s less compile CPU per specialization): whole tiles into NCHWc16 as whole
  vectors; partial tiles, the last block (channels past M written as 0) and plain y with
  checks per vector or lane.  A whole tile into NCHWc16 under Relu (every squeezenet layer,
  ResNet's) skips the scratch: bias, residual and Relu on the registers (AVX2, one core:
  squeezenet's 16>64 expand 0.8x, ResNet's 64>256 0.9x); so does one without an activation
  (ResNet's projections), the store being max(v, floor) with floor 0 or -inf (64>256 0.90x,
  the strided projections 0.95-0.98x).
* **Pooled** (``pooled``, geom[G_BLOCKED_OUT] = POOLED; ops/conv_global_pool.py): y is the plain
  (N, M) global average.  Items are split over the team in whole (oc group, image) runs, so one
  thread adds a run's activated pixels into sums kept in its scratch after the tile and writes
  them, scaled by 1 / (H·W), at the run's last item: no races, no partial rows, no second pass.
  The sums go through the scratch: summing on the registers ran squeezenet's head 5-8 % slower.
"""
from __future__ import annotations

import math

import numpy as np

import dsl
from dsl import In, Out, f32, i32, i64
from dsl.runtime.cache_lines import line_aligned
from ops import register_tiles, work_split
from ops.conv_direct import (DirectConfig, balanced_grid, oc_groups, packed_weights,
                              store_last_block)
from ops.gemm_packed import ACT_NONE, ACT_RELU, activation

THREADS = 4
BLOCK = 16  # channels per NCHWc16 block

# geometry vector (``geom``) slots
G_N, G_C, G_M, G_ROWS, G_COLS, G_STEP_ROW, G_STEP_COL = range(7)  # output rows × cols, input steps
G_SXN, G_SXB, G_SXC, G_SXP = range(7, 11)  # x strides: image, 16-channel block, channel, pixel
G_BLOCKED_OUT = 11  # 0: plain y, 1: NCHWc16 y, POOLED: y = the plain (N, M) global average (pooled)
POOLED = 2
G_ROWS_TILE = 12  # 1: plain x and y, stride 1: the pixel-vector tile (run_rows)
G_PAIR = 13  # 1 (PAIR_BLOCKED) / 2 (PAIR_PLAIN): x NCHWc16 / plain, stride 1, items of 2P pixels at constant offsets
PAIR_BLOCKED, PAIR_PLAIN = 1, 2
G_OUT_W = 14  # output pixels per row of x's grid: the flattened tiles' running (row, column) wraps here
G_GATHER = 15  # 1: this launch only copies the pixels x's tiles read into y, NCHWc16 (gather_pixels)
GEOM = 16
ROWS_MAX_C = 128  # input channels up to which plain stride-1 convolutions run the pixel-vector tile
# output channels from which a plain x is gathered into NCHWc16 first: the copy (16 scalar loads and
# stores per pixel and block) against the convolution's M FMAs per input value; one core: M = 16
# 1.7x slower with it (squeezenet's first squeeze), M = 64 even, M = 128 0.95x, M = 256 0.77x
GATHER_PLAIN_MIN_M = 128
NO_FLOOR = -math.inf  # the register store's floor without an activation: max(v, -inf) is v
SCRATCH = 512  # floats per thread for a tile's sums: P·NV·V and RR·RNV·V must fit
PF_WEIGHTS = 1  # prefetch_mode's bit: the next group's weights
PF_X = 2  # prefetch_mode's bit: tiles on NCHWc16 x prefetch the next 16-channel block's pixel lines
PF_Y = 4  # prefetch_mode's bit: NCHWc16 pair items prefetch the next item's lines of y (and of res, in place)
PREFETCH_MIN_BYTES = 1 << 18  # packed weights from which the next group's are prefetched
PREFETCH_X_MIN_C = 128  # input channels from which the next block's pixel lines are prefetched (PF_X)
PREFETCH_Y_MAX_C = 128  # input channels up to which the next item's y lines are prefetched (PF_Y)


def prefetch_mode(c: int, m: int) -> int:
    """What the tiles prefetch (``pf``): the next oc group's packed weights once the layer's
    weights (C·M·4 bytes) are too big to stay in L2 from one run of a model to the next (with
    every layer prefetching, squeezenet and ResNet-50 ran 0.97-1.00x: no gain below this),
    (``PF_X``) x one 16-channel block ahead from 128 input channels (at 16-64, 0.99-1.02x), and
    (``PF_Y``) the next pair item's output lines up to 128 input channels, where an item's few
    FMAs cannot hide its stores' misses (from 256, 1.0-1.1x)."""
    return ((PF_X if c >= PREFETCH_X_MIN_C else 0) | (PF_Y if c <= PREFETCH_Y_MAX_C else 0)
            | (PF_WEIGHTS if c * m * 4 >= PREFETCH_MIN_BYTES else 0))


def pointwise_config(backend: str = "numba") -> DirectConfig:
    """AVX-512: 7 pixels × 32 channels (14 accumulators, 2 weight vectors, a broadcast).  The
    same tile as the direct kernel, so both share one packed-weight order; ResNet's 1×1 output
    widths (56, 28, 14, 7) are multiples of 7.  AVX2: 6 pixels × 16 channels."""
    if "avx512f" in dsl.target(backend).features:
        return DirectConfig(V=16, NV=2, P=7)
    return DirectConfig(V=8, NV=2, P=6)


def row_tile(backend: str = "numba") -> tuple:
    """The pixel-vector tile (plain x and y, stride 1): (RR output channels, RNV vectors of V
    pixels), RR·RNV accumulators plus RNV loads of x and a broadcast weight in the vector
    registers: 8 × 3 of AVX-512's 32 registers, 4 × 3 of AVX2's 16 (an 8 × 3 tile there spilled)."""
    t = dsl.target(backend)
    if "avx512f" in t.features:
        return 8, 3
    return 4, 3


@dsl.kernel(threads=THREADS)
def conv_pointwise(x: In[f32], w: In[f32], bias: In[f32], res: In[f32], y: Out[f32], geom: dsl.Vec[i64, 16],
                   add_res: i32, act: i32, act_lo: f32, act_hi: f32, pf: i32, V: dsl.const[i64], NV: dsl.const[i64],
                   P: dsl.const[i64], RR: dsl.const[i64], RNV: dsl.const[i64], PAIRS: dsl.const[i64] = 1):
    """y = act(Σ_ic w[oc, ic] · x[ic, pixel·s] + bias [+ res]); x read through geom's strides
    (plain or NCHWc16), y and res NCHWc16 when geom[G_BLOCKED_OUT] else plain.  With
    geom[G_GATHER], y = the pixels the tiles read, as a compact NCHWc16 image (``gather_pixels``).
    PAIRS 0: the target has too few registers for items of 2P pixels, so their code is not
    compiled at all.  ``pf`` (``prefetch_mode``): bit PF_WEIGHTS, a group's last items prefetch
    the next group's packed weights."""
    OCT = V * NV
    if geom[G_GATHER] == 1:
        # y[n, c / 16, oh, ow, c % 16] = x[n, c, oh·sh, ow·sw]: one output row of one 16-channel
        # block per step; NCHWc16 x by whole vectors, plain x by its 16 channel rows (0 past C)
        g_cb = (geom[G_C] + BLOCK - 1) // BLOCK
        g_ow = geom[G_OUT_W]
        g_oh = geom[G_COLS] // g_ow
        g_sxc = geom[G_SXC]
        g_step = geom[G_STEP_COL] * geom[G_SXP]
        g_lo, g_hi = dsl.split(geom[G_N] * g_cb * g_oh, grid=True)
        for g_row in range(g_lo, g_hi):
            g_plane = g_row // g_oh
            g_icb = g_plane % g_cb
            g_src = (g_plane // g_cb) * geom[G_SXN] + g_icb * geom[G_SXB] + \
                (g_row % g_oh) * geom[G_STEP_ROW] * geom[G_SXP]
            g_dst = g_row * g_ow * BLOCK
            if g_sxc == 1:
                for g_col in range(g_ow):
                    for g_k in dsl.static_range(BLOCK // V):
                        y.vstore(g_dst + g_col * BLOCK + g_k * V, x.vload(g_src + g_col * g_step + g_k * V, V))
            else:
                g_cnt = min(BLOCK, geom[G_C] - g_icb * BLOCK)
                for g_col in range(g_ow):  # run-time lane loops: 16 unrolled lanes cost ~1 s of compile
                    for g_lane in range(g_cnt):
                        y.flat[g_dst + g_col * BLOCK + g_lane] = x.flat[g_src + g_lane * g_sxc + g_col * g_step]
                    for g_pad in range(g_cnt, BLOCK):
                        y.flat[g_dst + g_col * BLOCK + g_pad] = f32(0)
        return
    tile = dsl.scratch((THREADS, SCRATCH), f32)  # one tile's sums for the run-time epilogue
    if geom[G_ROWS_TILE] == 1:
        # plain x and y, stride 1: Y[oc rows, px] = W · X[ic, px], a GEMM on x in place; a tile of
        # RR output channels × RNV vectors of V consecutive pixels, per input channel RNV
        # vector loads of x and RR weight broadcasts for RR·RNV FMAs; the rows of y are
        # stored as vectors (no transposing epilogue).  Needs H·W >= RNV·V: the last tile
        # starts at H·W - RNV·V and stores only the pixels no earlier tile did.
        PX = RNV * V
        rn_img = geom[G_N]
        rc_in = geom[G_C]
        rm_out = geom[G_M]
        hw = geom[G_COLS]
        ptiles = (hw + PX - 1) // PX
        rgroups = (rm_out + RR - 1) // RR
        rat = dsl.thread_id() * SCRATCH
        rlo, rhi = dsl.split(rgroups * rn_img * ptiles, grid=True)
        # item = (image, pixel tile, row group), row group fastest: the tile's x rows stay in L1 for
        # every group; decoded once, then counted up (no divisions per item)
        rg = rlo % rgroups
        pt = (rlo // rgroups) % ptiles
        nb = rlo // rgroups // ptiles
        for ritem in range(rlo, rhi):
            p_start = pt * PX  # first pixel this tile stores
            p0 = min(p_start, hw - PX)  # first pixel it computes
            o_first = rg * RR
            # the packed weights hold OCT channels per group: row ro is lane ro % OCT of group ro // OCT
            cpad = ((rc_in + BLOCK - 1) // BLOCK) * BLOCK
            wrow = (o_first // OCT) * cpad * OCT + o_first % OCT
            xb = nb * rc_in * hw + p0
            racc = dsl.local((RR, RNV), dsl.simd(f32, V))
            for ri in dsl.static_range(RR):
                for rj in dsl.static_range(RNV):
                    racc[ri, rj] = dsl.splat(f32(0), V)
            for ic in range(rc_in):
                rxv = dsl.local((RNV,), dsl.simd(f32, V))
                for rj in dsl.static_range(RNV):
                    rxv[rj] = x.vload(xb + ic * hw + rj * V, V)
                wi = wrow + ic * OCT
                for ri in dsl.static_range(RR):
                    wb = dsl.splat(w.flat[wi + ri], V)
                    for rj in dsl.static_range(RNV):
                        racc[ri, rj] = dsl.fma(wb, rxv[rj], racc[ri, rj])
            nrows = min(RR, rm_out - o_first)
            if p0 == p_start:  # a whole tile: vector epilogue per row
                for ri in dsl.static_range(RR):
                    if ri < nrows:
                        ro = o_first + ri
                        yb = (nb * rm_out + ro) * hw + p0
                        rbv = dsl.splat(bias.flat[ro], V)
                        for rj in dsl.static_range(RNV):
                            rvec = racc[ri, rj] + rbv
                            if add_res == 1:
                                rvec = rvec + res.vload(yb + rj * V, V)
                            y.vstore(yb + rj * V, activation(rvec, act, act_lo, act_hi))
            else:  # the last tile overlaps the one before: store only its new pixels
                for ri in dsl.static_range(RR):
                    for rj in dsl.static_range(RNV):
                        tile.vstore(rat + ri * PX + rj * V, racc[ri, rj])
                for row in range(nrows):
                    ro = o_first + row
                    yb = (nb * rm_out + ro) * hw
                    sbv = bias.flat[ro]
                    for q in range(p_start, hw):
                        rv = tile[dsl.thread_id(), row * PX + q - p0] + sbv
                        if add_res == 1:
                            rv += res.flat[yb + q]
                        y.flat[yb + q] = activation(rv, act, act_lo, act_hi)
            rg += 1
            if rg == rgroups:
                rg = 0
                pt += 1
                if pt == ptiles:
                    pt = 0
                    nb += 1
        return
    n_img = geom[G_N]
    c_in = geom[G_C]
    m_out = geom[G_M]
    rows = geom[G_ROWS]
    cols = geom[G_COLS]
    step_row = geom[G_STEP_ROW]
    step_col = geom[G_STEP_COL]
    sxn = geom[G_SXN]
    sxb = geom[G_SXB]
    sxc = geom[G_SXC]
    sxp = geom[G_SXP]
    blocked_out = geom[G_BLOCKED_OUT]
    pair = geom[G_PAIR]
    out_w = geom[G_OUT_W]
    ohw = rows * cols
    cb = (c_in + BLOCK - 1) // BLOCK
    mb = (m_out + BLOCK - 1) // BLOCK
    ocg_n = (m_out + OCT - 1) // OCT
    m_written = m_out  # channels the epilogue stores
    if blocked_out == 1:  # every lane of the last block is written, zero past m_out
        ocg_n = (mb * BLOCK + OCT - 1) // OCT
        m_written = mb * BLOCK
    tp = P * (1 + min(pair, 1))  # pixels per item
    row_tiles = (cols + tp - 1) // tp
    at_t = dsl.thread_id() * SCRATCH
    lo, hi = dsl.split(ocg_n * n_img * rows * row_tiles, grid=True)
    if blocked_out == POOLED:
        # whole (oc group, image) runs per thread, whose sums stay in its scratch (no races, no second
        # pass over partial sums): every boundary rounded up to a run's start, so the ranges still
        # tile the items
        run = rows * row_tiles
        lo = (lo + run - 1) // run * run
        hi = (hi + run - 1) // run * run
    # item = (oc group, image, output row, tile of tp pixels), decoded once, then counted up (per
    # item divisions cost as much as the sums of a tile with 16 input channels)
    t = lo % row_tiles
    orow = (lo // row_tiles) % rows
    nb = (lo // row_tiles // rows) % n_img
    g = lo // row_tiles // rows // n_img
    # the (row, column) of the item's first pixel on the output grid (strided x: tiles run over the
    # flattened image and wrap rows, so a 7x7 output is 9 tiles of 6, not 7 rows of 6 + 1)
    qh = (t * tp) // out_w
    qw = t * tp - qh * out_w
    ipg = n_img * rows * row_tiles  # items per oc group
    w_lines = OCT // BLOCK  # 64-byte lines per packed weight row: the last w_lines items of a group
    # each prefetch one line per input channel of the next group's weights
    # whole tiles into NCHWc16 under Relu or no activation are stored from the registers: max(v, floor)
    reg_store = 0
    floor = f32(0)
    if act == ACT_RELU:
        reg_store = 1
    if act == ACT_NONE:
        reg_store = 1
        floor = f32(NO_FLOOR)
    for item in range(lo, hi):
        wg = g * cb * BLOCK * OCT
        pf_duty = w_lines - (ipg - ((nb * rows + orow) * row_tiles + t))  # 0..w_lines-1 on duty
        pf_w = 0
        pf_at = wg + cb * BLOCK * OCT  # the next group's weights
        if (pf & PF_WEIGHTS) != 0 and pf_duty >= 0:
            pf_w = 1
            pf_at += pf_duty * c_in * BLOCK
        one_vector = NV > 1 and g * OCT + V >= m_written
        pf_y = 0
        if (pf & PF_Y) != 0 and blocked_out == 1:
            pf_y = 1
        pf_x = 0  # NCHWc16 x
        pf_xp = 0  # plain x
        if (pf & PF_X) != 0:
            if sxc == 1:
                pf_x = 1
            else:
                pf_xp = 1
        c_first = t * tp  # first pixel of the row this item stores
        if PAIRS == 1 and pair >= 1 and cols - c_first > P:
            # 2P consecutive pixels 16 floats apart in x (NCHWc16, stride 1): their offsets are
            # constants from one base, so the 2P·NV accumulators leave the integer registers free;
            # the last tile of a row overlaps the one before and stores only its new pixels.  A
            # last item of at most P pixels runs the P-pixel tile below instead (squeezenet's
            # 13x13 images: 12 items of 14 and a lone pixel, which cost a whole item)
            c0 = min(c_first, cols - 2 * P)
            npix = 2 * P
            xb = nb * sxn + (orow * step_row + c0) * BLOCK
            acc2 = dsl.local((2 * P, NV), dsl.simd(f32, V))
            for p in dsl.static_range(2 * P):
                for j in dsl.static_range(NV):
                    acc2[p, j] = dsl.splat(f32(0), V)
            if one_vector:  # only the group's first vector is stored (M = 16, 48 at OCT = 32)
                for icb in range(cb):
                    cn2 = min(BLOCK, c_in - icb * BLOCK)
                    for ci in range(cn2):
                        wv2 = w.vload(wg + (icb * BLOCK + ci) * OCT, V)
                        xc2 = xb + icb * sxb + ci
                        for p in dsl.static_range(2 * P):
                            acc2[p, 0] = dsl.fma(dsl.splat(x.flat[xc2 + p * BLOCK], V), wv2, acc2[p, 0])
            elif pair == PAIR_PLAIN:
                # plain x: the 2P pixels are consecutive floats of each input channel's row
                for ci in range(c_in):
                    wv4 = dsl.local((NV,), dsl.simd(f32, V))
                    for j in dsl.static_range(NV):
                        wv4[j] = w.vload(wg + ci * OCT + j * V, V)
                    if pf_w == 1:
                        dsl.prefetch(w, pf_at + ci * BLOCK)
                    xc4 = nb * sxn + c0 + ci * sxc  # plain x: pixel c0 of channel ci's row
                    if pf_xp == 1:  # the row BLOCK channels ahead: its first and last pixel's lines
                        dsl.prefetch(x, xc4 + BLOCK * sxc)
                        dsl.prefetch(x, xc4 + BLOCK * sxc + 2 * P - 1)
                    for p in dsl.static_range(2 * P):
                        xv4 = dsl.splat(x.flat[xc4 + p], V)
                        for j in dsl.static_range(NV):
                            acc2[p, j] = dsl.fma(xv4, wv4[j], acc2[p, j])
            else:
                for icb in range(cb):
                    cn3 = min(BLOCK, c_in - icb * BLOCK)
                    xn3 = xb + (icb + 1) * sxb  # the next block's pixel lines
                    if pf_y == 1 and icb < 4:  # the next item's y lines, 4 pixels of each block a step
                        yn3 = ((nb * mb + g * OCT // BLOCK) * ohw + orow * cols + c0 + 2 * P + icb * 4) * BLOCK
                        for yq in dsl.static_range(4):
                            for yblk in dsl.static_range(V * NV // BLOCK):
                                dsl.prefetch(y, yn3 + yblk * ohw * BLOCK + yq * BLOCK)
                    for ci in range(cn3):
                        wv3 = dsl.local((NV,), dsl.simd(f32, V))
                        for j in dsl.static_range(NV):
                            wv3[j] = w.vload(wg + (icb * BLOCK + ci) * OCT + j * V, V)
                        if pf_w == 1:
                            dsl.prefetch(w, pf_at + (icb * BLOCK + ci) * BLOCK)
                        if pf_x == 1:
                            dsl.prefetch(x, xn3 + ci * BLOCK)
                        xc3 = xb + icb * sxb + ci
                        for p in dsl.static_range(2 * P):
                            xv3 = dsl.splat(x.flat[xc3 + p * BLOCK], V)
                            for j in dsl.static_range(NV):
                                acc2[p, j] = dsl.fma(xv3, wv3[j], acc2[p, j])
            if blocked_out == 1 and reg_store == 1 and c0 == c_first and V == BLOCK \
                    and (g * OCT + OCT <= m_out or (g * OCT + V <= m_out and m_out == mb * BLOCK)):
                # the common case (every vector of the group whole channels or past the last block)
                # stored straight from the registers, no scratch round trip, one activation
                # unrolled: bias, the residual (ResNet's expanding layers), Relu, 2P consecutive
                # pixels of each block
                for j in dsl.static_range(NV):
                    if g * OCT + j * V < m_out:
                        rb = bias.vload(g * OCT + j * V, V)
                        ya = ((nb * mb + g * NV + j) * ohw + orow * cols + c0) * BLOCK
                        for p in dsl.static_range(2 * P):
                            ra = acc2[p, j] + rb
                            if add_res == 1:
                                ra = ra + res.vload(ya + p * BLOCK, V)
                            y.vstore(ya + p * BLOCK, dsl.where(ra <= floor, floor, ra))
                npix = 0  # nothing left for the epilogue below
            else:
                for p in dsl.static_range(2 * P):
                    for j in dsl.static_range(NV):
                        tile.vstore(at_t + p * OCT + j * V, acc2[p, j])
        else:
            c0 = c_first
            npix = min(P, cols - c0)
            # a last tile of at most P / 3 pixels (a 7x7 image: 8 tiles of 6 and one of 1) is summed
            # pixel by pixel below, not as a whole tile of copies
            narrow = npix * 3 <= P
            cb_tile = cb
            if narrow:
                cb_tile = 0
            # pixel offsets in x, a running output (row, column) that wraps at out_w; pixels past
            # the image repeat the last one
            off = dsl.local((P,), i64)
            ph = qh
            pc = qw
            for p in dsl.static_range(P):
                off[p] = nb * sxn + (ph * step_row + pc * step_col) * sxp
                if p + 1 < npix:
                    pc += 1
                    if pc == out_w:
                        pc = 0
                        ph += 1
            acc = dsl.local((P, NV), dsl.simd(f32, V))
            for p in dsl.static_range(P):
                for j in dsl.static_range(NV):
                    acc[p, j] = dsl.splat(f32(0), V)
            if one_vector:
                # only the group's first vector holds channels that are stored: sum that one, half
                # the FMAs of the whole tile
                for icb in range(cb_tile):
                    cn1 = min(BLOCK, c_in - icb * BLOCK)
                    for ci in range(cn1):
                        wv1 = w.vload(wg + (icb * BLOCK + ci) * OCT, V)
                        xc1 = icb * sxb + ci * sxc
                        for p in dsl.static_range(P):
                            acc[p, 0] = dsl.fma(dsl.splat(x.flat[xc1 + off[p]], V), wv1, acc[p, 0])
            else:
                for icb in range(cb_tile):
                    cn = min(BLOCK, c_in - icb * BLOCK)
                    for ci in range(cn):
                        wv = dsl.local((NV,), dsl.simd(f32, V))
                        for j in dsl.static_range(NV):
                            wv[j] = w.vload(wg + (icb * BLOCK + ci) * OCT + j * V, V)
                        if pf_w == 1:
                            dsl.prefetch(w, pf_at + (icb * BLOCK + ci) * BLOCK)
                        if pf_x == 1:
                            dsl.prefetch(x, off[0] + (icb + 1) * sxb + ci * BLOCK)
                        xc = icb * sxb + ci * sxc
                        for p in dsl.static_range(P):
                            xv = dsl.splat(x.flat[xc + off[p]], V)
                            for j in dsl.static_range(NV):
                                acc[p, j] = dsl.fma(xv, wv[j], acc[p, j])
            if blocked_out == 1 and npix == P and reg_store == 1 and (
                    g * OCT + OCT <= m_out or (m_out == mb * BLOCK and (m_out - g * OCT) % V == 0)):
                # a whole tile into NCHWc16 under Relu, every vector all real channels or past the
                # last block: bias, residual and Relu straight from the registers (the scratch round
                # trip cost as much as the sums of a 16-channel layer on AVX2's 6-pixel tiles; one
                # unrolled copy: a second, for no activation, cost ~3 s more compile CPU)
                dq0 = orow * cols + c0
                for j in dsl.static_range(NV):
                    if g * OCT + j * V < m_out:
                        dfo = g * OCT + j * V
                        dbv = bias.vload(dfo, V)
                        dya = ((nb * mb + dfo // BLOCK) * ohw + dq0) * BLOCK + dfo % BLOCK
                        for p in dsl.static_range(P):
                            dv = acc[p, j] + dbv
                            if add_res == 1:
                                dv = dv + res.vload(dya + p * BLOCK, V)
                            y.vstore(dya + p * BLOCK, dsl.where(dv <= floor, floor, dv))
                npix = 0  # nothing left for the epilogue below
            else:
                for p in dsl.static_range(P):
                    for j in dsl.static_range(NV):
                        tile.vstore(at_t + p * OCT + j * V, acc[p, j])
            if narrow:
                # one pixel at a time, NV vectors: a whole tile cost six pixels' FMAs for its one or two
                # (one chain of sums per vector: partial sums to overlap them grew the compile ~10 %)
                nph = qh
                npc = qw
                for npx in range(npix):
                    n_off = nb * sxn + (nph * step_row + npc * step_col) * sxp
                    nacc = dsl.local((NV,), dsl.simd(f32, V))
                    for j in dsl.static_range(NV):
                        nacc[j] = dsl.splat(f32(0), V)
                    for icb in range(cb):
                        ncn = min(BLOCK, c_in - icb * BLOCK)
                        nw = wg + icb * BLOCK * OCT
                        nx = n_off + icb * sxb
                        for nci in range(ncn):
                            nxv = dsl.splat(x.flat[nx + nci * sxc], V)
                            for j in dsl.static_range(NV):
                                nacc[j] = dsl.fma(nxv, w.vload(nw + nci * OCT + j * V, V), nacc[j])
                    for j in dsl.static_range(NV):
                        tile.vstore(at_t + npx * OCT + j * V, nacc[j])
                    npc += 1
                    if npc == out_w:
                        npc = 0
                        nph += 1
        q0 = orow * cols + c0  # output pixel of the tile's first scratch row
        first = c_first - c0  # scratch rows before it were stored by the previous tile
        if blocked_out == 1:
            # NCHWc16: the vectors whose lanes are all real channels (every vector of a group but
            # the last one's, e.g. all of squeezenet's) as whole vectors in a run-time loop (P × NV
            # copies of the activation would compile slowly); the rest lane-checked
            nfull = min(NV, max(0, (m_out - g * OCT) // V))
            if nfull == NV:  # the whole group: the vectors unrolled, bias loaded once
                fbv = dsl.local((NV,), dsl.simd(f32, V))
                for j in dsl.static_range(NV):
                    fbv[j] = bias.vload(g * OCT + j * V, V)
                for fp in range(first, npix):
                    for j in dsl.static_range(NV):
                        fo = g * OCT + j * V
                        fat = ((nb * mb + fo // BLOCK) * ohw + q0 + fp) * BLOCK + fo % BLOCK
                        fvec = tile.vload(at_t + fp * OCT + j * V, V) + fbv[j]
                        if add_res == 1:
                            fvec = fvec + res.vload(fat, V)
                        y.vstore(fat, activation(fvec, act, act_lo, act_hi))
            else:  # the last group (M = 16 or 48 at OCT = 32: its first vector)
                for fp in range(first, npix):
                    for fj in range(nfull):
                        fo = g * OCT + fj * V
                        fat = ((nb * mb + fo // BLOCK) * ohw + q0 + fp) * BLOCK + fo % BLOCK
                        fvec = tile.vload(at_t + fp * OCT + fj * V, V) + bias.vload(fo, V)
                        if add_res == 1:
                            fvec = fvec + res.vload(fat, V)
                        y.vstore(fat, activation(fvec, act, act_lo, act_hi))
            if g * OCT + nfull * V < mb * BLOCK:  # a vector of the last block past M: lane-checked
                for px in range(first, npix):
                    for jv in range(nfull, NV):
                        o0 = g * OCT + jv * V  # first output channel of this vector
                        if o0 < mb * BLOCK:
                            vec = tile.vload(at_t + px * OCT + jv * V, V) + bias.vload(o0, V)
                            at = ((nb * mb + o0 // BLOCK) * ohw + q0 + px) * BLOCK + o0 % BLOCK
                            if add_res == 1:
                                vec = vec + res.vload(at, V)
                            store_last_block(y, tile, at_t + px * OCT + jv * V, at,
                                             activation(vec, act, act_lo, act_hi), m_out - o0, V)
        else:  # plain y, or pooled: per output channel, the tile's pixels are consecutive in y
            # bias (padded to whole groups) and, without a residual, the activation on whole
            # vectors in the scratch, then a plain copy: a scalar activation per element cost
            # more than the sums of a 64-channel layer on AVX2 (as in ops/conv_direct.py).
            # Pooled: the activated pixels are added to the (group, image) run's sums instead, kept
            # in the scratch after the tile (this thread owns the run); its last item writes them
            # scaled by 1 / (H·W)
            pacc = at_t + 2 * P * OCT
            if blocked_out == POOLED and t == 0 and orow == 0:
                for pj in range(NV):
                    tile.vstore(pacc + pj * V, dsl.splat(f32(0), V))
            for px in range(first, npix):
                for jv in range(NV):
                    if g * OCT + jv * V < m_out:
                        pvec = tile.vload(at_t + px * OCT + jv * V, V) + bias.vload(g * OCT + jv * V, V)
                        if add_res == 0:
                            pvec = activation(pvec, act, act_lo, act_hi)
                        if blocked_out == POOLED:
                            tile.vstore(pacc + jv * V, tile.vload(pacc + jv * V, V) + pvec)
                        else:
                            tile.vstore(at_t + px * OCT + jv * V, pvec)
            if blocked_out == POOLED:
                if t == row_tiles - 1 and orow == rows - 1:
                    pinv = f32(1.0) / f32(ohw)
                    for pl in range(min(OCT, m_out - g * OCT)):
                        y.flat[nb * m_out + g * OCT + pl] = tile[dsl.thread_id(), 2 * P * OCT + pl] * pinv
            else:
                for o in range(min(OCT, m_out - g * OCT)):
                    at = (nb * m_out + g * OCT + o) * ohw + q0
                    if add_res == 1:
                        for px in range(first, npix):
                            v = tile[dsl.thread_id(), px * OCT + o] + res.flat[at + px]
                            y.flat[at + px] = activation(v, act, act_lo, act_hi)
                    elif first == 0 and npix == 2 * P:  # a whole pair item: the copy unrolled
                        for px2 in dsl.static_range(2 * P):
                            y.flat[at + px2] = tile.flat[at_t + px2 * OCT + o]
                    else:
                        for px in range(first, npix):
                            y.flat[at + px] = tile.flat[at_t + px * OCT + o]
        t += 1
        qw += tp
        while qw >= out_w:
            qw -= out_w
            qh += 1
        if t == row_tiles:
            t = 0
            qh = 0
            qw = 0
            orow += 1
            if orow == rows:
                orow = 0
                nb += 1
                if nb == n_img:
                    nb = 0
                    g += 1


def pointwise_supported(x, w, group: int, kernel, strides, dilations, pads, auto_pad: str) -> bool:
    """Shapes this kernel takes: f32, one group, 2-D images, a 1×1 window without padding
    (any stride; dilations do not matter for one tap)."""
    return (x.dtype == dsl.f32 and group == 1 and x.ndim == 4 and w is not None and w.ndim == 4
            and tuple(kernel) == (1, 1) and not any(pads) and auto_pad in ("NOTSET", "VALID"))


def launch_conv_pointwise(impl, x, w, bias, y, res, strides, blocked: bool, backend, act: int, lo: float,
                          hi: float, cfg: DirectConfig = None, rows: bool = True, row_shape: tuple = None,
                          pooled: bool = False) -> None:
    """Run ``impl`` (conv_pointwise, or a model's recorder of it) on 4-D arrays: x (N, C, H, W)
    plain, or its NCHWc16 array (N, C/16, H, W, 16) when ``blocked``; y and res are NCHWc16 when
    y is 5-D, else plain.  ``w`` is (M, C, 1, 1).  Plain x and y with stride 1 run the
    pixel-vector tile (``run_rows``) unless ``rows`` is False.  ``pooled``: y is the plain
    (N, M, 1, 1) global average of the activated convolution, which never goes to memory
    (FusedConvGlobalPool, ops/conv_global_pool.py; no ``res``)."""
    cfg = cfg or pointwise_config(backend or "numba")
    rr, rnv = row_tile(backend or "numba") if row_shape is None else row_shape
    if cfg.OCT % rr:
        raise ValueError(f"conv_pointwise pixel-vector tile of {rr} output channels: it must divide the "
                         f"{cfg.OCT} channels of a packed weight group ({cfg})")
    if cfg.P * cfg.OCT > SCRATCH or rr * rnv * cfg.V > SCRATCH or (pooled and (2 * cfg.P + 1) * cfg.OCT > SCRATCH):
        raise ValueError(f"conv_pointwise tile {cfg} needs more than {SCRATCH} floats of scratch per thread")
    for name, a in (("x", x), ("w", w), ("y", y), ("B", bias), ("Z", res)):
        if a is not None and a.dtype != np.float32:
            raise ValueError(f"conv_pointwise computes f32; {name} is {a.dtype} (f16, bf16 and f64 run the GEMM "
                             f"or conv_nchw kernels)")
    if w.ndim != 4 or w.shape[2:] != (1, 1):
        raise ValueError(f"conv_pointwise takes 1×1 weights (M, C, 1, 1), got {tuple(w.shape)}")
    m, c = w.shape[:2]
    channels = x.shape[1] * BLOCK if blocked else x.shape[1]
    if c > channels or (not blocked and c != channels):
        raise ValueError(f"conv_pointwise takes one group: weights {tuple(w.shape)} need C = input channels, "
                         f"the input has {channels if not blocked else f'up to {channels}'} channels")
    blocked_out = y.ndim == 5
    n, h, wd = x.shape[0], x.shape[2], x.shape[3]
    oh, ow = ((h - 1) // strides[0] + 1, (wd - 1) // strides[1] + 1) if pooled else (y.shape[2], y.shape[3])
    if pooled and (res is not None or y.shape != (n, m, 1, 1)):
        raise ValueError(f"conv_pointwise pooled output must be plain ({n}, {m}, 1, 1) without a residual, "
                         f"got {tuple(y.shape)}{' and a residual' if res is not None else ''}")
    if oh != (h - 1) // strides[0] + 1 or ow != (wd - 1) // strides[1] + 1:
        raise ValueError(f"conv_pointwise output {oh}x{ow} does not match input {h}x{wd} with strides "
                         f"{tuple(strides)}")
    strided = tuple(strides) != (1, 1)
    # PAIRS is a const: the gather launch passes the convolution's, or it compiles a second specialization
    pairs = int(2 * cfg.P * cfg.OCT <= SCRATCH and register_tiles.fits(2 * cfg.P * cfg.NV, cfg.NV, backend or "numba"))
    pair = pair_mode(blocked, strided, oh * ow, m, cfg, pairs)
    # a plain x read in place by pair items beat the gather and NCHWc16 pairs (one core, AVX-512,
    # NCHWc16 y: ResNet's 64>256 56x56 0.91x, 1024>256 14x14 0.78x)
    plain_gather = not blocked and c >= BLOCK and m >= GATHER_PLAIN_MIN_M and (blocked_out or strided) and not pair
    if (blocked and strided) or plain_gather:
        x = gather_pixels(impl, x, c, blocked, strides, (oh, ow), backend, (cfg, rr, rnv, pairs))
        strides, blocked = (1, 1), True
        h, wd = oh, ow
        pair = pair_mode(True, False, oh * ow, m, cfg, pairs)
    wp, bp = packed_weights(w, bias, cfg, backend)
    geom = np.zeros(GEOM, np.int64)
    # tiles run over the flattened output image; a strided one's pixels step through x by rows of
    # ow pixels (stride 1: one row of H·W consecutive pixels)
    if tuple(strides) == (1, 1):
        geom[[G_ROWS, G_COLS, G_STEP_ROW, G_STEP_COL, G_OUT_W]] = (1, oh * ow, 0, 1, oh * ow)
    else:
        geom[[G_ROWS, G_COLS, G_STEP_ROW, G_STEP_COL, G_OUT_W]] = (1, oh * ow, strides[0] * wd, strides[1], ow)
    geom[[G_N, G_C, G_M, G_BLOCKED_OUT]] = (n, c, m, int(blocked_out))
    if blocked:  # x[n, c // 16, h, w, c % 16]
        geom[[G_SXN, G_SXB, G_SXC, G_SXP]] = (x.shape[1] * h * wd * BLOCK, h * wd * BLOCK, 1, BLOCK)
    else:
        geom[[G_SXN, G_SXB, G_SXC, G_SXP]] = (c * h * wd, BLOCK * h * wd, h * wd, 1)
    flat_res = np.zeros(1, np.float32) if res is None else res.reshape(-1)
    ocg = oc_groups(m, cfg.OCT, blocked_out)
    geom[G_PAIR] = pair
    tp = cfg.P * (2 if geom[G_PAIR] else 1)
    items = ocg * n * geom[G_ROWS] * -(-geom[G_COLS] // tp)
    item_fmas = c * tp * cfg.NV
    # pixel-vector tile: measured (benchmarks/RESULTS.md, CPU time) 10-20 % faster than the
    # channel-vector tile on plain tensors with up to 128 input channels (56x56 and 28x28 layers)
    # and 10-50 % slower with more (each input channel's 48 pixels are another row of x); the
    # tile's shape follows the target's register count (``row_tile``)
    if rows and not pooled and not blocked and not blocked_out and tuple(strides) == (1, 1) \
            and oh * ow >= rnv * cfg.V and c <= ROWS_MAX_C:
        geom[G_ROWS_TILE] = 1
        items = -(-m // rr) * n * -(-(oh * ow) // (rnv * cfg.V))
        item_fmas = c * rr * rnv
    # numba: few teams, a worker's start cost as much as 2-3 items of a 16-channel layer;
    # OpenCL: many work-groups, which PoCL hands to its threads as they free up
    grid = work_split.worker_grid(int(items), int(item_fmas), THREADS, "numba") \
        if (backend or "numba") == "numba" else balanced_grid(int(items))
    if pooled:
        geom[G_BLOCKED_OUT] = POOLED
    impl(x.reshape(-1), wp, bp, flat_res, y.reshape(-1), geom, add_res=int(res is not None), act=act,
         act_lo=float(lo), act_hi=float(hi), pf=prefetch_mode(c, m), V=cfg.V, NV=cfg.NV, P=cfg.P, RR=rr, RNV=rnv,
         PAIRS=pairs, backend=backend, grid=grid)


def pair_mode(blocked: bool, strided: bool, pixels: int, m: int, cfg: DirectConfig, pairs: int) -> int:
    """``geom[G_PAIR]``: items of 2P pixels at constant offsets from one base (``pairs``: the
    target's registers hold 2P·NV accumulators) on a stride-1 image of 2P pixels or more, NCHWc16
    (PAIR_BLOCKED) or plain (PAIR_PLAIN, which has no one-vector variant: not with a last group of
    at most V channels); else 0."""
    if strided or pixels < 2 * cfg.P or not pairs:
        return 0
    if blocked:
        return PAIR_BLOCKED
    return PAIR_PLAIN if m % cfg.OCT == 0 or m % cfg.OCT > cfg.V else 0


def gather_pixels(impl, x, c: int, blocked: bool, strides, out_hw, backend, tile) -> np.ndarray:
    """The pixels a 1×1 convolution reads, copied by ``impl``'s gather launch into a new NCHWc16
    image of the output's size (N, C/16, OH, OW, 16), which the tiles then read at stride 1
    (oneDNN's "reduce to unit stride").  Read in place, a strided NCHWc16 x (every s-th pixel of
    every s-th row) ran ResNet-50's projections at 40-55 GFLOP/s against 70-75 at stride 1 (one
    core, AVX2): the broadcasts' lines were half used and out of the prefetchers' reach; a
    plain x (each pixel's channels a row apart) ran ResNet's 64→256 projection 1.4x slower than
    NCHWc16.  The copy is one pass over the pixels read."""
    cfg, rr, rnv, pairs = tile
    n, h, wd = x.shape[0], x.shape[2], x.shape[3]
    cb = x.shape[1] if blocked else -(-c // BLOCK)
    oh, ow = out_hw
    buf = line_aligned(n * cb * oh * ow * BLOCK)
    geom = np.zeros(GEOM, np.int64)
    geom[[G_GATHER, G_N, G_C, G_COLS, G_OUT_W, G_STEP_ROW, G_STEP_COL]] = \
        (1, n, cb * BLOCK if blocked else c, oh * ow, ow, strides[0] * wd, strides[1])
    if blocked:  # x[n, c // 16, h, w, c % 16]
        geom[[G_SXN, G_SXB, G_SXC, G_SXP]] = (cb * h * wd * BLOCK, h * wd * BLOCK, 1, BLOCK)
    else:
        geom[[G_SXN, G_SXB, G_SXC, G_SXP]] = (c * h * wd, BLOCK * h * wd, h * wd, 1)
    none = np.zeros(1, np.float32)
    rows = n * cb * oh
    impl(x.reshape(-1), none, none, none, buf, geom, add_res=0, act=0, act_lo=0.0, act_hi=0.0, pf=0, V=cfg.V,
         NV=cfg.NV, P=cfg.P, RR=rr, RNV=rnv, PAIRS=pairs, backend=backend, grid=max(1, min(balanced_grid(rows), rows // 8)))
    return buf.reshape(n, cb, oh, ow, BLOCK)
