"""The DSL kernels the benchmarks time, written the way a user would write them.

They live in a module of their own so the cold-compile probe (a fresh process)
compiles exactly the same source, hence the same disk-cache key, as the
in-process benchmarks.
"""
from __future__ import annotations

import dsl
from dsl import In, Out, f32, i32


@dsl.kernel                      # threads=4, the default team
def leaky_relu(x: In[f32], y: Out[f32], alpha: f32 = 0.01):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = v if v > 0 else alpha * v


# the same function as a team of one: launch overhead without the parallel region
leaky_relu_t1 = dsl.kernel(threads=1)(leaky_relu.fn)


@dsl.kernel(threads=4)
def softmax_rows(x: In[f32, 2], y: Out[f32, 2]):
    """Row softmax; each thread owns a contiguous block of rows (no sync needed).

    Three passes over a row that stays in L1 (1024 f32 = 4 KiB): max, exp and
    sum (storing the exponentials), then one multiply by 1/sum."""
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        base = r * n
        m = x.flat[base]
        for j in range(1, n):
            m = max(m, x.flat[base + j])
        s = f32(0)
        for j in range(n):
            e = dsl.exp(x.flat[base + j] - m)
            y.flat[base + j] = e
            s += e
        inv = 1.0 / s
        for j in range(n):
            y.flat[base + j] *= inv


@dsl.kernel(threads=4)
def softmax_rows_unrolled(x: In[f32, 2], y: Out[f32, 2]):
    """``softmax_rows`` with the max pass split over 8 independent running maxima.

    A single running max is a serial dependency chain the compiler may not vectorize
    (it would have to reorder a floating-point reduction); eight independent ones let
    the CPU overlap them.  The result is the same max."""
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        base = r * n
        m0 = x.flat[base]
        m1 = m0
        m2 = m0
        m3 = m0
        m4 = m0
        m5 = m0
        m6 = m0
        m7 = m0
        j = 0
        while j + 8 <= n:
            m0 = max(m0, x.flat[base + j])
            m1 = max(m1, x.flat[base + j + 1])
            m2 = max(m2, x.flat[base + j + 2])
            m3 = max(m3, x.flat[base + j + 3])
            m4 = max(m4, x.flat[base + j + 4])
            m5 = max(m5, x.flat[base + j + 5])
            m6 = max(m6, x.flat[base + j + 6])
            m7 = max(m7, x.flat[base + j + 7])
            j += 8
        m = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
        while j < n:
            m = max(m, x.flat[base + j])
            j += 1
        s = f32(0)
        for j in range(n):
            e = dsl.exp(x.flat[base + j] - m)
            y.flat[base + j] = e
            s += e
        inv = 1.0 / s
        for j in range(n):
            y.flat[base + j] *= inv


@dsl.kernel(threads=4, fastmath=True)
def softmax_rows_fast(x: In[f32, 2], y: Out[f32, 2]):
    """``softmax_rows`` as written for speed: the same three passes with ``fastmath=True``.

    fastmath lets the compiler reorder the running max and the sum (vectorized
    reductions); the numba backend then also vectorizes ``dsl.exp``."""
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        base = r * n
        m = x.flat[base]
        for j in range(1, n):
            m = max(m, x.flat[base + j])
        s = f32(0)
        for j in range(n):
            e = dsl.exp(x.flat[base + j] - m)
            y.flat[base + j] = e
            s += e
        inv = 1.0 / s
        for j in range(n):
            y.flat[base + j] *= inv


@dsl.kernel(threads=4, fastmath=True)
def softmax_rows_pipelined(x: In[f32, 2], y: Out[f32, 2]):
    """``softmax_rows_fast`` with the max pass of row r + 1 done inside the exp pass of row r.

    A row is one 4 KiB page, and the hardware prefetcher stops at page ends, so each
    max pass starts by waiting for memory.  Reading the next row while the exp
    arithmetic of this one runs hides that wait: same arithmetic, ~20% faster."""
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    m = f32(0)
    if lo < hi:
        m = x.flat[lo * n]
        for j in range(1, n):
            m = max(m, x.flat[lo * n + j])
    for r in range(lo, hi):
        base = r * n
        s = f32(0)
        m_next = m
        if r + 1 < hi:
            nxt = base + n
            m_next = x.flat[nxt]
            for j in range(n):
                e = dsl.exp(x.flat[base + j] - m)
                y.flat[base + j] = e
                s += e
                m_next = max(m_next, x.flat[nxt + j])
        else:
            for j in range(n):
                e = dsl.exp(x.flat[base + j] - m)
                y.flat[base + j] = e
                s += e
        inv = 1.0 / s
        for j in range(n):
            y.flat[base + j] *= inv
        m = m_next


@dsl.kernel(threads=1)
def softmax_row_tiles(x: In[f32, 2], y: Out[f32, 2]):
    """Row softmax as a grid of one-thread teams, one row per team (launch with grid=rows)."""
    n = x.shape[1]
    base = dsl.tile_id() * n
    m = x.flat[base]
    for j in range(1, n):
        m = max(m, x.flat[base + j])
    s = f32(0)
    for j in range(n):
        e = dsl.exp(x.flat[base + j] - m)
        y.flat[base + j] = e
        s += e
    inv = 1.0 / s
    for j in range(n):
        y.flat[base + j] *= inv


def _sin_chain(x: In[f32], y: Out[f32], iters: i32 = 64):
    """Compute-bound: ``iters`` dependent sin + FMA steps per element, almost no memory traffic."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        for k in range(iters):
            v = dsl.sin(v) * 0.75 + 0.25
        y.flat[i] = v


sin_chain_t1 = dsl.kernel(threads=1)(_sin_chain)
sin_chain_t2 = dsl.kernel(threads=2)(_sin_chain)
sin_chain_t4 = dsl.kernel(threads=4)(_sin_chain)
