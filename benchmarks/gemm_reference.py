"""A hand-written Numba GEMM: what a user writes without opdsl or BLAS.

Plain loop blocking, nothing clever: threads take 64-row blocks of C (prange); within
a block, K and N are cut into 128 x 256 tiles so the tile of B (128 KB) stays in L2, and
the innermost loop runs along row views of B and C, so LLVM vectorizes it (on 2-D
indexing ``c[i, j]`` numba's negative-index checks keep it scalar, 6x slower here).  It is the bar an opdsl kernel should clear easily.
"""
from __future__ import annotations

import functools

import numpy as np

BLOCK_M = 64
BLOCK_K = 128
BLOCK_N = 256


@functools.lru_cache(maxsize=1)
def blocked_matmul():
    """The compiled function ``f(a, b, c)``: c = a @ b for 2-D C-contiguous arrays (compiled on first use)."""
    from numba import njit, prange

    @njit(parallel=True, fastmath=True)
    def matmul(a, b, c):
        m, kd = a.shape
        n = b.shape[1]
        for ib in prange((m + BLOCK_M - 1) // BLOCK_M):
            i0 = ib * BLOCK_M
            i1 = min(i0 + BLOCK_M, m)
            for i in range(i0, i1):
                for j in range(n):
                    c[i, j] = 0
            for k0 in range(0, kd, BLOCK_K):
                k1 = min(k0 + BLOCK_K, kd)
                for j0 in range(0, n, BLOCK_N):
                    j1 = min(j0 + BLOCK_N, n)
                    for i in range(i0, i1):
                        c_row = c[i, j0:j1]
                        for k in range(k0, k1):
                            aik = a[i, k]
                            b_row = b[k, j0:j1]
                            for j in range(j1 - j0):
                                c_row[j] += aik * b_row[j]

    return matmul


def numba_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    c = np.empty((a.shape[0], b.shape[1]), a.dtype)
    blocked_matmul()(a, b, c)
    return c
