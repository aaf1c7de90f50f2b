"""Indexing ops: Gather, GatherElements, GatherND, OneHot, TopK and NonZero (the scatters are
in ops/scatter.py, which shares this file's index checks).

Every kernel is specialized by the data dtype ``T`` and the index dtype ``I`` (i32/i64) only;
shapes reach the kernels as collapsed 2/3-D views or as small per-axis tables (``dims``,
``strides``) built in ``run``.  Indices are checked in the kernels: an out-of-range index sets
a two-element error flag (``err[0] = 1``, ``err[1]`` = the index) and is skipped, and ``run``
raises ``IndexError`` naming the op, the input and the valid range after the launch.  That
check runs on every call, so these ops are not replayed (``replay = False``).

NonZero's output size depends on the data: it counts per block, then fills (see
``run_dynamic`` and dsl/opgraph/model.py ``run_data_dependent``).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

import dsl
from dsl import In, Out, config, i32, i64
from dsl.opgraph.model import run_data_dependent
from dsl.opgraph.op import _EAGER_BACKEND, as_arrays, check_and_infer, check_arity
from dsl.opgraph.spec import TensorSpec, VerifyError

T = dsl.TypeVar("T")
I = dsl.TypeVar("I")  # noqa: E741  index dtype
V = dsl.TypeVar("V")

RANK = 8             # ranks the element-wise kernels address (leading axes padded with 1)
NZ_BLOCKS = 64       # NonZero counts per block, then fills each block from its offset

ALL = (dsl.bool_, dsl.i8, dsl.u8, dsl.i16, dsl.u16, dsl.i32, dsl.u32, dsl.i64, dsl.u64,
       dsl.f16, dsl.bf16, dsl.f32, dsl.f64)
NUMERIC = ALL[1:]
INDEX = (dsl.i32, dsl.i64)


# --------------------------------------------------------------------------- kernels

@dsl.kernel
def gather_kernel(x: In[T, 3], idx: In[I], y: Out[T, 3], err: Out[i64]):
    """y[o, j, :] = x[o, idx[j], :] (negative indices count from the end)."""
    n = x.shape[1]
    m = y.shape[1]
    inner = y.shape[2]
    lo, hi = dsl.split(y.shape[0] * m)
    for r in range(lo, hi):
        o = r // m
        j = r - o * m
        k = int(idx.flat[j])
        if k < 0:
            k += n
        if k < 0 or k >= n:
            err[0] = 1
            err[1] = int(idx.flat[j])
        else:
            for t in range(inner):
                y[o, j, t] = x[o, k, t]


@dsl.kernel
def gather_elements_kernel(x: In[T], idx: In[I], y: Out[T], err: Out[i64], dims: dsl.Vec[i64, 8],
                           xstrides: dsl.Vec[i64, 8], axis: i64, na: i64):
    """y[.., j, ..] = x[.., idx[.., j, ..], ..] along ``axis`` of the 8-D padded shapes; y has
    idx's shape (``dims``), ``na`` is x's size along ``axis``."""
    lo, hi = dsl.split(y.size)
    for e in range(lo, hi):
        r = e
        off = 0
        for a in dsl.static_range(7, -1, -1):
            c = r % dims[a]
            r = r // dims[a]
            if a != axis:
                off += c * xstrides[a]
        k = int(idx.flat[e])
        if k < 0:
            k += na
        if k < 0 or k >= na:
            err[0] = 1
            err[1] = int(idx.flat[e])
        else:
            y.flat[e] = x.flat[off + k * xstrides[axis]]


@dsl.kernel
def gather_nd_kernel(x: In[T], idx: In[I, 3], y: Out[T, 3], err: Out[i64], xdims: In[i64],
                     xstrides: In[i64], batch_stride: i64):
    """y[b, m, :] = the slice of batch b of x at the index tuple idx[b, m, :]."""
    count = idx.shape[1]
    k = idx.shape[2]
    width = y.shape[2]
    lo, hi = dsl.split(idx.shape[0] * count)
    for r in range(lo, hi):
        b = r // count
        j = r - b * count
        off = b * batch_stride
        ok = True
        for t in range(k):
            v = int(idx[b, j, t])
            if v < 0:
                v += xdims[t]
            if v < 0 or v >= xdims[t]:
                err[0] = 1
                err[1] = int(idx[b, j, t])
                ok = False
            off += v * xstrides[t]
        if ok:
            for s in range(width):
                y[b, j, s] = x.flat[off + s]


@dsl.kernel
def onehot_kernel(idx: In[I, 2], values: In[V], y: Out[V, 3]):
    """y[o, d, i] = on if idx[o, i] (negatives + depth) == d else off."""
    depth = y.shape[1]
    inner = y.shape[2]
    off = values.flat[0]
    on = values.flat[1]
    lo, hi = dsl.split(y.shape[0] * depth)
    for r in range(lo, hi):
        o = r // depth
        d = r - o * depth
        for i in range(inner):
            v = idx[o, i]
            hit = v == d or (v < 0 and v + depth == d)
            y[o, d, i] = on if hit else off


@dsl.kernel
def topk_kernel(x: In[T, 3], vals: Out[T, 3], inds: Out[i64, 3], heap: Out[i64, 2], largest: i32):
    """The k best of each line along axis 1, best first; ties go to the lower index.  A heap of
    the line's indices (best on top) is built, then popped k times."""
    n = x.shape[1]
    inner = x.shape[2]
    k = vals.shape[1]
    half = n // 2
    lo, hi = dsl.split(x.shape[0] * inner)
    for r in range(lo, hi):
        o = r // inner
        c = r - o * inner
        for t in range(n):
            heap[r, t] = t
        size = n
        for step in range(half + k):
            i = half - 1 - step
            if step >= half:  # pop: the top is the next best
                q = step - half
                best = heap[r, 0]
                vals[o, q, c] = x[o, best, c]
                inds[o, q, c] = best
                size -= 1
                heap[r, 0] = heap[r, size]
                i = 0
            while True:  # sift heap[r, i] down within size
                left = 2 * i + 1
                if left >= size:
                    break
                b = left
                if left + 1 < size:
                    ia = heap[r, left + 1]
                    ib = heap[r, left]
                    va = x[o, ia, c]
                    vb = x[o, ib, c]
                    if largest != 0:
                        better = va > vb or (va == vb and ia < ib)
                    else:
                        better = va < vb or (va == vb and ia < ib)
                    if better:
                        b = left + 1
                ia = heap[r, b]
                ib = heap[r, i]
                va = x[o, ia, c]
                vb = x[o, ib, c]
                if largest != 0:
                    better = va > vb or (va == vb and ia < ib)
                else:
                    better = va < vb or (va == vb and ia < ib)
                if not better:
                    break
                heap[r, b] = ib
                heap[r, i] = ia
                i = b


@dsl.kernel
def nonzero_count_kernel(x: In[T], counts: Out[i64]):
    """counts[b]: non-zero elements of block b of x.flat (blocks split x.size evenly)."""
    nb = counts.size
    lo, hi = dsl.split(nb)
    for b in range(lo, hi):
        c = 0
        for i in range(x.size * b // nb, x.size * (b + 1) // nb):
            if x.flat[i] != 0:
                c += 1
        counts[b] = c


@dsl.kernel
def nonzero_fill_kernel(x: In[T], starts: In[i64], dims: In[i64], y: Out[i64, 2]):
    """y[:, starts[b] + ...] = the coordinates of block b's non-zero elements, in order."""
    nb = starts.size
    rank = dims.size
    lo, hi = dsl.split(nb)
    for b in range(lo, hi):
        pos = starts[b]
        for i in range(x.size * b // nb, x.size * (b + 1) // nb):
            if x.flat[i] != 0:
                r = i
                for d in range(rank - 1, -1, -1):
                    y[d, pos] = r % dims[d]
                    r = r // dims[d]
                pos += 1


# --------------------------------------------------------------------------- helpers

def norm_axis(what: str, axis: int, rank: int, name: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise VerifyError(f"{what} {name} {axis} is out of range for rank {rank}; "
                          f"accepted: {-rank}..{rank - 1}")
    return axis + rank if axis < 0 else axis


def require(what: str, spec: TensorSpec, allowed: Sequence, name: str) -> None:
    if spec.dtype not in allowed:
        raise VerifyError(f"{what} input '{name}' has dtype {spec.dtype}; accepted: "
                          f"{', '.join(map(str, allowed))}")


def new_flag() -> np.ndarray:
    return np.zeros(2, np.int64)


def check_flag(err: np.ndarray, what: str, name: str, size) -> None:
    """Raise when a kernel flagged an out-of-range index (``size``: an int or a text)."""
    if err[0]:
        if isinstance(size, (int, np.integer)):
            rng = f"[{-int(size)}, {int(size) - 1}] (axis size {int(size)})"
        else:
            rng = size
        raise IndexError(f"{what} input '{name}' has index {int(err[1])} out of range; valid: {rng}")


def strides_of(shape: Sequence[int]) -> List[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= int(d)
    return out[::-1]


def pad8(values: Sequence[int], fill: int) -> List[int]:
    return [fill] * (RANK - len(values)) + [int(v) for v in values]


def prod(dims) -> Optional[int]:
    if any(d is None for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64))


def const_ints(spec: Optional[TensorSpec]) -> Optional[List[int]]:
    if spec is None or spec.value is None:
        return None
    return [int(v) for v in np.asarray(spec.value).reshape(-1)]


class _Indexed(dsl.Op):
    """Ops whose kernels report out-of-range indices through a flag checked after the launch."""
    replay = False


# --------------------------------------------------------------------------- Gather

@dsl.op("Gather", since=1)
class Gather(_Indexed):
    """Take slices along ``axis``: out shape = data[:axis] + indices.shape + data[axis+1:]."""

    keeps_quant = "per_tensor"  # moves data; may reorder along any axis (per-axis quant dropped)
    axis: int = 0
    kernels = {"default": gather_kernel}

    def verify(self, data, indices):
        require("Gather", data, ALL, "data")
        require("Gather", indices, INDEX, "indices")
        norm_axis("Gather", self.axis, data.ndim)

    def infer(self, data, indices):
        a = norm_axis("Gather", self.axis, data.ndim)
        return TensorSpec(data.shape[:a] + indices.shape + data.shape[a + 1:], data.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, idx = inputs
        launch_gather(impl, x, norm_axis("Gather", self.axis, x.ndim), idx, outputs[0], "Gather", backend)


def launch_gather(impl, x, axis: int, idx, y, what: str, backend) -> None:
    """y = the slices of x along ``axis`` that ``idx`` names, through gather_kernel on
    (outer, n, inner) views; an index out of range is an error naming ``what``."""
    outer, n, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    err = new_flag()
    impl(x.reshape(outer, n, inner), idx.reshape(-1), y.reshape(outer, idx.size, inner), err, backend=backend)
    check_flag(err, what, "indices", n)


@dsl.op("GatherElements", since=11)
class GatherElements(_Indexed):
    """out[.., j, ..] = data[.., indices[.., j, ..], ..] along ``axis``; out has indices' shape."""

    keeps_quant = "per_tensor"  # moves data; may reorder along any axis (per-axis quant dropped)
    axis: int = 0
    kernels = {"default": gather_elements_kernel}

    def verify(self, data, indices):
        require("GatherElements", data, ALL, "data")
        require("GatherElements", indices, INDEX, "indices")
        a = norm_axis("GatherElements", self.axis, data.ndim)
        if indices.ndim != data.ndim:
            raise VerifyError(f"GatherElements indices {indices} must have the rank of data {data}")
        if data.ndim > RANK:
            raise VerifyError(f"GatherElements supports rank <= {RANK}, got data {data}")
        for d, (i, x) in enumerate(zip(indices.shape, data.shape)):
            if d != a and i is not None and x is not None and i > x:
                raise VerifyError(f"GatherElements indices {indices} exceed data {data} on axis {d}")

    def infer(self, data, indices):
        return TensorSpec(indices.shape, data.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, idx = inputs
        a = norm_axis("GatherElements", self.axis, x.ndim)
        pad = RANK - x.ndim
        err = new_flag()
        impl(x.reshape(-1), idx.reshape(-1), outputs[0].reshape(-1), err, pad8(idx.shape, 1),
             pad8(strides_of(x.shape), 0), a + pad, x.shape[a], backend=backend)
        check_flag(err, "GatherElements", "indices", x.shape[a])


# --------------------------------------------------------------------------- GatherND

@dsl.op("GatherND", since=11)
class GatherND(_Indexed):
    """Slices of data at index tuples (the last axis of indices); ``batch_dims`` leading axes
    are shared by data and indices."""

    keeps_quant = "per_tensor"  # moves data; may reorder along any axis (per-axis quant dropped)
    batch_dims: int = 0
    kernels = {"default": gather_nd_kernel}

    def _k(self, data, indices) -> Optional[int]:
        return indices.shape[-1]

    def verify(self, data, indices):
        require("GatherND", data, ALL, "data")
        require("GatherND", indices, INDEX, "indices")
        b = self.batch_dims
        if b < 0 or b >= min(data.ndim, indices.ndim):
            raise VerifyError(f"GatherND batch_dims {b} must be in [0, {min(data.ndim, indices.ndim) - 1}] for "
                              f"data {data} and indices {indices}")
        k = indices.shape[-1]
        if k is None:
            raise VerifyError(f"GatherND needs the last dim of indices {indices} to know the output rank")
        if k > data.ndim - b:
            raise VerifyError(f"GatherND index tuples of length {k} exceed data {data} after {b} batch dims")
        for d in range(b):
            if None not in (data.shape[d], indices.shape[d]) and data.shape[d] != indices.shape[d]:
                raise VerifyError(f"GatherND batch dim {d} differs: data {data}, indices {indices}")

    def infer(self, data, indices):
        b, k = self.batch_dims, indices.shape[-1]
        return TensorSpec(indices.shape[:-1] + data.shape[b + k:], data.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, idx = inputs
        b, k = self.batch_dims, idx.shape[-1]
        nb = prod(x.shape[:b])
        count = prod(idx.shape[b:-1])
        width = prod(x.shape[b + k:])
        xstr = strides_of(x.shape)
        err = new_flag()
        impl(x.reshape(-1), idx.reshape(nb, count, k), outputs[0].reshape(nb, count, width), err,
             np.array(x.shape[b:b + k], np.int64), np.array(xstr[b:b + k], np.int64),
             prod(x.shape[b:]), backend=backend)
        check_flag(err, "GatherND", "indices", f"[-dim, dim - 1] of data axes {list(x.shape[b:b + k])}")


# --------------------------------------------------------------------------- OneHot

@dsl.op("OneHot", since=9)
class OneHot(dsl.Op):
    """values[1] where the index (negatives + depth) equals the position along the new axis,
    values[0] elsewhere; out-of-range indices give an all-off line."""
    axis: int = -1
    kernels = {"default": onehot_kernel}

    def verify(self, indices, depth, values):
        require("OneHot", indices, NUMERIC, "indices")
        require("OneHot", depth, NUMERIC, "depth")
        require("OneHot", values, ALL, "values")
        norm_axis("OneHot", self.axis, indices.ndim + 1)
        if values.size is not None and values.size != 2:
            raise VerifyError(f"OneHot values must hold [off_value, on_value], got {values}")
        d = depth.value
        if d is not None:
            if np.asarray(d).size != 1:
                raise VerifyError(f"OneHot depth must be a scalar, got {depth}")
            if float(np.asarray(d).reshape(-1)[0]) < 1:
                raise VerifyError(f"OneHot depth must be >= 1, got {np.asarray(d).reshape(-1)[0]}")

    def infer(self, indices, depth, values):
        a = norm_axis("OneHot", self.axis, indices.ndim + 1)
        d = None if depth.value is None else int(np.asarray(depth.value).reshape(-1)[0])
        return TensorSpec(indices.shape[:a] + (d,) + indices.shape[a:], values.dtype)

    def run(self, impl, inputs, outputs, backend):
        idx, _, values = inputs
        y = outputs[0]
        a = norm_axis("OneHot", self.axis, idx.ndim + 1)
        outer, inner = prod(idx.shape[:a]), prod(idx.shape[a:])
        impl(idx.reshape(outer, inner), values.reshape(-1), y.reshape(outer, y.shape[a], inner), backend=backend)


# --------------------------------------------------------------------------- TopK

class _TopK(dsl.Op):
    """The k largest (or smallest) along ``axis``, sorted, ties to the lower index; outputs
    (Values, Indices i64)."""
    axis: int = -1
    kernels = {"default": topk_kernel}
    largest_flag = 1

    def _k(self, K) -> Optional[int]:
        v = const_ints(K)
        return None if v is None else v[0]

    def _check(self, X, k):
        require("TopK", X, NUMERIC, "X")
        a = norm_axis("TopK", self.axis, X.ndim)
        n = X.shape[a]
        if k is not None and (k < 0 or (n is not None and k > n)):
            raise VerifyError(f"TopK k={k} is out of range for axis {a} of X {X}; accepted: 0..{n}")

    def _infer(self, X, k):
        a = norm_axis("TopK", self.axis, X.ndim)
        shape = X.shape[:a] + (k,) + X.shape[a + 1:]
        return TensorSpec(shape, X.dtype), TensorSpec(shape, dsl.i64)

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        vals, inds = outputs
        a = norm_axis("TopK", self.axis, x.ndim)
        outer, n, inner = prod(x.shape[:a]), x.shape[a], prod(x.shape[a + 1:])
        k = vals.shape[a]
        heap = np.empty((outer * inner, max(n, 1)), np.int64)
        impl(x.reshape(outer, n, inner), vals.reshape(outer, k, inner), inds.reshape(outer, k, inner), heap,
             int(getattr(self, "largest", 1)), backend=backend)


@dsl.op("TopK", since=1, until=9)
class TopK1(_TopK):
    op_type = "TopK"
    k: int = 1

    def verify(self, X):
        self._check(X, self.k)

    def infer(self, X):
        return self._infer(X, self.k)


@dsl.op("TopK", since=10, until=10)
class TopK10(_TopK):
    op_type = "TopK"

    def verify(self, X, K):
        if K.dtype != dsl.i64 or (K.size is not None and K.size != 1):
            raise VerifyError(f"TopK K must be a one-element i64 tensor, got {K}")
        self._check(X, self._k(K))

    def infer(self, X, K):
        return self._infer(X, self._k(K))


@dsl.op("TopK", since=11)
class TopK(TopK10):
    largest: int = 1
    sorted: int = 1  # the output is always sorted (allowed for sorted=0)


# --------------------------------------------------------------------------- NonZero

class DataDependent(dsl.Op):
    """An op whose output shapes depend on input values: ``infer`` leaves those dims None and
    ``run_dynamic(impl, inputs, backend)`` returns the output arrays it allocated (see
    dsl/opgraph/model.py ``run_data_dependent``); eager calls go the same way."""
    replay = False

    def apply_eager(self, inputs, backend=None):
        check_arity(self, len(inputs), "eager call")
        arrays = as_arrays(self, inputs)
        backend = backend or _EAGER_BACKEND.get() or config.default_backend()
        specs = [None if a is None else TensorSpec.of(a) for a in arrays]
        outs = check_and_infer(self, specs, where="eager call")
        if all(s.known for s in outs):
            return super().apply_eager(inputs, backend)
        result = run_data_dependent(self, self.implementation(specs, backend), arrays, backend)
        return result[0] if len(result) == 1 else tuple(result)


@dsl.op("NonZero", since=9)
class NonZero(DataDependent):
    """Coordinates of the non-zero elements, row-major order: i64 (rank, count)."""
    kernels = {"default": nonzero_count_kernel}

    def verify(self, X):
        require("NonZero", X, ALL, "X")

    def infer(self, X):
        return TensorSpec((X.ndim, 0 if X.size == 0 else None), dsl.i64)

    def run_dynamic(self, impl, inputs, backend):
        x = inputs[0]
        flat = x.reshape(-1)
        counts = np.empty(NZ_BLOCKS, np.int64)
        impl(flat, counts, backend=backend)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        y = np.empty((x.ndim, int(counts.sum())), np.int64)
        if y.size:
            nonzero_fill_kernel(flat, starts, np.array(x.shape, np.int64), y, backend=backend)
        return [y]

    def run(self, impl, inputs, outputs, backend):  # only reached with an empty input
        pass


@dsl.op("Compress", since=9)
class Compress(DataDependent):
    """The slices along ``axis`` (the flattened input when absent) whose ``condition`` entry is
    True; entries past the condition's length count as False.  Gathered like Gather."""
    axis: Optional[int] = None
    kernels = {"default": gather_kernel}

    def verify(self, input, condition):
        require("Compress", input, ALL, "input")
        if condition.dtype != dsl.bool_ or condition.ndim != 1:
            raise VerifyError(f"Compress condition must be a 1-D bool tensor, got {condition}")
        if self.axis is not None:
            norm_axis("Compress", self.axis, input.ndim)

    def infer(self, input, condition):
        if self.axis is None:
            return TensorSpec((None,), input.dtype)
        a = norm_axis("Compress", self.axis, input.ndim)
        return TensorSpec(tuple(None if k == a else d for k, d in enumerate(input.shape)), input.dtype)

    def run_dynamic(self, impl, inputs, backend):
        x, cond = inputs
        if self.axis is None:
            x = x.reshape(-1)
        a = 0 if self.axis is None else norm_axis("Compress", self.axis, x.ndim)
        n = x.shape[a]
        if cond.size > n:
            raise ValueError(f"Compress condition has {cond.size} entries, more than the {n} slices along axis {a}")
        idx = np.flatnonzero(cond).astype(np.int64)
        out_shape = x.shape[:a] + (idx.size,) + x.shape[a + 1:]
        y = np.empty(out_shape, x.dtype)
        if y.size:
            launch_gather(impl, x, a, idx, y, "Compress", backend)
        return [y]
