"""ONNX Det (opset 11+): determinants of square matrices X (..., M, M) -> (...).

One work item per matrix: Gaussian elimination with partial pivoting on a copy (the
determinant is the product of the pivots, its sign flipped per row swap), in f64 for f64
inputs and f32 otherwise (f16/bf16 computed in f32).  A singular matrix gives 0."""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS

T = dsl.TypeVar("T")
W = dsl.TypeVar("W")


@dsl.kernel
def det_kernel(x: In[T, 3], work: Out[W, 3], y: Out[T]):
    m = x.shape[1]
    lo, hi = dsl.split(x.shape[0])
    for b in range(lo, hi):
        for i in range(m):
            for j in range(m):
                work[b, i, j] = x[b, i, j]
        d = 1.0
        for c in range(m):
            p = c
            big = abs(work[b, c, c])
            for r in range(c + 1, m):
                if abs(work[b, r, c]) > big:
                    big = abs(work[b, r, c])
                    p = r
            if big == 0:
                d = d * 0
            else:
                if p != c:
                    d = -d
                    for j in range(c, m):
                        t = work[b, c, j]
                        work[b, c, j] = work[b, p, j]
                        work[b, p, j] = t
                piv = work[b, c, c]
                d = d * piv
                for r in range(c + 1, m):
                    f = work[b, r, c] / piv
                    for j in range(c + 1, m):
                        work[b, r, j] = work[b, r, j] - f * work[b, c, j]
        y.flat[b] = d


@dsl.op("Det", since=11)
class Det(dsl.Op):
    """Determinant over the last two axes."""
    kernels = {"default": det_kernel}

    def verify(self, X):
        if X.dtype not in FLOATS:
            raise VerifyError(f"Det input 'X' has dtype {X.dtype}; accepted: {', '.join(map(str, FLOATS))}")
        if X.ndim < 2 or (X.shape[-1] is not None and X.shape[-2] is not None and X.shape[-1] != X.shape[-2]):
            raise VerifyError(f"Det input 'X' must be square matrices (..., M, M), got {X}")

    def infer(self, X):
        return TensorSpec(X.shape[:-2], X.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        m = x.shape[-1]
        batch = int(np.prod(x.shape[:-2], dtype=np.int64))
        work = np.empty((batch, m, m), np.float64 if x.dtype == np.float64 else np.float32)
        impl(x.reshape(batch, m, m), work, y.reshape(batch), backend=backend)
