"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp, ReduceSumSquare; ArgMax, ArgMin; CumSum, CumProd.

One kernel serves the ten Reduce ops (the operation is a run-time code).  ``run``
drops size-1 axes and merges neighbouring axes that are both kept or both reduced, so
any set of axes becomes at most four kept runs (the output's index, decomposed) and
four reduced runs (four nested loops, the innermost one along the last reduced run);
each thread takes whole output elements.  Integers accumulate in their own type
(wrapping, as ONNX and numpy do), f16/bf16 in f32, and the Mean/L2/Log finishes are
computed in floating point and stored back (truncated for integers).

``axes`` is an attribute up to opset 17 (12 for ReduceSum) and an optional i64 input
after; an empty or absent ``axes`` reduces everything, or nothing with
``noop_with_empty_axes=1`` (then each element is the op over itself: |x| for ReduceL1).
An empty reduced set gives the op's identity: 0 for sums, 1 for ReduceProd, the lowest
value (-inf) for ReduceMax, -inf for ReduceLogSum(Exp), NaN for ReduceMean.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS, require_dtype

T = dsl.TypeVar("T")

# operation codes of reduce_kernel
SUM = 0
MEAN = 1
MAX = 2
MIN = 3
PROD = 4
L1 = 5
L2 = 6
LOGSUM = 7
LOGSUMEXP = 8
SUMSQUARE = 9
# arg_kernel
ARGMAX = 0
ARGMIN = 1

RUNS = 4  # kept / reduced runs reduce_kernel takes
INTS = (dsl.i32, dsl.u32, dsl.i64, dsl.u64)
SUMMABLE = INTS + FLOATS                                     # ReduceSum & co (ONNX: u32 u64 i32 i64 floats)
ORDERED = SUMMABLE + (dsl.i8, dsl.u8, dsl.bool_)             # ReduceMax/Min (opset 12 / 20 additions)
ARG_TYPES = SUMMABLE + (dsl.i8, dsl.u8, dsl.i16, dsl.u16)    # ArgMax/ArgMin


# --------------------------------------------------------------------------- kernels

@dsl.kernel
def reduce_kernel(x: In[T], init: In[T], y: Out[T], op: i32, kn: dsl.Vec[i64, 4], ks: dsl.Vec[i64, 4],
                  rn: dsl.Vec[i64, 4], rs: dsl.Vec[i64, 4], count: i64, offset: i64):
    """y.flat[o] = op over x.flat[offset + Σ k_d·ks_d + Σ r_d·rs_d]: (k_d) is o decomposed over the
    kept runs kn, (r_d) ranges over the reduced runs rn (count = Π rn elements).  ``init`` holds
    the op's identity (the lowest value for MAX and LOGSUMEXP, whose sum is taken relative to
    the running max in one pass)."""
    lo, hi = dsl.split(y.size)
    for o in range(lo, hi):
        q = o
        k3 = q % kn[3]
        q = q // kn[3]
        k2 = q % kn[2]
        q = q // kn[2]
        k1 = q % kn[1]
        k0 = q // kn[1]
        base = offset + k0 * ks[0] + k1 * ks[1] + k2 * ks[2] + k3 * ks[3]
        acc = init.flat[0]
        m = init.flat[0]  # LOGSUMEXP: the largest element so far; s = Σ exp(v - m)
        s = 0.0
        for a in range(rn[0]):
            for b in range(rn[1]):
                for c in range(rn[2]):
                    p = base + a * rs[0] + b * rs[1] + c * rs[2]
                    for d in range(rn[3]):
                        v = x.flat[p + d * rs[3]]
                        if op == SUM or op == MEAN or op == LOGSUM:
                            acc += v
                        elif op == MAX:
                            if v > acc or v != v:  # NaN wins, as np.maximum
                                acc = v
                        elif op == MIN:
                            if v < acc or v != v:
                                acc = v
                        elif op == PROD:
                            acc *= v
                        elif op == L1:
                            acc += abs(v)
                        elif op == LOGSUMEXP:  # rescaled when the max grows: never overflows
                            if v > m:
                                s = s * dsl.exp(m - v) + 1
                                m = v
                            else:
                                s += dsl.exp(v - m)
                        else:  # L2, SUMSQUARE
                            acc += v * v
        if op == MEAN:
            y.flat[o] = acc / count
        elif op == L2:
            y.flat[o] = dsl.sqrt(acc)
        elif op == LOGSUM:
            y.flat[o] = dsl.log(acc)
        elif op == LOGSUMEXP:
            if m - m != 0:  # ±inf or NaN: the sum would be NaN; the max is the answer
                y.flat[o] = m
            else:
                y.flat[o] = m + dsl.log(s)
        else:
            y.flat[o] = acc


@dsl.kernel
def arg_kernel(x: In[T, 3], y: Out[i64], op: i32, last: bool_):
    """y[o, i] = index along axis 1 of x[o, :, i]'s max (ARGMAX) or min; the first such index, or
    the last with ``last``; a NaN counts as the extreme (the first NaN, or the last)."""
    n = x.shape[1]
    inner = x.shape[2]
    lo, hi = dsl.split(y.size)
    for t in range(lo, hi):
        o = t // inner
        i = t - o * inner
        best = x[o, 0, i]
        at = 0
        for r in range(1, n):
            v = x[o, r, i]
            better = v > best if op == ARGMAX else v < best
            if best == best:
                better = better or v != v
            elif not last:
                better = False
            if last and (v == best or v != v):
                better = True
            if better:
                best = v
                at = r
        y.flat[t] = at


@dsl.kernel
def cumulative_kernel(x: In[T, 3], y: Out[T, 3], exclusive: bool_, reverse: bool_, product: bool_):
    """Running sums (products with ``product``) along axis 1 of each x[o, :, i] (from the end
    with ``reverse``; each without its own element with ``exclusive``); f16/bf16 in f32."""
    n = x.shape[1]
    inner = x.shape[2]
    lo, hi = dsl.split(x.shape[0] * inner)
    for t in range(lo, hi):
        o = t // inner
        i = t - o * inner
        acc = x[o, 0, i] * 0
        if product:
            acc = acc + 1
        for k in range(n):
            r = n - 1 - k if reverse else k
            v = x[o, r, i]
            if exclusive:
                y[o, r, i] = acc
            acc = acc * v if product else acc + v
            if not exclusive:
                y[o, r, i] = acc


# --------------------------------------------------------------------------- helpers

def normalize_axes(what: str, axes: Sequence[int], rank: int, name: str = "axes") -> Tuple[int, ...]:
    """ONNX axes in [-rank, rank) -> sorted non-negative axes; out of range or repeated is an error."""
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise VerifyError(f"{what} {name}: axis {a} is out of range for input of rank {rank}; "
                              f"accepted: -{rank}..{rank - 1}")
        a = a + rank if a < 0 else a
        if a in out:
            raise VerifyError(f"{what} {name} {list(axes)} name axis {a} more than once")
        out.append(a)
    return tuple(sorted(out))


def normalize_axis(what: str, axis: int, rank: int, name: str = "axis") -> int:
    return normalize_axes(what, (axis,), rank, name)[0]


def axis_view(shape: Sequence[int], axis: int) -> Tuple[int, int, int]:
    """(outer, n, inner): ``shape`` seen as three axes around ``axis``."""
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return outer, int(shape[axis]), inner


def reduce_runs(shape: Sequence[int], reduced: Sequence[int]):
    """-> (kept runs, reduced runs): [(size, element stride)] of merged neighbouring axes that are
    both kept or both reduced, size-1 axes dropped (a C-contiguous tensor of ``shape``)."""
    strides = [int(np.prod(shape[a + 1:], dtype=np.int64)) for a in range(len(shape))]
    runs: List[list] = []  # [is_reduced, size, stride]
    for ax, d in enumerate(shape):
        if d == 1:
            continue
        red = ax in reduced
        if runs and runs[-1][0] == red:
            runs[-1][1] *= d
            runs[-1][2] = strides[ax]
        else:
            runs.append([red, int(d), strides[ax]])
    kept = [(n, s) for r, n, s in runs if not r]
    red = [(n, s) for r, n, s in runs if r]
    return kept, red


def _padded(runs, k: int):
    runs = [(1, 0)] * (k - len(runs)) + list(runs)
    return tuple(n for n, _ in runs), tuple(s for _, s in runs)


def _identity(code: int, dtype: np.dtype) -> np.ndarray:
    """The one-element start value of reduce_kernel's accumulator (bool: a u8, 1 for MIN)."""
    if dtype == np.bool_:
        return np.full((1,), code == MIN, np.uint8)
    if code in (MAX, LOGSUMEXP, MIN):
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            v = info.max if code == MIN else info.min
        else:
            v = np.inf if code == MIN else -np.inf
        return np.full((1,), v, dtype)
    return np.full((1,), 1 if code == PROD else 0, dtype)


# A reduction to fewer than SPLIT_OUT values over at least SPLIT_MIN elements each would keep
# most threads idle (each thread takes whole outputs): it runs in two launches instead, partial
# results of up to 64 slices of the reduced elements, then their reduction.
SPLIT_OUT = 4
SPLIT_MIN = 1 << 14
TWO_STAGE = {SUM: (SUM, SUM), MEAN: (SUM, MEAN), MAX: (MAX, MAX), MIN: (MIN, MIN), PROD: (PROD, PROD),
             L1: (L1, SUM), SUMSQUARE: (SUMSQUARE, SUM), L2: (L2, L2), LOGSUM: (SUM, LOGSUM),
             LOGSUMEXP: (LOGSUMEXP, LOGSUMEXP)}
FLOAT_STAGES = (L2, LOGSUM, LOGSUMEXP)  # their partial results are not integers


def _chunks(kept, red, code: int, dtype: np.dtype) -> Optional[Tuple[int, int]]:
    """(reduced run, slices) to split a reduction in two launches, or None to run it in one.
    f16/bf16 are not split: their partial sums would be rounded to 16 bits."""
    out = int(np.prod([n for n, _ in kept], dtype=np.int64))
    count = int(np.prod([n for n, _ in red], dtype=np.int64))
    if out >= SPLIT_OUT or count < SPLIT_MIN or len(kept) >= RUNS or dtype.itemsize < 4 and dtype.kind == "f":
        return None
    if dtype.kind not in "iuf" or (code in FLOAT_STAGES and dtype.kind != "f"):
        return None
    for i in sorted(range(len(red)), key=lambda i: -red[i][0]):
        for k in range(64, 7, -1):
            if red[i][0] % k == 0:
                return i, k
    return None


def launch_reduce(impl, x: np.ndarray, y: np.ndarray, reduced: Sequence[int], code: int, backend) -> None:
    """Run reduce_kernel for ``x`` reduced over ``reduced`` into ``y`` (any output shape of the
    kept elements, in order).  More than four kept runs: the leading ones loop here."""
    dtype = x.dtype
    if dtype == np.bool_:  # max/min of bools are those of their 0/1 bytes
        x, y = x.view(np.uint8), y.view(np.uint8)
    kept, red = reduce_runs(x.shape, reduced)
    if len(red) > RUNS:
        raise VerifyError(f"{len(red)} separate runs of reduced axes (axes {list(reduced)} of shape "
                          f"{x.shape}); at most {RUNS} are supported: transpose first")
    count = int(np.prod([n for n, _ in red], dtype=np.int64))
    flat_x, flat_y = x.reshape(-1), y.reshape(-1)
    split = _chunks(kept, red, code, x.dtype)
    if split is not None:
        i, k = split
        n, s = red[i]
        first, second = TWO_STAGE[code]
        out = flat_y.size
        part = np.empty(out * k, x.dtype)  # (out, k): slice j of output o at o·k + j
        kn, ks = _padded(list(kept) + [(k, n // k * s)], RUNS)
        rn, rs = _padded(red[:i] + [(n // k, s)] + red[i + 1:], RUNS)
        impl(flat_x, _identity(first, dtype), part, op=first, kn=kn, ks=ks, rn=rn, rs=rs, count=count,
             offset=0, backend=backend)
        kn, ks = _padded([(out, k)], RUNS)
        rn, rs = _padded([(k, 1)], RUNS)
        impl(part, _identity(second, dtype), flat_y, op=second, kn=kn, ks=ks, rn=rn, rs=rs, count=count,
             offset=0, backend=backend)
        return
    rn, rs = _padded(red, RUNS)
    init = _identity(code, dtype)
    lead, kept = kept[:max(0, len(kept) - RUNS)], kept[max(0, len(kept) - RUNS):]
    kn, ks = _padded(kept, RUNS)
    per = int(np.prod(kn, dtype=np.int64))
    for idx in np.ndindex(*[n for n, _ in lead]):
        offset = sum(i * s for i, (_, s) in zip(idx, lead))
        k = int(np.ravel_multi_index(idx, [n for n, _ in lead])) if lead else 0
        impl(flat_x, init, flat_y[k * per:(k + 1) * per], op=code, kn=kn, ks=ks, rn=rn, rs=rs,
             count=count, offset=offset, backend=backend)


def _axes_value(spec: Optional[TensorSpec]) -> Optional[List[int]]:
    if spec is None or spec.value is None:
        return None
    return [int(v) for v in np.asarray(spec.value).reshape(-1)]


# --------------------------------------------------------------------------- Reduce*

class _Reduce(dsl.Op):
    code = SUM
    allowed = SUMMABLE
    keepdims: int = 1
    kernels = {"default": reduce_kernel}

    def _reduced(self, x: TensorSpec, axes: Optional[Sequence[int]]) -> Tuple[int, ...]:
        """Reduced axes; ``axes`` None or empty: all (or none with noop_with_empty_axes)."""
        if not axes:
            return () if getattr(self, "noop_with_empty_axes", 0) else tuple(range(x.ndim))
        return normalize_axes(self.op_type, axes, x.ndim)

    def _out_shape(self, x: TensorSpec, reduced: Sequence[int]):
        if self.keepdims:
            return tuple(1 if a in reduced else d for a, d in enumerate(x.shape))
        return tuple(d for a, d in enumerate(x.shape) if a not in reduced)

    def _verify_x(self, x):
        require_dtype(self.op_type, x, self.allowed)


class _ReduceAttr(_Reduce):
    """Reduce with an ``axes`` attribute (opsets before 18; ReduceSum before 13)."""
    axes: Optional[Tuple[int, ...]] = None

    def verify(self, x):
        self._verify_x(x)
        self._reduced(x, self.axes)

    def infer(self, x):
        return TensorSpec(self._out_shape(x, self._reduced(x, self.axes)), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        launch_reduce(impl, x, outputs[0], self._reduced(x, self.axes), self.code, backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


class _ReduceInput(_Reduce):
    """Reduce with an optional i64 ``axes`` input (opset 18+; ReduceSum 13+)."""
    noop_with_empty_axes: int = 0
    replay = False  # run() reads the axes' values

    def verify(self, x, axes=None):
        self._verify_x(x)
        if axes is not None:
            if axes.dtype != dsl.i64 or axes.ndim > 1:
                raise VerifyError(f"{self.op_type} axes input must be a 1-D i64 tensor, got {axes}")
            if axes.value is not None:
                self._reduced(x, _axes_value(axes))

    def infer(self, x, axes=None):
        if axes is None or axes.value is not None:
            return TensorSpec(self._out_shape(x, self._reduced(x, _axes_value(axes))), x.dtype)
        n = axes.shape[0] if axes.ndim == 1 else 1
        if self.keepdims:
            return TensorSpec((None,) * x.ndim, x.dtype)
        if n is None or (n == 0 and self.noop_with_empty_axes):
            raise VerifyError(f"{self.op_type} with keepdims=0 needs its axes input's length to know the "
                              f"output rank, got {axes}")
        return TensorSpec((None,) * (x.ndim - n if n else 0), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        axes = None if len(inputs) < 2 or inputs[1] is None else [int(a) for a in inputs[1].reshape(-1)]
        launch_reduce(impl, x, outputs[0], self._reduced(x, axes), self.code, backend)


def _reduce_family(name: str, code: int, allowed, input_since: int):
    """The two registrations of one Reduce op: attribute axes, then input axes."""
    attrs = {"code": code, "allowed": allowed, "__doc__": f"ONNX {name}, axes attribute.", "op_type": name}
    old = dsl.op(name, since=1, until=input_since - 1)(type(name + "V1", (_ReduceAttr,), attrs))
    new = dsl.op(name, since=input_since)(type(name, (_ReduceInput,), dict(attrs, __doc__=f"ONNX {name}.")))
    return new, old


ReduceSum, ReduceSumV1 = _reduce_family("ReduceSum", SUM, SUMMABLE, 13)
ReduceMean, ReduceMeanV1 = _reduce_family("ReduceMean", MEAN, SUMMABLE, 18)
ReduceMax, ReduceMaxV1 = _reduce_family("ReduceMax", MAX, ORDERED, 18)
ReduceMin, ReduceMinV1 = _reduce_family("ReduceMin", MIN, ORDERED, 18)
ReduceProd, ReduceProdV1 = _reduce_family("ReduceProd", PROD, SUMMABLE, 18)
ReduceL1, ReduceL1V1 = _reduce_family("ReduceL1", L1, SUMMABLE, 18)
ReduceL2, ReduceL2V1 = _reduce_family("ReduceL2", L2, SUMMABLE, 18)
ReduceLogSum, ReduceLogSumV1 = _reduce_family("ReduceLogSum", LOGSUM, SUMMABLE, 18)
ReduceLogSumExp, ReduceLogSumExpV1 = _reduce_family("ReduceLogSumExp", LOGSUMEXP, SUMMABLE, 18)
ReduceSumSquare, ReduceSumSquareV1 = _reduce_family("ReduceSumSquare", SUMSQUARE, SUMMABLE, 18)


# --------------------------------------------------------------------------- ArgMax / ArgMin

class _Arg(dsl.Op):
    code = ARGMAX
    axis: int = 0
    keepdims: int = 1
    select_last_index: int = 0
    kernels = {"default": arg_kernel}

    def verify(self, x):
        require_dtype(self.op_type, x, ARG_TYPES)
        a = normalize_axis(self.op_type, self.axis, x.ndim)
        if x.shape[a] == 0:
            raise VerifyError(f"{self.op_type} axis {self.axis} has size 0 in input {x}: no element to pick")

    def infer(self, x):
        a = normalize_axis(self.op_type, self.axis, x.ndim)
        shape = tuple(1 if k == a else d for k, d in enumerate(x.shape)) if self.keepdims else \
            x.shape[:a] + x.shape[a + 1:]
        return TensorSpec(shape, dsl.i64)

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        view = x.reshape(axis_view(x.shape, normalize_axis(self.op_type, self.axis, x.ndim)))
        impl(view, outputs[0], op=self.code, last=bool(self.select_last_index), backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@dsl.op("ArgMax", since=1)
class ArgMax(_Arg):
    """Index (i64) of the largest element along ``axis``."""
    code = ARGMAX


@dsl.op("ArgMin", since=1)
class ArgMin(_Arg):
    """Index (i64) of the smallest element along ``axis``."""
    code = ARGMIN


# --------------------------------------------------------------------------- CumSum

@dsl.op("CumSum", since=11)
class CumSum(dsl.Op):
    """Running sums along the axis given by a scalar i32/i64 input."""

    product = False
    exclusive: int = 0
    reverse: int = 0
    replay = False  # run() reads the axis' value
    kernels = {"default": cumulative_kernel}

    def verify(self, x, axis):
        require_dtype(self.op_type, x, SUMMABLE)
        if axis.dtype not in (dsl.i32, dsl.i64) or axis.size not in (1, None) or axis.ndim > 1:
            raise VerifyError(f"{self.op_type} axis input must be a scalar i32 or i64 tensor, got {axis}")
        if axis.value is not None:
            normalize_axis(self.op_type, int(np.asarray(axis.value).reshape(-1)[0]), max(x.ndim, 1))

    def infer(self, x, axis):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        a = normalize_axis(self.op_type, int(inputs[1].reshape(-1)[0]), max(x.ndim, 1))
        shape = axis_view(x.shape, a) if x.ndim else (1, 1, 1)
        impl(x.reshape(shape), y.reshape(shape), exclusive=bool(self.exclusive), reverse=bool(self.reverse),
             product=self.product, backend=backend)


@dsl.op("CumProd", since=26)
class CumProd(CumSum):
    """Running products along the axis given by a scalar i32/i64 input."""

    product = True
