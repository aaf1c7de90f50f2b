"""Normalizations: BatchNormalization (inference), Softmax, LogSoftmax, Hardmax,
LpNormalization, LayerNormalization, RMSNormalization, InstanceNormalization,
GroupNormalization and LRN.

* BatchNormalization (opset 7+): y = (x - mean[c]) / sqrt(var[c] + ε) · scale[c] + B[c].
  Only the inference form exists: ``training_mode=1`` (batch statistics, running-mean
  outputs) is refused with an error; ``momentum`` only matters in training and is ignored.
  After a Conv with constant weights the graph compiler folds it into the Conv
  (ops/conv_fusion.py); this kernel runs the rest, in plain or NCHWc16 layout.
* ``axis_kernel``: Softmax, LogSoftmax, Hardmax and LpNormalization along one axis of an
  (outer, n, inner) view; each thread takes whole lines.  Softmax subtracts the line's max.
  ``softmax_rows_kernel`` does Softmax and LogSoftmax along the last axis (attention's) with
  vectorized loops, 3-4x faster.
* ``norm_kernel``: Layer/RMS/Instance/Group normalization, rows of ``n`` contiguous elements
  normalized by their own mean and variance (two passes, in f32, f64 for f64), then scaled
  and shifted by per-element or per-channel params; each thread takes whole rows.
* ``lrn_kernel``: cross-channel local response normalization.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS, require_dtype, same_dtype
from ops.reduce import axis_view, normalize_axis

T = dsl.TypeVar("T")
BLOCK = 16  # NCHWc16 channels per block


@dsl.kernel
def batch_norm_kernel(x: In[T], scale: In[T, 1], bias: In[T, 1], mean: In[T, 1], var: In[T, 1], y: Out[T],
                      epsilon: f32, inner: i64, blocked: bool_):
    """Element i has channel (i // inner) % C, or in NCHWc16 (``blocked``; inner = H·W)
    the lane's channel of its block; padding channels are written as 0."""
    channels = scale.shape[0]
    blocks = (channels + BLOCK - 1) // BLOCK
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        c = (i // inner) % channels
        if blocked:
            c = (i // (inner * BLOCK)) % blocks * BLOCK + i % BLOCK
        if c < channels:
            a = scale.flat[c] / dsl.sqrt(var.flat[c] + epsilon)
            y.flat[i] = (x.flat[i] - mean.flat[c]) * a + bias.flat[c]
        else:
            y.flat[i] = 0


@dsl.op("BatchNormalization", since=7)
class BatchNormalization(dsl.Op):
    """ONNX BatchNormalization for inference: X (N, C, ...), scale, B, mean, var (C,)."""

    epsilon: float = 1e-5
    momentum: float = 0.9      # training only: ignored
    training_mode: int = 0     # opset 14+; 1 is refused
    spatial: int = 1           # opsets 7-8; only the per-channel form (1) exists
    formats = ("plain", "nchwc16")
    keeps_padding = True       # padding channels are written as 0
    kernels = {"default": batch_norm_kernel}

    def verify(self, x, scale, b, mean, var):
        if self.training_mode:
            raise VerifyError("BatchNormalization training_mode=1 is not supported: opdsl runs inference only "
                              "(export the model in eval mode, or set training_mode=0)")
        if self.spatial != 1:
            raise VerifyError(f"BatchNormalization spatial={self.spatial} (per-element statistics) is not "
                              "supported; accepted: spatial=1")
        same_dtype("BatchNormalization", x, scale, b, mean, var)
        require_dtype("BatchNormalization", x, FLOATS)
        if x.ndim < 2:
            raise VerifyError(f"BatchNormalization input must be (N, C, ...), got {x}")
        c = x.shape[1]
        for name, p in (("scale", scale), ("B", b), ("mean", mean), ("var", var)):
            if p.ndim != 1 or (c is not None and p.shape[0] is not None and p.shape[0] != c):
                raise VerifyError(f"BatchNormalization {name} must have shape (C,) = ({c},), got {p}")

    def infer(self, x, scale, b, mean, var):
        return x.spec.with_()

    def select_format(self, x, *params):
        fmt = "nchwc16" if x.format == "nchwc16" and x.ndim == 4 else "plain"
        return (fmt,) + ("plain",) * len(params), fmt

    def run(self, impl, inputs, outputs, backend, specs=()):
        x, y = inputs[0], outputs[0]
        blocked = _blocked(y, specs)
        inner = int(np.prod(x.shape[2:4] if blocked else x.shape[2:], dtype=np.int64))
        impl(*inputs, y, epsilon=self.epsilon, inner=inner, blocked=blocked, backend=backend)

    plan = dsl.recorded_plan  # shapes and the input's format only


def _blocked(y, specs) -> bool:
    """Whether ``y`` is NCHWc16 storage. That storage is 5-D, but so is a plain (N, C, D, H, W)
    tensor: the input's spec decides; a direct ``run`` without specs means 5-D is blocked."""
    if specs and specs[0] is not None:
        return specs[0].format == "nchwc16"
    return y.ndim == 5


@dsl.op("BatchNormalization", since=6, until=6)
class BatchNormalizationV6(BatchNormalization):
    """BatchNormalization of opset 6: ``is_test=1`` is inference (the only mode opdsl runs)."""

    is_test: int = 0

    def verify(self, x, scale, b, mean, var):
        if not self.is_test:
            raise VerifyError("BatchNormalization (opset 6) is_test=0 normalizes with the batch's own statistics "
                              "(training); opdsl runs inference only: accepted is_test=1")
        super().verify(x, scale, b, mean, var)


# =========================================================================== along one axis

S = dsl.TypeVar("S")
U = dsl.TypeVar("U")

# operation codes of axis_kernel
SOFTMAX = 0
LOGSOFTMAX = 1
HARDMAX = 2
LP1 = 3
LP2 = 4


@dsl.kernel
def axis_kernel(x: In[T, 3], y: Out[T, 3], op: i32):
    """Each line x[o, :, i] -> y[o, :, i]: softmax, log-softmax, hardmax (1 at the first max) or
    x / ||x||_p (0 where the norm is 0)."""
    n = x.shape[1]
    inner = x.shape[2]
    lo, hi = dsl.split(x.shape[0] * inner)
    for t in range(lo, hi):
        o = t // inner
        i = t - o * inner
        if op == LP1 or op == LP2:
            s = 0.0
            for r in range(n):
                v = x[o, r, i]
                if op == LP1:
                    s += abs(v)
                else:
                    s += v * v
            norm = s if op == LP1 else dsl.sqrt(s)
            for r in range(n):
                y[o, r, i] = 0 if norm == 0 else x[o, r, i] / norm
        else:
            m = x[o, 0, i]
            at = 0
            for r in range(1, n):
                v = x[o, r, i]
                if v > m or (v != v and m == m):
                    m = v
                    at = r
            if op == HARDMAX:
                for r in range(n):
                    y[o, r, i] = 1 if r == at else 0
            else:
                s = 0.0
                for r in range(n):
                    s += dsl.exp(x[o, r, i] - m)
                if op == SOFTMAX:
                    inv = 1 / s
                    for r in range(n):
                        y[o, r, i] = dsl.exp(x[o, r, i] - m) * inv
                else:
                    ls = dsl.log(s) + m
                    for r in range(n):
                        y[o, r, i] = x[o, r, i] - ls


@dsl.kernel(fastmath=True)
def softmax_rows_kernel(x: In[T, 2], y: Out[T, 2], op: i32, floor: T):
    """Softmax / log-softmax of each contiguous row (the axis is the last one, as in attention):
    one exp per element, stored and summed in the same vectorized loop (fastmath reorders the sum;
    a separate summing pass cost ~18 % of the kernel on BERT's 512 rows of 128, RESULTS.md issue 29);
    the max propagates NaN like np.maximum, so a row holding NaN is NaN as in axis_kernel.
    Differences from the max below ``floor`` (``underflow_floor``) give 0 without an exp: their
    exp would be subnormal, and each subnormal result costs a microcode assist on Intel cores
    (a causally masked row of attention ran 4x slower)."""
    n = x.shape[1]
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        m = x[r, 0]
        for c in range(1, n):
            m = max(m, x[r, c])
        s = f32(0.0)
        if op == SOFTMAX:
            for c in range(n):
                d = x[r, c] - m
                e = dsl.where(d < floor, 0.0, dsl.exp(dsl.where(d < floor, floor, d)))
                y[r, c] = e
                s += e
            inv = 1 / s
            for c in range(n):
                y[r, c] = y[r, c] * inv
        else:
            for c in range(n):
                d = x[r, c] - m
                s += dsl.where(d < floor, 0.0, dsl.exp(dsl.where(d < floor, floor, d)))
            ls = dsl.log(s) + m
            for c in range(n):
                y[r, c] = x[r, c] - ls


# e**-87.34 is f32's smallest normal number: any exp below e**-87 is (nearly) subnormal
F32_UNDERFLOW = -87.0


def underflow_floor(dtype) -> float:
    """``softmax_rows_kernel``'s floor for ``dtype``: -87 for f32, whose softmax terms below
    e**-87 (under 1.7e-38; the row's sum is at least 1) become exactly 0 instead of subnormal
    numbers, as with flush-to-zero; -inf (nothing flushed) for the other float types."""
    return F32_UNDERFLOW if np.dtype(dtype) == np.float32 else -np.inf


class _AxisOp(dsl.Op):
    code = SOFTMAX
    axis: int = -1
    coerce_2d = False  # opsets < 13: the input is seen as 2-D (axes before / from ``axis``)
    kernels = {"default": axis_kernel, "rows": softmax_rows_kernel}

    def select(self, x, backend=None):
        """Softmax and LogSoftmax of contiguous rows (the last axis, or any 2-D coercion) take
        the vectorized row kernel; the rest the general (outer, n, inner) one."""
        last = x.ndim == 0 or self.coerce_2d or normalize_axis(self.op_type, self.axis, x.ndim) == x.ndim - 1
        return "rows" if last and self.code in (SOFTMAX, LOGSOFTMAX) and "rows" in self.kernels else "default"

    def verify(self, x):
        require_dtype(self.op_type, x, FLOATS)
        normalize_axis(self.op_type, self.axis, max(x.ndim, 1))

    def infer(self, x):
        return x.spec.with_()

    def _view(self, x, impl) -> tuple:
        """The (outer, n, inner) -- (outer, n) for the row kernel -- view the kernel takes."""
        if x.ndim == 0:
            shape = (1, 1, 1)
        else:
            a = normalize_axis(self.op_type, self.axis, x.ndim)
            if self.coerce_2d:
                shape = (int(np.prod(x.shape[:a], dtype=np.int64)), int(np.prod(x.shape[a:], dtype=np.int64)), 1)
            else:
                shape = axis_view(x.shape, a)
        return shape[:2] if impl == softmax_rows_kernel else shape  # rows: inner is 1

    def run(self, impl, inputs, outputs, backend):
        if outputs[0].size == 0:
            return
        shape = self._view(inputs[0], impl)
        impl(inputs[0].reshape(shape), outputs[0].reshape(shape), op=self.code, backend=backend,
             **self._floor(impl, inputs[0]))

    def plan(self, impl, inputs, outputs, backend):
        if outputs[0].size == 0:
            return []
        shape = self._view(inputs[0], impl)
        return [dsl.Launch(impl, (inputs[0].reshape(shape), outputs[0].reshape(shape)),
                           {"op": self.code, **self._floor(impl, inputs[0])}, backend=backend)]

    @staticmethod
    def _floor(impl, x) -> dict:
        return {"floor": underflow_floor(x.dtype)} if impl == softmax_rows_kernel else {}


def _axis_family(name: str, code: int, doc: str):
    old = dsl.op(name, since=1, until=12)(type(name + "V1", (_AxisOp,), {
        "code": code, "op_type": name, "coerce_2d": True, "__annotations__": {"axis": int}, "axis": 1,
        "__doc__": f"{doc} (opsets 1-12: over the input coerced to 2-D at ``axis``)."}))
    new = dsl.op(name, since=13)(type(name, (_AxisOp,), {"code": code, "op_type": name, "__doc__": doc}))
    return new, old


Softmax, SoftmaxV1 = _axis_family("Softmax", SOFTMAX, "exp(x - max) / Σ exp(x - max) along ``axis``")
LogSoftmax, LogSoftmaxV1 = _axis_family("LogSoftmax", LOGSOFTMAX, "x - max - log Σ exp(x - max) along ``axis``")
Hardmax, HardmaxV1 = _axis_family("Hardmax", HARDMAX, "1 at the first maximum along ``axis``, else 0")


@dsl.op("LpNormalization", since=1)
class LpNormalization(_AxisOp):
    """x / ||x||_p along ``axis`` (p = 1 or 2); 0 where the norm is 0."""
    p: int = 2
    kernels = {"default": axis_kernel}  # its own op codes: not the softmax row kernel

    def verify(self, x):
        super().verify(x)
        if self.p not in (1, 2):
            raise VerifyError(f"LpNormalization p={self.p} is not supported; accepted: 1, 2")

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        shape = axis_view(x.shape, normalize_axis(self.op_type, self.axis, x.ndim)) if x.ndim else (1, 1, 1)
        impl(x.reshape(shape), outputs[0].reshape(shape), op=LP1 if self.p == 1 else LP2, backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


# =========================================================================== row statistics

@dsl.kernel
def norm_kernel(x: In[T], scale: In[S], bias: In[S], y: Out[S], mean: Out[U], inv: Out[U], n: i64,
                epsilon: f32, center: bool_, has_bias: bool_, per_element: bool_, rmod: i64, rmul: i64, block: i64):
    """Row k = x.flat[k·n : (k+1)·n] -> (x - μ) / sqrt(σ² + ε) · scale[c] (+ bias[c]); without
    ``center`` μ = 0 and σ² is the mean square (RMS).  With ``per_element`` element j uses c = j
    (Layer/RMS norm); else the row is made of blocks of ``block`` elements sharing
    c = (k % rmod)·rmul + (block number): one block per row and channel (Instance, GroupNorm 18)
    or per channel of the group (GroupNorm 21).  μ and 1/sqrt(σ² + ε) go to mean/inv."""
    rows = x.size // n
    lo, hi = dsl.split(rows)
    for k in range(lo, hi):
        base = k * n
        mu = 0.0
        if center:
            s = 0.0
            for j in range(n):
                s += x.flat[base + j]
            mu = s / f32(n)
        q = 0.0
        for j in range(n):
            d = x.flat[base + j] - mu
            q += d * d
        r = 1 / dsl.sqrt(q / f32(n) + epsilon)
        mean.flat[k] = mu
        inv.flat[k] = r
        if per_element:
            for j in range(n):
                v = (x.flat[base + j] - mu) * r * scale.flat[j]
                if has_bias:
                    v += bias.flat[j]
                y.flat[base + j] = v
        else:
            c0 = (k % rmod) * rmul
            for b in range(n // block):
                a = r * scale.flat[c0 + b]
                shift = bias.flat[c0 + b] if has_bias else 0
                p = base + b * block
                for j in range(p, p + block):
                    y.flat[j] = (x.flat[j] - mu) * a + shift


# norm_kernel compiled with fastmath: the row sums (f64 accumulators) may be reordered, so they
# vectorize; Layer/RMS normalization of a BERT layer's 128 x 256 rows 78 -> 28 us.  Numba only
# (OpenCL's fast math relaxes inf/NaN handling too).
norm_rows_kernel = dsl.kernel(fastmath=True)(norm_kernel.fn)


def _select_rows(backend) -> str:
    return "rows" if dsl.target(backend).fastmath_keeps_inf_nan else "default"


STASH = {1: dsl.f32, 11: dsl.f64, 16: dsl.bf16, 10: dsl.f16}  # ONNX element types allowed as stash_type


def _launch_norm(impl, x, scale, bias, y, mean, inv, n: int, epsilon: float, center: bool,
                 rmod: int = 1, rmul: int = 0, block: int = 0, backend=None):
    """norm_kernel over rows of ``n``; ``block`` 0: one param per element of the row."""
    has_bias = bias is not None
    if bias is None:
        bias = scale[:1]
    rows = x.size // n if n else 0
    if mean is None:
        mean = np.empty(rows, np.float32)
        inv = np.empty(rows, np.float32)
    impl(x.reshape(-1), scale.reshape(-1), bias.reshape(-1), y.reshape(-1), mean.reshape(-1), inv.reshape(-1),
         n=n, epsilon=epsilon, center=center, has_bias=has_bias, per_element=block == 0, rmod=rmod,
         rmul=rmul, block=max(block, 1),
         backend=backend)


def _check_params(what: str, params, expect, names=("scale", "B")) -> None:
    """Each present param must have ``expect`` elements (None: not known yet)."""
    for name, p in zip(names, params):
        if p is None:
            continue
        size = p.size
        if size is not None and expect is not None and size != expect:
            raise VerifyError(f"{what} {name} must have {expect} elements, got {p}")


def _broadcast_params(what: str, x, axis: int, params):
    """LayerNorm/RMSNorm params broadcast (unidirectionally) to x.shape[axis:]."""
    norm_shape = tuple(x.shape[axis:])
    for name, p in params:
        if p is None:
            continue
        tail = p.shape
        if len(tail) > len(x.shape) or any(d is not None and e is not None and d != 1 and d != e
                                           for d, e in zip(tail[::-1], x.shape[::-1])):
            raise VerifyError(f"{what} {name} {p} does not broadcast to input {x}")
        if len(tail) > len(norm_shape) and any(d not in (1, None) for d in tail[:len(tail) - len(norm_shape)]):
            raise VerifyError(f"{what} {name} {p} must broadcast to the normalized shape {norm_shape}")


def _param_array(p: Optional[np.ndarray], norm_shape) -> Optional[np.ndarray]:
    if p is None:
        return None
    if p.shape[-len(norm_shape):] == tuple(norm_shape) and p.size == int(np.prod(norm_shape, dtype=np.int64)):
        return p
    p = p.reshape(p.shape[max(0, p.ndim - len(norm_shape)):]) if p.ndim > len(norm_shape) else p
    return np.ascontiguousarray(np.broadcast_to(p, norm_shape))


@dsl.op("LayerNormalization", since=17)
class LayerNormalization(dsl.Op):
    """Normalize over axes ``axis``..rank-1; outputs Y and the Mean and InvStdDev of each row
    (shape x.shape[:axis] + 1s, dtype of ``stash_type``)."""

    axis: int = -1
    epsilon: float = 1e-5
    stash_type: int = 1
    kernels = {"default": norm_kernel, "rows": norm_rows_kernel}

    def select(self, *inputs, backend=None):
        return _select_rows(backend)
    center = True

    def verify(self, x, scale, b=None):
        require_dtype(self.op_type, x, FLOATS)
        same_dtype(self.op_type, x, scale, b)
        if self.stash_type not in STASH:
            raise VerifyError(f"{self.op_type} stash_type={self.stash_type} is not supported; accepted: "
                              f"{', '.join(f'{k} ({v})' for k, v in STASH.items())}")
        a = normalize_axis(self.op_type, self.axis, x.ndim)
        _broadcast_params(self.op_type, x, a, (("Scale", scale), ("B", b)))

    def infer(self, x, scale, b=None):
        a = normalize_axis(self.op_type, self.axis, x.ndim)
        stats = TensorSpec(tuple(x.shape[:a]) + (1,) * (x.ndim - a), STASH[self.stash_type])
        return x.spec.with_(), stats, stats

    def run(self, impl, inputs, outputs, backend):
        x, scale = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        a = normalize_axis(self.op_type, self.axis, x.ndim)
        norm_shape = x.shape[a:]
        n = int(np.prod(norm_shape, dtype=np.int64))
        y, mean, inv = outputs
        _launch_norm(impl, x, _param_array(scale, norm_shape), _param_array(b, norm_shape), y, mean, inv,
                     n, self.epsilon, True, backend=backend)

    plan = dsl.recorded_plan_when_constant(1, 2)  # a scale or bias to broadcast is copied from its values


@dsl.op("RMSNormalization", since=23)
class RMSNormalization(dsl.Op):
    """x / sqrt(mean(x²) + ε) · scale over axes ``axis``..rank-1; Y has scale's dtype."""

    axis: int = -1
    epsilon: float = 1e-5
    stash_type: int = 1
    kernels = {"default": norm_kernel, "rows": norm_rows_kernel}

    def select(self, *inputs, backend=None):
        return _select_rows(backend)

    def verify(self, x, scale):
        require_dtype(self.op_type, x, FLOATS)
        require_dtype(self.op_type, scale, FLOATS, "scale")
        if self.stash_type not in STASH:
            raise VerifyError(f"{self.op_type} stash_type={self.stash_type} is not supported; accepted: "
                              f"{', '.join(f'{k} ({v})' for k, v in STASH.items())}")
        a = normalize_axis(self.op_type, self.axis, x.ndim)
        _broadcast_params(self.op_type, x, a, (("scale", scale),))

    def infer(self, x, scale):
        return TensorSpec(x.shape, scale.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, scale = inputs
        a = normalize_axis(self.op_type, self.axis, x.ndim)
        norm_shape = x.shape[a:]
        n = int(np.prod(norm_shape, dtype=np.int64))
        _launch_norm(impl, x, _param_array(scale, norm_shape), None, outputs[0], None, None,
                     n, self.epsilon, False, backend=backend)


@dsl.op("InstanceNormalization", since=1)
class InstanceNormalization(dsl.Op):
    """Normalize each (n, c) image of X (N, C, ...) over its spatial axes; scale, B (C,)."""

    epsilon: float = 1e-5
    consumed_inputs: Optional[Tuple[int, ...]] = None  # opset 1 legacy attribute, no effect
    kernels = {"default": norm_kernel}

    def verify(self, x, scale, b):
        require_dtype(self.op_type, x, FLOATS)
        same_dtype(self.op_type, x, scale, b)
        if x.ndim < 3:
            raise VerifyError(f"{self.op_type} input must be (N, C, D1, ...), got {x}")
        _check_params(self.op_type, (scale, b), x.shape[1])

    def infer(self, x, scale, b):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        x, scale, b = inputs
        n = int(np.prod(x.shape[2:], dtype=np.int64))
        _launch_norm(impl, x, scale, b, outputs[0], None, None, n, self.epsilon, True,
                     rmod=x.shape[1], rmul=1, block=n, backend=backend)


class _GroupNorm(dsl.Op):
    num_groups: int
    epsilon: float = 1e-5
    per_channel = True
    kernels = {"default": norm_kernel}

    def verify(self, x, scale, b):
        require_dtype(self.op_type, x, FLOATS)
        same_dtype(self.op_type, x, scale, b)
        if x.ndim < 2:
            raise VerifyError(f"{self.op_type} input must be (N, C, ...), got {x}")
        g, c = self.num_groups, x.shape[1]
        if g <= 0 or (c is not None and c % g):
            raise VerifyError(f"{self.op_type} num_groups={g} must be positive and divide the {c} channels "
                              f"of input {x}")
        _check_params(self.op_type, (scale, b), c if self.per_channel else g, ("scale", "bias"))

    def infer(self, x, scale, b):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        x, scale, b = inputs
        g = self.num_groups
        cg = x.shape[1] // g
        spatial = int(np.prod(x.shape[2:], dtype=np.int64))
        if self.per_channel:
            _launch_norm(impl, x, scale, b, outputs[0], None, None, cg * spatial, self.epsilon, True,
                         rmod=g, rmul=cg, block=spatial, backend=backend)
        else:
            _launch_norm(impl, x, scale, b, outputs[0], None, None, cg * spatial, self.epsilon, True,
                         rmod=g, rmul=1, block=cg * spatial, backend=backend)


@dsl.op("GroupNormalization", since=18, until=20)
class GroupNormalizationV18(_GroupNorm):
    """Opset 18: scale and bias have one value per group (num_groups,)."""
    op_type = "GroupNormalization"
    per_channel = False


@dsl.op("GroupNormalization", since=21)
class GroupNormalization(_GroupNorm):
    """Normalize each group of C / num_groups channels of each image; scale, bias per channel (C,)."""
    stash_type: int = 1


# =========================================================================== LRN

@dsl.kernel
def lrn_kernel(x: In[T], y: Out[T], channels: i64, inner: i64, size: i64, alpha: f32, beta: f32, bias: f32,
               blocked: bool_):
    """y[n, c, i] = x / (bias + alpha / size · Σ x[n, c', i]²)^beta over the channels
    c - ⌊(size-1)/2⌋ .. c + ⌈(size-1)/2⌉ that exist; x is (N, C, inner), or NCHWc16
    (``blocked``: (N, C / 16, inner, 16); the zero padding channels add nothing to the sums)."""
    before = (size - 1) // 2
    after = size - 1 - before
    scale = alpha / f32(size)
    blocks = (channels + BLOCK - 1) // BLOCK
    lo, hi = dsl.split(x.size)
    for t in range(lo, hi):
        if blocked:
            lane = t % BLOCK
            i = (t // BLOCK) % inner
            q = t // (BLOCK * inner)
            c = (q % blocks) * BLOCK + lane
            o = q // blocks
        else:
            i = t % inner
            q = t // inner
            c = q % channels
            o = q // channels
        s = 0.0
        for k in range(max(0, c - before), min(channels, c + after + 1)):
            if blocked:
                v = x.flat[((o * blocks + k // BLOCK) * inner + i) * BLOCK + k % BLOCK]
            else:
                v = x.flat[(o * channels + k) * inner + i]
            s += v * v
        y.flat[t] = x.flat[t] / dsl.pow(bias + scale * s, beta)


@dsl.op("LRN", since=1)
class LRN(dsl.Op):
    """Local response normalization across channels of X (N, C, ...), plain or NCHWc16."""

    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0
    formats = ("plain", "nchwc16")  # keeps_padding False: 0 / bias^beta is 0, but not for bias 0
    kernels = {"default": lrn_kernel}

    def verify(self, x):
        require_dtype("LRN", x, FLOATS)
        if x.ndim < 3:
            raise VerifyError(f"LRN input must be (N, C, D1, ...), got {x}")
        if self.size < 1:
            raise VerifyError(f"LRN size must be >= 1, got {self.size}")

    def infer(self, x):
        return x.spec.with_()

    def select_format(self, x):
        fmt = "nchwc16" if x.format == "nchwc16" and x.ndim == 4 else "plain"
        return (fmt,), fmt

    def run(self, impl, inputs, outputs, backend, specs=()):
        x, y = inputs[0], outputs[0]
        blocked = _blocked(y, specs)
        channels = x.shape[1] * BLOCK if blocked else x.shape[1]  # blocked: with the padding channels
        inner = int(np.prod(x.shape[2:4] if blocked else x.shape[2:], dtype=np.int64))
        impl(x, y, channels=channels, inner=inner, size=self.size, alpha=self.alpha, beta=self.beta,
             bias=self.bias, blocked=blocked, backend=backend)
