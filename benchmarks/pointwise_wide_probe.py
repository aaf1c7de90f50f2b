"""A measurement probe, not an op: the 1×1 convolution with MLAS's wider register tile (P pixels ×
NV·16 output channels, 64 × 6 by default: 24 accumulators, 4 weight vectors, one broadcast), NCHWc16
in and out, stride 1, bias, residual and Relu only, for ``bench_pointwise_evicted --base``:

    W_NV=4 W_P=6 W_PM=0 NUMBA_NUM_THREADS=1 python -m benchmarks.bench_pointwise_evicted --only "64>" \\
        --base benchmarks/pointwise_wide_probe.py

``W_PM=1`` runs the output-channel groups innermost.  It answered whether ops/conv_pointwise.py's
32 × 14 pair items lose ResNet's 64-input-channel layers to the tile's shape (benchmarks/RESULTS.md,
slice pw64): 64→256 + residual 0.92-0.95x the time, 64→64 0.92-1.01x; 64 × 7 spills.
"""
from __future__ import annotations

import os

import numpy as np

import dsl
from dsl import In, Out, f32, i32, i64
from ops import work_split
from ops.conv_direct import DirectConfig, packed_weights

THREADS = 4
NV_WIDE = int(os.environ.get("W_NV", 4))
P_WIDE = int(os.environ.get("W_P", 6))
PIXEL_MAJOR = int(os.environ.get("W_PM", 0))


@dsl.kernel(threads=THREADS)
def conv_pointwise(x: In[f32], w: In[f32], bias: In[f32], res: In[f32], y: Out[f32], geom: dsl.Vec[i64, 8],
                   add_res: i32, V: dsl.const[i64], NV: dsl.const[i64], P: dsl.const[i64]):
    """y = relu(Σ_ic w · x + bias [+ res]), NCHWc16; items (group, image, tile of P pixels), the
    group outermost unless geom[4]; a last tile overlaps the one before and stores its new pixels."""
    n_img = geom[0]
    c_in = geom[1]
    m_out = geom[2]
    hw = geom[3]
    pmaj = geom[4]
    OCT = V * NV
    cb = (c_in + 15) // 16
    mb = m_out // 16
    ocg = m_out // OCT
    tiles = (hw + P - 1) // P
    lo, hi = dsl.split(ocg * n_img * tiles, grid=True)
    for item in range(lo, hi):
        t = item % tiles
        nb = (item // tiles) % n_img
        g = item // tiles // n_img
        if pmaj == 1:
            g = item % ocg
            t = (item // ocg) % tiles
            nb = item // ocg // tiles
        p_first = t * P
        p0 = min(p_first, hw - P)
        xb = nb * cb * hw * 16 + p0 * 16
        wg = g * cb * 16 * OCT
        acc = dsl.local((P, NV), dsl.simd(f32, V))
        for p in dsl.static_range(P):
            for j in dsl.static_range(NV):
                acc[p, j] = dsl.splat(f32(0), V)
        for icb in range(cb):
            for ci in range(16):
                wv = dsl.local((NV,), dsl.simd(f32, V))
                for j in dsl.static_range(NV):
                    wv[j] = w.vload(wg + (icb * 16 + ci) * OCT + j * V, V)
                xc = xb + icb * hw * 16 + ci
                for p in dsl.static_range(P):
                    xv = dsl.splat(x.flat[xc + p * 16], V)
                    for j in dsl.static_range(NV):
                        acc[p, j] = dsl.fma(xv, wv[j], acc[p, j])
        for j in dsl.static_range(NV):
            bv = bias.vload(g * OCT + j * V, V)
            ya = ((nb * mb + g * NV + j) * hw + p0) * 16
            for p in dsl.static_range(P):
                if p0 + p >= p_first:
                    v = acc[p, j] + bv
                    if add_res == 1:
                        v = v + res.vload(ya + p * 16, V)
                    y.vstore(ya + p * 16, dsl.where(v <= f32(0), f32(0), v))


def launch_conv_pointwise(impl, x, w, bias, y, res, strides, blocked, backend, act, lo, hi):
    """ops/conv_pointwise.py's launch signature, for the shapes the probe takes (M a multiple of
    NV·16, Relu)."""
    if not (blocked and y.ndim == 5 and tuple(strides) == (1, 1) and act == 1):
        raise ValueError("pointwise_wide_probe takes NCHWc16 x and y, stride 1, Relu")
    cfg = DirectConfig(V=16, NV=NV_WIDE, P=P_WIDE)
    m, c = w.shape[:2]
    if m % cfg.OCT:
        raise ValueError(f"pointwise_wide_probe needs M a multiple of {cfg.OCT}, got {m}")
    n, h, wd = x.shape[0], x.shape[2], x.shape[3]
    wp, bp = packed_weights(w, bias, cfg, backend)
    geom = np.zeros(8, np.int64)
    geom[:5] = (n, c, m, h * wd, PIXEL_MAJOR)
    items = (m // cfg.OCT) * n * -(-(h * wd) // cfg.P)
    grid = work_split.worker_grid(int(items), int(c * cfg.P * cfg.NV), THREADS, "numba")
    flat_res = np.zeros(1, np.float32) if res is None else res.reshape(-1)
    impl(x.reshape(-1), wp, bp, flat_res, y.reshape(-1), geom, add_res=int(res is not None), V=16, NV=cfg.NV,
         P=cfg.P, backend=backend, grid=grid)
