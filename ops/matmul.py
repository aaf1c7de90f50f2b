"""Matrix products: MatMul (numpy batch broadcasting), Gemm (alpha, beta, transA,
transB, broadcast C) and FullyConnected (x·wᵀ + b, w: units × inputs, com.opdsl).

One kernel, ``gemm_kernel``, serves all three and every dtype: it reads A and B
through strides, so transposes cost nothing, and a size-1 batch axis of A or B is
broadcast.  Each work item computes a 4×4 block of outputs in sixteen accumulators
(every element loaded feeds four multiply-adds); items are split evenly across every
thread of a grid of teams sized to the job (``grid_for``).  ``alpha``/``beta`` have
the data's dtype, so integer products stay exact (MatMul passes 1 and 1 with a zero C).
Float products with fewer than 8 rows (batch-1 inference) take ops/gemv.py's SIMD
matrix-vector kernel instead, big ones ops/gemm_packed.py's packed kernel.
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

import dsl
from dsl import In, Out, f16, bf16, f32, f64, i32, i64, u32, u64
from dsl.onnx.lower import names, register
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import broadcast_shape, collapse_broadcast, require_dtype, same_dtype
from ops.gemm_packed import PACKED_TYPES, gemm_packed, packed_gemm, worth_packing
from ops.gemv import gemv_kernel, worth_gemv

T = dsl.TypeVar("T")

MATMUL_TYPES = (f16, bf16, f32, f64, i32, i64, u32, u64)
TILE = 4  # a work item is a TILE × TILE block of the output
MACS_PER_TEAM = 1 << 16  # multiply-adds that justify one more team in the grid


def grid_for(macs: int, most: int = 64) -> int:
    """Teams to launch for a job of ``macs`` multiply-adds: small jobs stay one team (no
    launch overhead), big ones spread over many (OpenCL work-groups, numba prange)."""
    return max(1, min(most, macs // MACS_PER_TEAM))


@dsl.kernel
def gemm_kernel(a: In[T, 3], b: In[T, 3], c: In[T, 2], y: Out[T, 3],
                trans_a: i32, trans_b: i32, alpha: T, beta: T):
    """y[t] = alpha·A[t]·B[t] + beta·C with A = a[t] or a[t]ᵀ, B likewise; a size-1
    batch of a or b and size-1 axes of c are broadcast.

    A work item is a 4×4 tile of y: per k, four loads of A and four of B feed sixteen
    multiply-adds.  Rows and columns past the edge are clamped for loading and not stored."""
    m = y.shape[1]
    n = y.shape[2]
    kd = a.shape[1] if trans_a == 1 else a.shape[2]
    # element strides of A(i, k) and B(k, j) inside one batch entry
    sai = 1 if trans_a == 1 else a.shape[2]
    sak = a.shape[2] if trans_a == 1 else 1
    sbk = 1 if trans_b == 1 else b.shape[2]
    sbj = b.shape[2] if trans_b == 1 else 1
    sab = a.shape[1] * a.shape[2] if a.shape[0] > 1 else 0
    sbb = b.shape[1] * b.shape[2] if b.shape[0] > 1 else 0
    sci = c.shape[1] if c.shape[0] > 1 else 0
    scj = 1 if c.shape[1] > 1 else 0
    row_blocks = (m + TILE - 1) // TILE
    col_blocks = (n + TILE - 1) // TILE
    # work items are shared by every thread of every team of the grid
    items = y.shape[0] * row_blocks * col_blocks
    lo, hi = dsl.split(items, grid=True)
    for item in range(lo, hi):
        j0 = (item % col_blocks) * TILE
        r = item // col_blocks
        i0 = (r % row_blocks) * TILE
        t = r // row_blocks
        pa0 = t * sab + i0 * sai
        pa1 = t * sab + min(i0 + 1, m - 1) * sai
        pa2 = t * sab + min(i0 + 2, m - 1) * sai
        pa3 = t * sab + min(i0 + 3, m - 1) * sai
        pb0 = t * sbb + j0 * sbj
        pb1 = t * sbb + min(j0 + 1, n - 1) * sbj
        pb2 = t * sbb + min(j0 + 2, n - 1) * sbj
        pb3 = t * sbb + min(j0 + 3, n - 1) * sbj
        c00 = 0
        c01 = 0
        c02 = 0
        c03 = 0
        c10 = 0
        c11 = 0
        c12 = 0
        c13 = 0
        c20 = 0
        c21 = 0
        c22 = 0
        c23 = 0
        c30 = 0
        c31 = 0
        c32 = 0
        c33 = 0
        for k in range(kd):
            a0 = a.flat[pa0 + k * sak]
            a1 = a.flat[pa1 + k * sak]
            a2 = a.flat[pa2 + k * sak]
            a3 = a.flat[pa3 + k * sak]
            b0 = b.flat[pb0 + k * sbk]
            b1 = b.flat[pb1 + k * sbk]
            b2 = b.flat[pb2 + k * sbk]
            b3 = b.flat[pb3 + k * sbk]
            c00 += a0 * b0
            c01 += a0 * b1
            c02 += a0 * b2
            c03 += a0 * b3
            c10 += a1 * b0
            c11 += a1 * b1
            c12 += a1 * b2
            c13 += a1 * b3
            c20 += a2 * b0
            c21 += a2 * b1
            c22 += a2 * b2
            c23 += a2 * b3
            c30 += a3 * b0
            c31 += a3 * b1
            c32 += a3 * b2
            c33 += a3 * b3
        cols = min(TILE, n - j0)
        po = (t * m + i0) * n + j0
        pc = i0 * sci + j0 * scj
        y.flat[po] = alpha * c00 + beta * c.flat[pc]
        if cols > 1:
            y.flat[po + 1] = alpha * c01 + beta * c.flat[pc + scj]
        if cols > 2:
            y.flat[po + 2] = alpha * c02 + beta * c.flat[pc + 2 * scj]
        if cols > 3:
            y.flat[po + 3] = alpha * c03 + beta * c.flat[pc + 3 * scj]
        if i0 + 1 < m:
            po += n
            pc += sci
            y.flat[po] = alpha * c10 + beta * c.flat[pc]
            if cols > 1:
                y.flat[po + 1] = alpha * c11 + beta * c.flat[pc + scj]
            if cols > 2:
                y.flat[po + 2] = alpha * c12 + beta * c.flat[pc + 2 * scj]
            if cols > 3:
                y.flat[po + 3] = alpha * c13 + beta * c.flat[pc + 3 * scj]
        if i0 + 2 < m:
            po += n
            pc += sci
            y.flat[po] = alpha * c20 + beta * c.flat[pc]
            if cols > 1:
                y.flat[po + 1] = alpha * c21 + beta * c.flat[pc + scj]
            if cols > 2:
                y.flat[po + 2] = alpha * c22 + beta * c.flat[pc + 2 * scj]
            if cols > 3:
                y.flat[po + 3] = alpha * c23 + beta * c.flat[pc + 3 * scj]
        if i0 + 3 < m:
            po += n
            pc += sci
            y.flat[po] = alpha * c30 + beta * c.flat[pc]
            if cols > 1:
                y.flat[po + 1] = alpha * c31 + beta * c.flat[pc + scj]
            if cols > 2:
                y.flat[po + 2] = alpha * c32 + beta * c.flat[pc + 2 * scj]
            if cols > 3:
                y.flat[po + 3] = alpha * c33 + beta * c.flat[pc + 3 * scj]


def _gemm(impl, a, b, c, y, trans_a, trans_b, alpha, beta, backend) -> None:
    """One launch of the selected GEMM kernel: the packed one (with its workspace) or the tiled one."""
    k = a.shape[1] if trans_a else a.shape[2]
    if impl == gemm_packed:
        packed_gemm(a, b, c, y, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta, backend=backend,
                    kernel=impl)
    elif impl == gemv_kernel:
        if y.shape[2] == 1:  # y = A·b is yᵀ = bᵀ·Aᵀ: b is the one row, A's rows the transposed B's
            a, b, c, y, trans_b = (b.reshape(b.shape[0], 1, k), a, c.reshape(c.shape[1], c.shape[0]),
                                   y.reshape(y.shape[0], 1, y.shape[1]), 1)
        elif trans_a:  # A's rows are read with unit stride: a transposed A has one row
            a = a.reshape(a.shape[0], 1, k)
        impl(a, b, c, y, trans_b=trans_b, alpha=float(alpha), beta=float(beta), backend=backend,
             grid=grid_for(y.size * k))
    else:
        impl(a, b, c, y, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta, backend=backend,
             grid=grid_for(y.size * k))


def _select(dtype, m, n, k, backend, trans_a: bool = False) -> str:
    """The packed SIMD kernel where it is the fast path (``Target.packed_kernels``: numba) for float
    data big enough to pay for packing; the SIMD matrix-vector kernel for float products of few
    rows (a transposed A only with one row) or of one column (A·b, run as bᵀ·Aᵀ)."""
    if dtype in PACKED_TYPES and worth_packing(m, n, k) and dsl.target(backend).packed_kernels:
        return "packed"
    if dtype in PACKED_TYPES and (worth_gemv(m, n, k) and (not trans_a or m == 1)
                                  or n == 1 and worth_gemv(n, m, k) and not trans_a):
        return "gemv"
    return "default"


def _zero_bias(dtype) -> np.ndarray:
    return np.zeros((1, 1), dtype)


def _dim_eq(a: Optional[int], b: Optional[int]) -> bool:
    return a is None or b is None or a == b


# --------------------------------------------------------------------------- MatMul

@dsl.op("MatMul", since=1)
class MatMul(dsl.Op):
    """numpy.matmul: 1-D operands are promoted (and the added axis removed), batch
    axes broadcast."""

    kernels = {"default": gemm_kernel, "packed": gemm_packed, "gemv": gemv_kernel}

    def select(self, a, b, backend=None):
        m = a.shape[-2] if a.ndim >= 2 else 1
        n = b.shape[-1] if b.ndim >= 2 else 1
        return _select(a.dtype, m, n, a.shape[-1], backend)

    def verify(self, a, b):
        same_dtype("MatMul", a, b)
        require_dtype("MatMul", a, MATMUL_TYPES)
        if a.ndim == 0 or b.ndim == 0:
            raise VerifyError(f"MatMul needs inputs of rank >= 1, got {a} and {b}")
        ka = a.shape[-1]
        kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
        if not _dim_eq(ka, kb):
            raise VerifyError(f"MatMul inner dimensions differ: A {a} has K={ka}, B {b} has K={kb}")
        broadcast_shape(a.shape[:-2], b.shape[:-2], what="MatMul batch")

    def infer(self, a, b):
        batch = broadcast_shape(a.shape[:-2], b.shape[:-2], what="MatMul batch")
        rows = (a.shape[-2],) if a.ndim >= 2 else ()
        cols = (b.shape[-1],) if b.ndim >= 2 else ()
        return TensorSpec(batch + rows + cols, a.dtype)

    def run(self, impl, inputs, outputs, backend):
        run_matmul(impl, inputs[0], inputs[1], outputs[0], _zero_bias(outputs[0].dtype), backend, beta=0)

    plan = dsl.recorded_plan  # views and batch loops depend on shapes; a constant B is packed once


def run_matmul(impl, a, b, y, bias, backend, beta: int = 1, alpha: float = 1) -> None:
    """alpha·numpy.matmul(a, b) + beta·bias into y, one GEMM launch per batch entry; ``bias`` is
    2-D, (1, 1), (1, n), (m, 1) or (m, n), broadcast over the batch (ops/matmul_fusion.py's
    FusedMatMul passes one); ``beta`` 0 (no bias: the packed kernel then stores the sums as they
    are) or 1; ``alpha`` scales the product, not the bias (float data only)."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    n = b2.shape[-1]
    out_batch, (ab, bb) = collapse_broadcast(broadcast_shape(a2.shape[:-2], b2.shape[:-2]),
                                             a2.shape[:-2], b2.shape[:-2])
    if not out_batch:
        out_batch, ab, bb = (1,), (1,), (1,)
    av = a2.reshape(ab + (m, k))
    bv = b2.reshape(bb + (k, n))
    yv = y.reshape(out_batch + (m, n))
    lead = out_batch[:-1]
    for idx in itertools.product(*(range(d) for d in lead)):
        sa = av[tuple(i if av.shape[d] > 1 else 0 for d, i in enumerate(idx))] if idx else av
        sb = bv[tuple(i if bv.shape[d] > 1 else 0 for d, i in enumerate(idx))] if idx else bv
        sy = yv[idx] if idx else yv
        _gemm(impl, sa, sb, bias, sy, 0, 0, alpha, beta, backend)


# --------------------------------------------------------------------------- Gemm

@dsl.op("Gemm", since=7)
class Gemm(dsl.Op):
    """Y = alpha·A'·B' + beta·C, A' = Aᵀ if transA, B' = Bᵀ if transB; C broadcasts to (M, N)."""

    alpha: float = 1.0
    beta: float = 1.0
    transA: int = 0
    transB: int = 0
    kernels = {"default": gemm_kernel, "packed": gemm_packed, "gemv": gemv_kernel}

    def select(self, a, b, c=None, backend=None):
        m, n, k, _ = self._mnk(a, b)
        return _select(a.dtype, m, n, k, backend, trans_a=bool(self.transA))

    def _mnk(self, a, b):
        m, ka = (a.shape[1], a.shape[0]) if self.transA else a.shape
        kb, n = (b.shape[1], b.shape[0]) if self.transB else b.shape
        return m, n, ka, kb

    def verify(self, a, b, c=None):
        same_dtype("Gemm", a, b, c)
        require_dtype("Gemm", a, MATMUL_TYPES)
        if a.ndim != 2 or b.ndim != 2:
            raise VerifyError(f"Gemm needs 2-D A and B, got {a} and {b}")
        if a.dtype.is_int and not (float(self.alpha).is_integer() and float(self.beta).is_integer()):
            raise VerifyError(f"Gemm on {a.dtype} needs whole-number alpha and beta, got "
                              f"alpha={self.alpha}, beta={self.beta}")
        m, n, ka, kb = self._mnk(a, b)
        if not _dim_eq(ka, kb):
            raise VerifyError(f"Gemm inner dimensions differ: A' has K={ka}, B' has K={kb} "
                              f"(transA={self.transA}, transB={self.transB})")
        if c is not None:
            if c.ndim > 2:
                raise VerifyError(f"Gemm C must have rank <= 2, got {c}")
            cs = (1,) * (2 - c.ndim) + c.shape
            for got, want, axis in zip(cs, (m, n), "MN"):
                if got not in (1, None) and want is not None and got != want:
                    raise VerifyError(f"Gemm C {c} does not broadcast to (M, N) = ({m}, {n}) "
                                      f"along {axis}; each axis must be 1 or {axis}")

    def infer(self, a, b, c=None):
        m, n, _, _ = self._mnk(a, b)
        return TensorSpec((m, n), a.dtype)

    def run(self, impl, inputs, outputs, backend):
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        y = outputs[0]
        beta = self.beta
        if c is None:
            c, beta = _zero_bias(y.dtype), 0.0
        c2 = c.reshape((1,) * (2 - c.ndim) + c.shape)
        alpha = self.alpha
        if y.dtype.kind in "iu":  # verify() made sure they are whole numbers
            alpha, beta = int(alpha), int(beta)
        _gemm(impl, a.reshape((1,) + a.shape), b.reshape((1,) + b.shape), c2, y.reshape((1,) + y.shape),
              int(bool(self.transA)), int(bool(self.transB)), alpha, beta, backend)

    plan = dsl.recorded_plan  # views depend on shapes; a constant B is packed once


@dsl.op("Gemm", since=6, until=6)
class GemmV6(Gemm):
    """Gemm of opset 6 (PyTorch's old exports): C is required and broadcasts to (M, N) only
    with ``broadcast=1``; without it C must already be (M, N)."""

    broadcast: int = 0

    def verify(self, a, b, c):
        super().verify(a, b, c)
        m, n, _, _ = self._mnk(a, b)
        if not self.broadcast and any(x is not None and y is not None and x != y for x, y in zip(c.shape, (m, n))) \
                or not self.broadcast and c.ndim != 2:
            raise VerifyError(f"Gemm (opset 6) C {c} must be (M, N) = ({m}, {n}) unless broadcast=1")


# --------------------------------------------------------------------------- FullyConnected

@dsl.op("FullyConnected", domain="com.opdsl", since=1)
class FullyConnected(dsl.Op):
    """TIM-VX FullyConnected: y = x·wᵀ + b with w of shape (units, inputs); x is
    (..., inputs), y is (..., units); b (units,) is optional."""

    kernels = {"default": gemm_kernel, "packed": gemm_packed, "gemv": gemv_kernel}

    def select(self, x, w, b=None, backend=None):
        rows = 1
        for d in x.shape[:-1]:
            rows = rows * d if d is not None and rows is not None else None
        return _select(x.dtype, rows, w.shape[0], w.shape[1], backend)

    def verify(self, x, w, b=None):
        same_dtype("FullyConnected", x, w, b)
        require_dtype("FullyConnected", x, MATMUL_TYPES)
        if w.ndim != 2:
            raise VerifyError(f"FullyConnected weights must be 2-D (units, inputs), got {w}")
        if x.ndim < 1 or not _dim_eq(x.shape[-1], w.shape[1]):
            raise VerifyError(f"FullyConnected input {x} must end with inputs={w.shape[1]} "
                              f"(weights {w} are units × inputs)")
        if b is not None and (b.ndim != 1 or not _dim_eq(b.shape[0], w.shape[0])):
            raise VerifyError(f"FullyConnected bias must have shape (units,) = ({w.shape[0]},), got {b}")

    def infer(self, x, w, b=None):
        return TensorSpec(x.shape[:-1] + (w.shape[0],), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        y = outputs[0]
        units, k = w.shape
        bias = _zero_bias(y.dtype) if b is None else b.reshape(1, units)
        rows = int(np.prod(x.shape[:-1], dtype=np.int64))
        _gemm(impl, x.reshape(1, rows, k), w.reshape(1, units, k), bias, y.reshape(1, rows, units), 0, 1, 1, 1,
              backend)


# --------------------------------------------------------------------------- the standard ONNX form

@register("com.opdsl", "FullyConnected")
def _fully_connected(node, opset, emit) -> bool:
    """y = x·wᵀ + b: Gemm(transB=1) for 2-D float x, else MatMul with the transposed weights."""
    (x, w, *rest), (xs, *_), (y,) = names(node)
    b = rest[0] if rest else None
    if opset < 13:
        return False
    if xs.ndim == 2 and xs.dtype.is_float:
        emit("Gemm", [x, w] + ([b] if b else []), [y], transB=1)
        return True
    wt = emit.temp("w_t")
    emit("Transpose", [w], [wt], perm=[1, 0])
    if b is None:
        emit("MatMul", [x, wt], [y])
        return True
    xw = emit.temp("xw")
    emit("MatMul", [x, wt], [xw])
    emit("Add", [xw, b], [y])
    return True
