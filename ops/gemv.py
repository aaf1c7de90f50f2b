"""Matrix-vector products: the few-row GEMMs of batch-1 inference (a classifier head, a linear
layer on one token), in SIMD, for MatMul, Gemm and FullyConnected.

A product with fewer than 8 rows of A reads every weight once and does one multiply-add per
weight, so it runs at the speed B streams from memory.  ops/gemm_packed.py's packing would cost
more than the product, and ops/matmul.py's 4×4 scalar tile leaves three of its four rows empty:
light_resnet50's 2048 → 1000 head took 1.24 ms that way against onnxruntime's 0.28 ms.  Here
each work item streams a slice of B with 16-lane loads:

* **B transposed** (``trans_b``, B stored N × K, a FullyConnected or ``Gemm(transB=1)`` weight):
  y[i, j] is a dot product of two contiguous rows.  An item takes ``DOT_ROWS`` rows of Bᵀ and
  keeps one vector accumulator per row (one load of A feeds ``DOT_ROWS`` FMAs), reduced across
  lanes at the end; K's last ``K mod 16`` elements are added as scalars.
* **B as is** (K × N): an item is ``AXPY_VECS`` vectors of 16 consecutive columns; per k it
  broadcasts A[i, k] and adds it times the row segment of B.  The last, partial item runs
  vector by vector, and the last ``N mod 16`` columns as scalars.

A's rows are read with unit stride (the caller views a transposed one-row A as a row).  Items
(batch entry × column group) are split over every thread of the grid; bias (``c``, broadcast as
in Gemm) and ``alpha``/``beta`` are applied at the one store.  f16/bf16 data load as f32 lanes
and accumulate in f32."""
from __future__ import annotations

import dsl
from dsl import In, Out, f32, i32

T = dsl.TypeVar("T")

V = 16          # lanes per vector
DOT_ROWS = 4    # rows of Bᵀ per work item (B transposed)
AXPY_VECS = 4   # vectors of columns per work item (B as is)
MAX_ROWS = 8    # products with fewer rows of A than this take this kernel


def worth_gemv(m, n, k) -> bool:
    """Whether an (m × k)·(k × n) product is a matrix-vector one this kernel serves: few known
    rows, and at least one vector of columns and of the reduction."""
    return m is not None and m < MAX_ROWS and n is not None and n >= V and k is not None and k >= V


@dsl.kernel
def gemv_kernel(a: In[T, 3], b: In[T, 3], c: In[T, 2], y: Out[T, 3], trans_b: i32, alpha: f32, beta: f32):
    """y[t] = alpha·a[t]·B[t] + beta·c with B = b[t] or b[t]ᵀ (``trans_b``); a size-1 batch of
    a or b and size-1 axes of c are broadcast."""
    m = y.shape[1]
    n = y.shape[2]
    kd = a.shape[2]
    sab = a.shape[1] * kd if a.shape[0] > 1 else 0
    sbb = b.shape[1] * b.shape[2] if b.shape[0] > 1 else 0
    sci = c.shape[1] if c.shape[0] > 1 else 0
    scj = 1 if c.shape[1] > 1 else 0
    width = DOT_ROWS if trans_b == 1 else AXPY_VECS * V
    groups = (n + width - 1) // width
    kv = kd - kd % V
    lo, hi = dsl.split(y.shape[0] * groups, grid=True)
    for item in range(lo, hi):
        t = item // groups
        j0 = (item % groups) * width
        pb = t * sbb
        for i in range(m):
            pa = t * sab + i * kd
            po = (t * m + i) * n
            pc = i * sci
            if trans_b == 1:
                rows = dsl.local((DOT_ROWS,), i32)
                for r in dsl.static_range(DOT_ROWS):
                    rows[r] = min(j0 + r, n - 1)  # past the edge: a real row, not stored
                sums = dsl.local((DOT_ROWS,), dsl.simd(f32, V))
                for k in range(0, kv, V):
                    va = a.vload(pa + k, V)
                    for r in dsl.static_range(DOT_ROWS):
                        sums[r] = dsl.fma(va, b.vload(pb + rows[r] * kd + k, V), sums[r])
                for r in dsl.static_range(DOT_ROWS):
                    j = j0 + r
                    if j < n:
                        s = dsl.reduce_add(sums[r])
                        for k in range(kv, kd):
                            s += f32(a.flat[pa + k]) * f32(b.flat[pb + j * kd + k])
                        y.flat[po + j] = alpha * s + beta * f32(c.flat[pc + j * scj])
            elif j0 + AXPY_VECS * V <= n:
                cols = dsl.local((AXPY_VECS,), dsl.simd(f32, V))
                for k in range(kd):
                    s = f32(a.flat[pa + k])
                    at = pb + k * n + j0
                    for v in dsl.static_range(AXPY_VECS):
                        cols[v] = dsl.fma(dsl.splat(s, V), b.vload(at + v * V, V), cols[v])
                for v in dsl.static_range(AXPY_VECS):
                    j = j0 + v * V
                    cv = dsl.splat(f32(c.flat[pc]), V)
                    if scj == 1:
                        cv = c.vload(pc + j, V)
                    y.vstore(po + j, alpha * cols[v] + beta * cv)
            else:  # the last, partial group: whole vectors one at a time, then single columns
                j = j0
                while j + V <= n:
                    one = dsl.splat(f32(0), V)
                    for k in range(kd):
                        one = dsl.fma(dsl.splat(f32(a.flat[pa + k]), V), b.vload(pb + k * n + j, V), one)
                    cv = dsl.splat(f32(c.flat[pc]), V)
                    if scj == 1:
                        cv = c.vload(pc + j, V)
                    y.vstore(po + j, alpha * one + beta * cv)
                    j += V
                while j < n:
                    s = f32(0)
                    for k in range(kd):
                        s += f32(a.flat[pa + k]) * f32(b.flat[pb + k * n + j])
                    y.flat[po + j] = alpha * s + beta * f32(c.flat[pc + j * scj])
                    j += 1
