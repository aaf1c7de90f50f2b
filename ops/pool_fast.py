"""Fast kernels for the pools real CNNs spend time in (ops/pool.py picks them); the SIMD ones
take f32 only.

* ``global_pool_plain``: GlobalAveragePool / GlobalMaxPool on plain NCHW, where a channel's
  H·W pixels are contiguous: a work item is a channel, summed (or maxed) 16 lanes at a time,
  the channels split across the team.  The scalar ``pool_kernel`` chains one add per pixel.
* ``global_pool_blocked``: the same on NCHWc16 storage, where a pixel holds 16 channels: one
  vector add per pixel, a work item is a block of 16 channels; the 1×1 result written
  blocked or plain.
* ``max_pool2d_blocked``: 2-D MaxPool on NCHWc16 storage, 16 channels per lane vector, one
  vector load and max per window tap; the window is clipped to the image once per output.
* ``max_pool2d_rows``: 2-D MaxPool on plain rows of at most ROW pixels, any dtype: the max over
  the window's rows into a row buffer (contiguous), then the strided window max along it.

Padding channels of blocked tensors are zero and stay zero (mean and max of zeros).
"""
from __future__ import annotations

import dsl
from dsl import In, Out, f32, i32, i64

T = dsl.TypeVar("T")

LANES = 16  # NCHWc16 channels per block, and the lanes of every vector here

# codes of the global kernels (module constants fold into the kernels)
MAX = 0
AVG = 1


@dsl.kernel
def global_pool_plain(x: In[f32, 2], y: Out[f32, 1], code: i32):
    """y[r] = mean or max of row r of x (rows are N·C channels, columns their pixels)."""
    rows = x.shape[0]
    n = x.shape[1]
    full = n - n % LANES
    lo, hi = dsl.split(rows, grid=True)
    for r in range(lo, hi):
        base = r * n
        if code == AVG:
            acc = dsl.splat(f32(0), LANES, f32)
            for i in range(0, full, LANES):
                acc += x.vload(base + i, LANES)
            s = dsl.reduce_add(acc)
            for i in range(full, n):
                s += x.flat[base + i]
            y.flat[r] = s / f32(n)
        else:
            m = x.flat[base]
            if full > 0:
                vm = x.vload(base, LANES)
                for i in range(LANES, full, LANES):
                    vm = max(vm, x.vload(base + i, LANES))
                m = dsl.reduce_max(vm)
            for i in range(full, n):
                m = max(m, x.flat[base + i])
            y.flat[r] = m


@dsl.kernel
def global_pool_blocked(x: In[f32, 3], y: Out[f32], channels: i64, code: i32):
    """y[i·channels + c] = mean or max over pixels p of x[i·CB + c // 16, p, c % 16]: x is the
    NCHWc16 storage of N images (N·CB blocks of 16 channels, pixels).  ``channels`` = CB·16
    writes NCHWc16 storage; C < CB·16 writes plain (N, C), a 1×1 image's plain layout, so a
    plain reader needs no reorder after the pool (the lanes past C are not stored)."""
    blocks = x.shape[0]
    n = x.shape[1]
    cb = (channels + LANES - 1) // LANES
    lo, hi = dsl.split(blocks, grid=True)
    for b in range(lo, hi):
        base = b * n * LANES
        acc = x.vload(base, LANES)
        if code == AVG:
            for p in range(1, n):
                acc += x.vload(base + p * LANES, LANES)
            acc = acc * (f32(1) / f32(n))
        else:
            for p in range(1, n):
                acc = max(acc, x.vload(base + p * LANES, LANES))
        at = (b // cb) * channels + (b % cb) * LANES
        left = channels - (b % cb) * LANES
        if left >= LANES:
            y.vstore(at, acc)
        else:  # a plain output's last, partial block: its lanes again, one by one (a loop, not
            for e in range(left):  # 16 unrolled lane stores: those cost compile time)
                v = x.flat[base + e]
                for p in range(1, n):
                    if code == AVG:
                        v += x.flat[base + p * LANES + e]
                    else:
                        v = max(v, x.flat[base + p * LANES + e])
                if code == AVG:
                    v = v * (f32(1) / f32(n))
                y.flat[at + e] = v


@dsl.kernel
def max_pool2d_blocked(x: In[f32, 4], y: Out[f32, 4], k: dsl.Vec[i64, 2], s: dsl.Vec[i64, 2],
                       d: dsl.Vec[i64, 2], pb: dsl.Vec[i64, 2], KH: dsl.const[i64], KW: dsl.const[i64]):
    """y[b, oh, ow, :] = max over the window taps inside the image of x[b, h, w, :], window
    origin (oh·s0 - pb0, ow·s1 - pb1), taps d apart.  A work item is an output row (b, oh).
    Columns whose window lies inside the row run without clipping: the two divisions that
    clip a window cost more than its nine vector loads (squeezenet's 3×3/2 pools).  When the
    window is compiled in (``KH``, ``KW`` > 0: ``k``), rows whose window lies inside the image
    unroll its taps, loads at constant offsets: the run-time tap loops cost a few instructions
    a load (squeezenet's blocked 3×3/2 pools, best eager launch: 73 -> 33 us and 51 -> 21 us)."""
    ih_n = x.shape[1]
    iw_n = x.shape[2]
    oh_n = y.shape[1]
    ow_n = y.shape[2]
    span = (k[1] - 1) * d[1]  # a window's width past its first column
    ow_lo = min(ow_n, (pb[1] + s[1] - 1) // s[1])  # first column whose window starts inside the row
    ow_hi = max(ow_lo, min(ow_n, (iw_n - 1 - span + pb[1]) // s[1] + 1))  # past the last one ending inside
    lo, hi = dsl.split(y.shape[0] * oh_n, grid=True)
    for row in range(lo, hi):
        oh = row % oh_n
        b = row // oh_n
        h0 = oh * s[0] - pb[0]
        kh_lo = max(0, (d[0] - 1 - h0) // d[0])  # first tap row inside the image
        kh_hi = min(k[0], (ih_n - h0 + d[0] - 1) // d[0])   # past the last one
        top = ((b * ih_n) + h0 + kh_lo * d[0]) * iw_n
        out = (b * oh_n + oh) * ow_n
        if KH > 0 and kh_lo == 0 and kh_hi == KH:  # the whole window inside: taps unrolled
            row_step = d[0] * iw_n * LANES
            col_step = d[1] * LANES
            for ow in range(ow_lo, ow_hi):
                at = (top + ow * s[1] - pb[1]) * LANES
                m = x.vload(at, LANES)
                for th in dsl.static_range(KH):
                    for tw in dsl.static_range(KW):
                        m = max(m, x.vload(at + th * row_step + tw * col_step, LANES))
                y.vstore((out + ow) * LANES, m)
        else:
            for ow in range(ow_lo, ow_hi):
                w0 = ow * s[1] - pb[1]
                m = x.vload((top + w0) * LANES, LANES)
                for kh in range(kh_lo, kh_hi):
                    src = ((b * ih_n) + h0 + kh * d[0]) * iw_n + w0
                    for kw in range(k[1]):
                        m = max(m, x.vload((src + kw * d[1]) * LANES, LANES))
                y.vstore((out + ow) * LANES, m)
        for e in range(ow_lo + ow_n - ow_hi):  # edge columns: the window clipped to the row
            ow = e if e < ow_lo else ow_hi + e - ow_lo
            w0 = ow * s[1] - pb[1]
            kw_lo = max(0, (d[1] - 1 - w0) // d[1])
            kw_hi = min(k[1], (iw_n - w0 + d[1] - 1) // d[1])
            m = x.vload((top + w0 + kw_lo * d[1]) * LANES, LANES)
            for kh in range(kh_lo, kh_hi):
                src = ((b * ih_n) + h0 + kh * d[0]) * iw_n + w0
                for kw in range(kw_lo, kw_hi):
                    m = max(m, x.vload((src + kw * d[1]) * LANES, LANES))
            y.vstore((out + ow) * LANES, m)


# the widest window max_pool2d_blocked compiles in (KH, KW): every pool of the CNNs we load; one
# compile per window shape, so bigger windows share the run-time tap loops
UNROLL_WINDOW = 3

ROW = 512  # widest image row max_pool2d_rows takes (its per-thread row buffer)
ROW_THREADS = 4  # max_pool2d_rows' team (one row buffer each)


@dsl.kernel(threads=ROW_THREADS)
def max_pool2d_rows(x: In[T, 3], y: Out[T, 3], ph0: i64, pw0: i64, K: dsl.const[i64], S: dsl.const[i64]):
    """MaxPool of plain 2-D images (rows of at most ROW pixels) in two passes per output row:
    the max over the window's image rows into a row buffer (contiguous: LANES-wide vector
    loads and maxes; LLVM left the scalar loop scalar), then the K-wide max along that buffer at
    stride S (the only strided reads, one row's worth instead of K).  Window and stride are
    compile-time constants; edge columns are clipped."""
    ih_n = x.shape[1]
    iw_n = x.shape[2]
    oh_n = y.shape[1]
    ow_n = y.shape[2]
    ow_lo = min(ow_n, (pw0 + S - 1) // S)  # first column whose window starts inside the row
    ow_hi = max(ow_lo, min(ow_n, (iw_n - K + pw0) // S + 1))  # past the last one ending inside
    full = iw_n - iw_n % LANES  # the row's whole vectors
    buf = dsl.scratch((ROW_THREADS, ROW), T)
    tid = dsl.thread_id()
    at = tid * ROW
    lo, hi = dsl.split(y.size // ow_n, grid=True)
    for row in range(lo, hi):
        oh = row % oh_n
        r = row // oh_n
        h0 = oh * S - ph0
        kh_lo = max(0, -h0)
        kh_hi = min(K, ih_n - h0)
        src = (r * ih_n + h0 + kh_lo) * iw_n
        for w in range(0, full, LANES):
            buf.vstore(at + w, x.vload(src + w, LANES))
        for w in range(full, iw_n):
            buf[tid, w] = x.flat[src + w]
        for kh in range(kh_lo + 1, kh_hi):
            src = (r * ih_n + h0 + kh) * iw_n
            for w in range(0, full, LANES):
                buf.vstore(at + w, max(buf.vload(at + w, LANES), x.vload(src + w, LANES)))
            for w in range(full, iw_n):
                buf[tid, w] = max(buf[tid, w], x.flat[src + w])
        out = row * ow_n
        for ow in range(ow_lo, ow_hi):
            px = ow * S - pw0
            m = buf[tid, px]
            for kw in dsl.static_range(1, K):
                m = max(m, buf[tid, px + kw])
            y.flat[out + ow] = m
        for e in range(ow_lo + ow_n - ow_hi):  # edge columns: the window clipped to the row
            ow = e if e < ow_lo else ow_hi + e - ow_lo
            w0 = ow * S - pw0
            m = buf[tid, max(0, w0)]
            for t in range(max(0, -w0) + 1, min(K, iw_n - w0)):
                m = max(m, buf[tid, w0 + t])
            y.flat[out + ow] = m
