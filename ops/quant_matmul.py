"""Integer and quantized matrix products: MatMulInteger, QLinearMatMul (ONNX) and
DynamicQuantizeLinear, which produces the u8 input such products take.

One kernel serves both products: it accumulates (a - a_zp)·(b - b_zp) exactly in i32 over
an 8-wide block of output columns held in registers, then either stores the i32 sums
(MatMulInteger) or requantizes them, y = saturate(rint(sum · a_scale·b_scale / y_scale) +
y_zp), with the scale product rounded to f32 first and the rest in f64, as onnx's reference
does.  Zero points and scales are per tensor, per row of ``a`` or per column of ``b``; the
run() side hands them over as (batch, M, 1) and (batch, 1, N) views.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import dsl
from dsl import In, Out, f32, f64, i32, u8, i8
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import broadcast_shape
from ops.conv_int8_direct import ARITHMETIC
from ops.gemm_int8 import FLOAT_OUT, qgemm_int8, qgemm_packed, saturating_pairs_pay, worth_packing
from ops.gemm_int8_amx import amx_usable, fits as amx_fits, qgemm_amx, qgemm_int8_amx
from ops.quant import constant_quant, round_half_even

A = dsl.TypeVar("A")
B = dsl.TypeVar("B")
Y = dsl.TypeVar("Y")
S = dsl.TypeVar("S")

NB = 8            # output columns accumulated together
DQ_LANES = 16     # DynamicQuantizeLinear's vectors
INT8 = (i8, u8)


@dsl.kernel
def qgemm_kernel(a: In[A, 3], b: In[B, 3], a_zp: In[A, 3], b_zp: In[B, 3], a_scale: In[S, 3],
                 b_scale: In[S, 3], bias: In[S, 3], y_scale: In[S, 1], y_zp: In[Y, 1], y: Out[Y, 3],
                 qmin: f64, qmax: f64, MODE: dsl.const[dsl.i64]):
    """y[t, m, n] = Σ_k (a[t,m,k] - a_zp[t,m]) (b[t,k,n] - b_zp[t,n]) (``MODE`` 0), requantized
    (1), or as f32: f32(sum)·f32(a_scale·b_scale) + bias[t, n] (``FLOAT_OUT``); a constant, so
    each variant compiles its own epilogue only.
    Operands, zero points, scales and the bias broadcast along their size-1 axes."""
    m_rows = y.shape[1]
    n_cols = y.shape[2]
    kk = a.shape[2]
    blocks = (n_cols + NB - 1) // NB
    lo, hi = dsl.split(y.shape[0] * m_rows * blocks)
    for w in range(lo, hi):
        row = w // blocks
        n0 = (w - row * blocks) * NB
        t = row // m_rows
        m = row - t * m_rows
        pa = (t if a.shape[0] > 1 else 0) * m_rows * kk + m * kk
        pb = (t if b.shape[0] > 1 else 0) * kk * n_cols
        za = i32(a_zp.flat[(t if a_zp.shape[0] > 1 else 0) * a_zp.shape[1] + (m if a_zp.shape[1] > 1 else 0)])
        pzb = (t if b_zp.shape[0] > 1 else 0) * b_zp.shape[2]
        acc = dsl.local((NB,), i32)
        zb = dsl.local((NB,), i32)
        for j in dsl.static_range(NB):
            if n0 + j < n_cols:
                zb[j] = i32(b_zp.flat[pzb + (n0 + j if b_zp.shape[2] > 1 else 0)])
        for k in range(kk):
            av = i32(a.flat[pa + k]) - za
            row_b = pb + k * n_cols + n0
            for j in dsl.static_range(NB):
                if n0 + j < n_cols:
                    acc[j] += av * (i32(b.flat[row_b + j]) - zb[j])
        py = row * n_cols + n0
        if MODE == 1:
            sa = a_scale.flat[(t if a_scale.shape[0] > 1 else 0) * a_scale.shape[1]
                              + (m if a_scale.shape[1] > 1 else 0)]
            psb = (t if b_scale.shape[0] > 1 else 0) * b_scale.shape[2]
            for j in dsl.static_range(NB):
                if n0 + j < n_cols:
                    sb = b_scale.flat[psb + (n0 + j if b_scale.shape[2] > 1 else 0)]
                    mult = f32(f32(sa * sb) / y_scale.flat[0])
                    q = round_half_even(f64(acc[j]) * f64(mult)) + f64(y_zp.flat[0])
                    y.flat[py + j] = min(max(q, qmin), qmax)
        elif MODE == FLOAT_OUT:
            sa = a_scale.flat[(t if a_scale.shape[0] > 1 else 0) * a_scale.shape[1]
                              + (m if a_scale.shape[1] > 1 else 0)]
            psb = (t if b_scale.shape[0] > 1 else 0) * b_scale.shape[2]
            pc = (t if bias.shape[0] > 1 else 0) * bias.shape[2]
            for j in dsl.static_range(NB):
                if n0 + j < n_cols:
                    sb = b_scale.flat[psb + (n0 + j if b_scale.shape[2] > 1 else 0)]
                    y.flat[py + j] = f32(acc[j]) * f32(sa * sb) + bias.flat[pc + (n0 + j if bias.shape[2] > 1 else 0)]
        else:
            for j in dsl.static_range(NB):
                if n0 + j < n_cols:
                    y.flat[py + j] = acc[j]


@dsl.kernel(threads=1)  # its vectors take 0.17 ms on 256×1024; a team's barrier costs more on a busy CPU
def dynamic_quantize_kernel(x: In[f32], y: Out[u8], y_scale: Out[f32, 1], y_zp: Out[u8, 1]):
    """u8 quantization with the range of x (widened to include 0) found by the team first; both
    passes go by vectors of DQ_LANES (a lane-by-lane pass cost 0.58 ms on 256×1024, 1/6 of the
    MatMulInteger after it), the tail lane by lane."""
    part = dsl.scratch((2, 64), f32)
    lo, hi = dsl.split(x.size)
    body = lo + (hi - lo) // DQ_LANES * DQ_LANES
    vlo = dsl.splat(f32(0), DQ_LANES)
    vhi = dsl.splat(f32(0), DQ_LANES)
    for i in range(lo, body, DQ_LANES):
        lanes = x.vload(i, DQ_LANES)
        vlo = min(vlo, lanes)
        vhi = max(vhi, lanes)
    vmin = dsl.reduce_min(vlo)
    vmax = dsl.reduce_max(vhi)
    for i in range(body, hi):
        v = x.flat[i]
        vmin = min(vmin, v)
        vmax = max(vmax, v)
    part[0, dsl.thread_id()] = vmin
    part[1, dsl.thread_id()] = vmax
    dsl.sync()
    for t in range(dsl.num_threads()):
        vmin = min(vmin, part[0, t])
        vmax = max(vmax, part[1, t])
    scale = f32(1) / f32(255)
    if vmax != vmin:
        scale = (vmax - vmin) / f32(255)
    zp = min(max(f32(0) - vmin / scale, f32(0)), f32(255))
    zpi = round_half_even(zp)
    if dsl.thread_id() == 0:
        y_scale.flat[0] = scale
        y_zp.flat[0] = zpi
    for i in range(lo, body, DQ_LANES):
        # dsl.quant's f32 steps written out (its interpreter form takes scalars)
        y.vstore(i, dsl.clamp(dsl.rint(x.vload(i, DQ_LANES) / scale) + f32(zpi), f32(0), f32(255)))
    for i in range(body, hi):
        y.flat[i] = dsl.quant(x.flat[i], scale, zpi, u8)


# --------------------------------------------------------------------------- run-side helpers

def _batch_views(a: np.ndarray, b: np.ndarray):
    """(batch, M, K) and (batch, K, N) views of a and b (a 1-D a is a row, a 1-D b a column),
    batch 1 where an operand has no batch axes to broadcast."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    full = int(np.prod(batch, dtype=np.int64))

    def flat(x):
        n = int(np.prod(x.shape[:-2], dtype=np.int64))
        if n in (1, full):
            return x.reshape((n,) + x.shape[-2:])
        return np.ascontiguousarray(np.broadcast_to(x, batch + x.shape[-2:])).reshape((full,) + x.shape[-2:])
    return flat(a2), flat(b2), full


def _param_view(p: Optional[np.ndarray], operand: np.ndarray, per_row: bool, dtype) -> np.ndarray:
    """A zero point or scale as a (batch|1, M|1, 1) view (per row of a) or (batch|1, 1, N|1)
    (per column of b); absent -> 0."""
    if p is None:
        return np.zeros((1, 1, 1), dtype)
    p = np.ascontiguousarray(p)
    if p.size == 1:
        return p.reshape(1, 1, 1)
    if p.ndim == 1:  # an M-vector for a (per row), an N-vector for b (per column)
        return p.reshape((1, -1, 1) if per_row else (1, 1, -1))
    return p.reshape((-1,) + ((p.shape[-2], 1) if per_row else (1, p.shape[-1])))


def _matmul_shape(op: str, a: TensorSpec, b: TensorSpec):
    if a.ndim < 1 or b.ndim < 1:
        raise VerifyError(f"{op} inputs must have rank >= 1, got {a} and {b}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka is not None and kb is not None and ka != kb:
        raise VerifyError(f"{op} inner dimensions differ: {a} has K={ka}, {b} has K={kb}")
    if a.ndim == 1 and b.ndim == 1:
        return ()
    if a.ndim == 1:
        return tuple(b.shape[:-2]) + (b.shape[-1],)
    if b.ndim == 1:
        return tuple(a.shape[:-1])
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2], what=f"{op} batch")
    return tuple(batch) + (a.shape[-2], b.shape[-1])


def _check_param(op: str, name: str, p: Optional[TensorSpec], operand: TensorSpec, per_row: bool,
                 dtype=None) -> None:
    if p is None:
        return
    if dtype is not None and p.dtype != dtype:
        raise VerifyError(f"{op} {name} must have dtype {dtype} (its input's), got {p}")
    if p.size == 1:
        return
    axis_len = operand.shape[-2] if per_row else operand.shape[-1]
    what = "per row (M entries)" if per_row else "per column (N entries)"
    if p.ndim == 1 and operand.ndim >= 2:
        if axis_len is None or p.shape[0] in (None, axis_len):
            return
    elif p.ndim == operand.ndim and operand.ndim >= 2:
        return
    raise VerifyError(f"{op} {name} {p} must be a scalar or {what} of {operand}")


def packed_ok(a: TensorSpec, b: TensorSpec, a_zp=None, b_zp=None, a_scale=None, b_scale=None,
              backend: Optional[str] = None) -> bool:
    """Whether the packed u8×i8 GEMM (ops/gemm_int8.py) takes this product: compiled backends,
    A and B of rank >= 2, zero points per tensor, per row of A or per column of a 2-D B, f32
    scales with a per-tensor a_scale, and enough work to pay for packing."""
    if backend not in ("numba", "opencl") or a.ndim < 2 or b.ndim < 2:
        return False
    if b_zp is not None and b_zp.size != 1 and (b.ndim != 2 or b_zp.ndim != 1):
        return False
    if a_zp is not None and a_zp.size != 1 and (a.ndim != 2 or a_zp.ndim != 1):
        return False
    if a_scale is not None and (a_scale.size != 1 or a_scale.dtype != f32 or b_scale.dtype != f32):
        return False
    if b_scale is not None and b_scale.size != 1 and (b.ndim != 2 or b_scale.ndim != 1):
        return False
    return worth_packing(a.shape[-2], b.shape[-1], a.shape[-1])


def _packed_kernel(a: TensorSpec, b: TensorSpec, backend: Optional[str]) -> str:
    """"amx" (ops/gemm_int8_amx.py: matrix tiles) where the target runs them on AMX and K allows,
    else "packed" (ops/gemm_int8.py: ``dot4``)."""
    return "amx" if amx_usable(backend) and amx_fits(a.shape[-1]) else "packed"


def _run_packed(a, a_zp, b, b_zp, y, mult, y_zp, backend, kernel, arithmetic="exact", bias=None,
                a_scale=None) -> None:
    """MatMul(Integer) through ops/gemm_int8.py (or ops/gemm_int8_amx.py for ``kernel`` qgemm_amx):
    (batch, M, K) · (1|batch, K, N); ``arithmetic`` "saturating" runs the products on
    ``dsl.dot4_sat`` wherever it pays, fits or not (AMX's products are exact either way); an f32
    ``y`` receives f32(sum)·f32(a_scale·mult) + ``bias`` (per column or per tensor)."""
    av, bv, full = _batch_views(a, b)
    if av.shape[0] != full:
        av = np.ascontiguousarray(np.broadcast_to(av, (full,) + av.shape[1:]))
    if kernel == qgemm_amx:
        qgemm_int8_amx(av, bv, y.reshape(full, av.shape[1], bv.shape[2]), a_zp=a_zp, b_zp=b_zp, mult=mult,
                       bias=bias, y_zp=0 if y_zp is None else int(np.asarray(y_zp).reshape(-1)[0]), backend=backend,
                       kernel=kernel, a_scale=a_scale)
        return
    saturating = True if arithmetic == "saturating" and saturating_pairs_pay(backend) else None
    qgemm_int8(av, bv, y.reshape(full, av.shape[1], bv.shape[2]), a_zp=a_zp, b_zp=b_zp, mult=mult, bias=bias,
               y_zp=0 if y_zp is None else int(np.asarray(y_zp).reshape(-1)[0]), backend=backend, kernel=kernel,
               saturating=saturating, a_scale=a_scale)


def requant_multiplier(a_scale, b_scale, y_scale) -> np.ndarray:
    """a_scale·b_scale/y_scale in f32, per tensor or per column, as onnxruntime computes it."""
    return (np.float32(np.asarray(a_scale, np.float32).reshape(-1)[0]) * np.asarray(b_scale, np.float32).reshape(-1)
            / np.float32(np.asarray(y_scale, np.float32).reshape(-1)[0])).astype(np.float32)


def _run_qgemm(impl, inputs, y: np.ndarray, mode: int, backend: str, arithmetic: str = "exact",
               bias: Optional[np.ndarray] = None) -> None:
    """The product of ``inputs`` (QLinearMatMul's eight, None where absent) into ``y``: i32 sums
    (``mode`` 0), requantized (1) or f32 sums scaled by a_scale·b_scale plus ``bias``
    (``FLOAT_OUT``)."""
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs
    if impl == qgemm_packed or impl == qgemm_amx:
        if mode == FLOAT_OUT:  # the kernel multiplies by A's scale, read from its buffer
            _run_packed(a, a_zp, b, b_zp, y, np.asarray(b_scale, np.float32), y_zp, backend, impl, arithmetic, bias,
                        a_scale)
            return
        mult = requant_multiplier(a_scale, b_scale, y_scale) if mode == 1 else None
        _run_packed(a, a_zp, b, b_zp, y, mult, y_zp, backend, impl, arithmetic)
        return
    av, bv, full = _batch_views(a, b)
    out = y.reshape(full, av.shape[1], bv.shape[2])
    scale_dt = a_scale.dtype if a_scale is not None else np.float32
    if mode == 1:
        info = np.iinfo(y.dtype)
        qmin, qmax = float(info.min), float(info.max)
        ys = np.ascontiguousarray(y_scale).reshape(1)
        yz = np.zeros(1, y.dtype) if y_zp is None else np.ascontiguousarray(y_zp).reshape(1)
    else:
        qmin = qmax = 0.0
        ys, yz = np.ones(1, scale_dt), np.zeros(1, y.dtype)
    impl(av, bv, _param_view(a_zp, a, True, a.dtype), _param_view(b_zp, b, False, b.dtype),
         _param_view(a_scale, a, True, scale_dt).astype(scale_dt, copy=False),
         _param_view(b_scale, b, False, scale_dt).astype(scale_dt, copy=False),
         _param_view(bias, b, False, scale_dt).astype(scale_dt, copy=False),
         ys, yz, out, qmin, qmax, MODE=int(mode), backend=backend)


def _planned_when_constant(b_index: int, *positions: int):
    """``dsl.recorded_plan_when_constant(*positions)`` for a product whose ``a`` (input 0) run()
    takes as a view: C-contiguous and with the full batch.  Otherwise run() hands the kernel a
    numpy copy of ``a``, which a recorded plan would freeze (None: run() at every run)."""
    recorded = dsl.recorded_plan_when_constant(*positions)

    def plan(op, impl, inputs, outputs, backend):
        a, b = inputs[0], inputs[b_index]
        a_batch = a.shape[:-2] if a.ndim > 2 else ()
        full = np.broadcast_shapes(a_batch, b.shape[:-2] if b.ndim > 2 else ())
        if a.root[2] is not None or a_batch != full:
            return None
        return recorded(op, impl, inputs, outputs, backend)
    plan.follows_run = True
    return plan


def _check_arithmetic(op: str, arithmetic: str) -> None:
    if arithmetic not in ARITHMETIC:
        raise VerifyError(f"{op} int8_arithmetic={arithmetic!r}: accepted {' or '.join(map(repr, ARITHMETIC))}")


# --------------------------------------------------------------------------- ops

@dsl.op("MatMulInteger", since=10)
class MatMulInteger(dsl.Op):
    """numpy.matmul of i8/u8 operands minus their zero points, exact in i32."""

    kernels = {"default": qgemm_kernel, "packed": qgemm_packed, "amx": qgemm_amx}
    plan = _planned_when_constant(1, 1, 3)  # B and its zero point: packed once; a_zero_point is a view
    # "saturating": u8·i8 pairs summed in saturating i16 where that is faster (AVX2 without VNNI), as
    # onnxruntime does there; set by load_onnx / Graph.compile(int8_arithmetic=...)
    int8_arithmetic: str = "exact"

    def select(self, a, b, a_zero_point=None, b_zero_point=None, backend=None):
        if not packed_ok(a, b, a_zero_point, b_zero_point, backend=backend):
            return "default"
        return _packed_kernel(a, b, backend)

    def verify(self, a, b, a_zero_point=None, b_zero_point=None):
        for name, t in (("A", a), ("B", b)):
            if t.dtype not in INT8:
                raise VerifyError(f"MatMulInteger {name} must be int8 or uint8, got {t}")
        _matmul_shape("MatMulInteger", a, b)
        _check_param("MatMulInteger", "a_zero_point", a_zero_point, a, True, a.dtype)
        _check_param("MatMulInteger", "b_zero_point", b_zero_point, b, False, b.dtype)
        _check_arithmetic("MatMulInteger", self.int8_arithmetic)

    def infer(self, a, b, a_zero_point=None, b_zero_point=None):
        return TensorSpec(_matmul_shape("MatMulInteger", a, b), i32)

    def run(self, impl, inputs, outputs, backend):
        a, b, azp, bzp = (list(inputs) + [None, None])[:4]
        _run_qgemm(impl, [a, None, azp, b, None, bzp, None, None], outputs[0], 0, backend, self.int8_arithmetic)


@dsl.op("QLinearMatMul", since=10)
class QLinearMatMul(dsl.Op):
    """Quantized numpy.matmul: i8/u8 in, i8/u8 out, scales f32 (f16/bf16 from opset 21)."""

    kernels = {"default": qgemm_kernel, "packed": qgemm_packed, "amx": qgemm_amx}
    plan = _planned_when_constant(3, 1, 3, 4, 5, 6, 7)  # run() reads scales, B, its and y's zero points
    int8_arithmetic: str = "exact"  # as MatMulInteger's

    def select(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, backend=None):
        ok = packed_ok(a, b, a_zero_point, b_zero_point, a_scale, b_scale, backend=backend)
        return _packed_kernel(a, b, backend) if ok and y_scale.dtype == f32 else "default"

    def verify(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        for name, t in (("a", a), ("b", b), ("y_zero_point", y_zero_point)):
            if t.dtype not in INT8:
                raise VerifyError(f"QLinearMatMul {name} must be int8 or uint8, got {t}")
        scales = (a_scale, b_scale, y_scale)
        if any(s.dtype != a_scale.dtype or not s.dtype.is_float for s in scales):
            raise VerifyError("QLinearMatMul scales must share one float dtype (f32, f16, bf16), got "
                              + ", ".join(str(s) for s in scales))
        _matmul_shape("QLinearMatMul", a, b)
        _check_param("QLinearMatMul", "a_zero_point", a_zero_point, a, True, a.dtype)
        _check_param("QLinearMatMul", "a_scale", a_scale, a, True)
        _check_param("QLinearMatMul", "b_zero_point", b_zero_point, b, False, b.dtype)
        _check_param("QLinearMatMul", "b_scale", b_scale, b, False)
        if y_scale.size != 1 or y_zero_point.size != 1:
            raise VerifyError(f"QLinearMatMul y_scale and y_zero_point must be scalars, got {y_scale}, "
                              f"{y_zero_point}")
        _check_arithmetic("QLinearMatMul", self.int8_arithmetic)

    def infer(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        shape = _matmul_shape("QLinearMatMul", a, b)
        return TensorSpec(shape, y_zero_point.dtype, quant=constant_quant(
            TensorSpec(shape, y_zero_point.dtype), y_scale, y_zero_point, 0, 0, y_zero_point.dtype))

    def run(self, impl, inputs, outputs, backend):
        _run_qgemm(impl, list(inputs), outputs[0], 1, backend, self.int8_arithmetic)


@dsl.op("DynamicQuantizeLinear", since=11)
class DynamicQuantizeLinear(dsl.Op):
    """f32 -> (u8 data, f32 scale, u8 zero point) over the data's own range, 0 included."""

    kernels = {"default": dynamic_quantize_kernel}
    foldable = True
    plan = dsl.recorded_plan  # run() launches the kernel on the input and views of its outputs only

    def verify(self, x):
        if x.dtype != f32:
            raise VerifyError(f"DynamicQuantizeLinear input must be f32, got {x}")

    def infer(self, x):
        return TensorSpec(x.shape, u8), TensorSpec((), f32), TensorSpec((), u8)

    def run(self, impl, inputs, outputs, backend):
        y, scale, zp = outputs
        impl(inputs[0], y, scale.reshape(1), zp.reshape(1), backend=backend)

