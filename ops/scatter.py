"""Scatter ops: Scatter (opsets 9-10), ScatterElements and ScatterND (reductions by opset).

Both kernels first copy data to the output, then write the updates.  They are deterministic:
threads own disjoint parts of the output (whole lines along ``axis`` for ScatterElements,
ranges of positions inside the slices for ScatterND) and walk duplicate indices in ONNX's
order, so the last write wins and reductions apply in order.  Out-of-range indices are
flagged as in ops/gather.py.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, i32, i64
from dsl.opgraph.spec import VerifyError
from ops.gather import (ALL, INDEX, RANK, _Indexed, check_flag, new_flag, norm_axis, pad8, prod, require,
                        strides_of)

T = dsl.TypeVar("T")
I = dsl.TypeVar("I")  # noqa: E741  index dtype

# reduction codes of the kernels
NONE = 0
ADD = 1
MUL = 2
MAX = 3
MIN = 4
REDUCTIONS = {"none": NONE, "add": ADD, "mul": MUL, "max": MAX, "min": MIN}


@dsl.kernel
def scatter_elements_kernel(x: In[T], idx: In[I], upd: In[T], y: Out[T], err: Out[i64],
                            dims: dsl.Vec[i64, 8], ystrides: dsl.Vec[i64, 8], axis: i64, na: i64,
                            reduction: i32):
    """y = x, then y[.., idx[.., j, ..], ..] (op)= upd[.., j, ..]; each thread owns whole lines
    along ``axis``, walked in order, so duplicates resolve as ONNX's sequential loop."""
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]
    dsl.sync()
    m = dims[axis]
    istride = 1
    for a in dsl.static_range(7, -1, -1):
        if a > axis:
            istride *= dims[a]
    lines = idx.size // m if m > 0 else 0
    lo2, hi2 = dsl.split(lines)
    for p in range(lo2, hi2):
        r = p
        yoff = 0
        ioff = 0
        st = 1
        for a in dsl.static_range(7, -1, -1):
            if a != axis:
                c = r % dims[a]
                r = r // dims[a]
                yoff += c * ystrides[a]
                ioff += c * st
            st *= dims[a]
        for j in range(m):
            e = ioff + j * istride
            k = int(idx.flat[e])
            if k < 0:
                k += na
            if k < 0 or k >= na:
                err[0] = 1
                err[1] = int(idx.flat[e])
            else:
                q = yoff + k * ystrides[axis]
                u = upd.flat[e]
                if reduction == ADD:
                    y.flat[q] = y.flat[q] + u
                elif reduction == MUL:
                    y.flat[q] = y.flat[q] * u
                elif reduction == MAX:
                    y.flat[q] = max(y.flat[q], u)
                elif reduction == MIN:
                    y.flat[q] = min(y.flat[q], u)
                else:
                    y.flat[q] = u


@dsl.kernel
def scatter_nd_kernel(x: In[T], idx: In[I, 2], upd: In[T, 2], y: Out[T], err: Out[i64],
                      xdims: In[i64], xstrides: In[i64], reduction: i32):
    """y = x, then for each index tuple u in order: y[idx[u]] (op)= upd[u]; each thread owns a
    range of positions inside the slices, so duplicates resolve in order."""
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]
    dsl.sync()
    k = idx.shape[1]
    width = upd.shape[1]
    lo2, hi2 = dsl.split(width)
    for u in range(idx.shape[0]):
        off = 0
        ok = True
        for t in range(k):
            v = int(idx[u, t])
            if v < 0:
                v += xdims[t]
            if v < 0 or v >= xdims[t]:
                err[0] = 1
                err[1] = int(idx[u, t])
                ok = False
            off += v * xstrides[t]
        if ok:
            for s in range(lo2, hi2):
                q = off + s
                w = upd[u, s]
                if reduction == ADD:
                    y.flat[q] = y.flat[q] + w
                elif reduction == MUL:
                    y.flat[q] = y.flat[q] * w
                elif reduction == MAX:
                    y.flat[q] = max(y.flat[q], w)
                elif reduction == MIN:
                    y.flat[q] = min(y.flat[q], w)
                else:
                    y.flat[q] = w



class _ScatterElements(_Indexed):
    axis: int = 0
    reduction: str = "none"
    allowed = ("none",)
    kernels = {"default": scatter_elements_kernel}

    def verify(self, data, indices, updates):
        what = self.op_type
        require(what, data, ALL, "data")
        require(what, indices, INDEX, "indices")
        if updates.dtype != data.dtype:
            raise VerifyError(f"{what} updates {updates} must have data's dtype {data.dtype}")
        if self.reduction not in self.allowed:
            raise VerifyError(f"{what} reduction {self.reduction!r} is not accepted at opsets "
                              f"{self.since}-{self.until or 'latest'}; accepted: {', '.join(self.allowed)}")
        if self.reduction != "none" and data.dtype == dsl.bool_:
            raise VerifyError(f"{what} reduction {self.reduction!r} needs numeric data, got {data}")
        a = norm_axis(what, self.axis, data.ndim)
        if indices.ndim != data.ndim or updates.ndim != data.ndim:
            raise VerifyError(f"{what} indices {indices} and updates {updates} must have the rank of data {data}")
        if data.ndim > RANK:
            raise VerifyError(f"{what} supports rank <= {RANK}, got data {data}")
        for d, (i, u, x) in enumerate(zip(indices.shape, updates.shape, data.shape)):
            if i is not None and u is not None and i != u:
                raise VerifyError(f"{what} indices {indices} and updates {updates} must have one shape")
            if d != a and i is not None and x is not None and i > x:
                raise VerifyError(f"{what} indices {indices} exceed data {data} on axis {d}")

    def infer(self, data, indices, updates):
        return data.spec

    def run(self, impl, inputs, outputs, backend):
        x, idx, upd = inputs
        a = norm_axis(self.op_type, self.axis, x.ndim)
        err = new_flag()
        impl(x.reshape(-1), idx.reshape(-1), upd.reshape(-1), outputs[0].reshape(-1), err,
             pad8(idx.shape, 1), pad8(strides_of(x.shape), 0), a + RANK - x.ndim, x.shape[a],
             REDUCTIONS[self.reduction], backend=backend)
        check_flag(err, self.op_type, "indices", x.shape[a])


@dsl.op("Scatter", since=9, until=10)
class Scatter(_ScatterElements):
    """The deprecated name of ScatterElements (no reduction)."""


@dsl.op("ScatterElements", since=11, until=15)
class ScatterElements11(_ScatterElements):
    op_type = "ScatterElements"


@dsl.op("ScatterElements", since=16, until=17)
class ScatterElements16(_ScatterElements):
    op_type = "ScatterElements"
    allowed = ("none", "add", "mul")


@dsl.op("ScatterElements", since=18)
class ScatterElements(_ScatterElements):
    """data with updates written (or reduced: add/mul/max/min) at indices along ``axis``."""
    allowed = ("none", "add", "mul", "max", "min")


class _ScatterND(_Indexed):
    reduction: str = "none"
    allowed = ("none",)
    op_type = "ScatterND"
    kernels = {"default": scatter_nd_kernel}

    def verify(self, data, indices, updates):
        require("ScatterND", data, ALL, "data")
        require("ScatterND", indices, INDEX, "indices")
        if updates.dtype != data.dtype:
            raise VerifyError(f"ScatterND updates {updates} must have data's dtype {data.dtype}")
        if self.reduction not in self.allowed:
            raise VerifyError(f"ScatterND reduction {self.reduction!r} is not accepted at opsets "
                              f"{self.since}-{self.until or 'latest'}; accepted: {', '.join(self.allowed)}")
        if self.reduction != "none" and data.dtype == dsl.bool_:
            raise VerifyError(f"ScatterND reduction {self.reduction!r} needs numeric data, got {data}")
        k = indices.shape[-1] if indices.ndim else None
        if k is None:
            raise VerifyError(f"ScatterND needs the last dim of indices {indices} to be known")
        if k > data.ndim:
            raise VerifyError(f"ScatterND index tuples of length {k} exceed data {data}")
        want = indices.shape[:-1] + data.shape[k:]
        if updates.ndim != len(want) or any(None not in (u, w) and u != w for u, w in zip(updates.shape, want)):
            raise VerifyError(f"ScatterND updates {updates} must have shape indices.shape[:-1] + "
                              f"data.shape[{k}:] = {want}")

    def infer(self, data, indices, updates):
        return data.spec

    def run(self, impl, inputs, outputs, backend):
        x, idx, upd = inputs
        k = idx.shape[-1]
        count = prod(idx.shape[:-1])
        width = prod(x.shape[k:])
        err = new_flag()
        impl(x.reshape(-1), idx.reshape(count, k), upd.reshape(count, width), outputs[0].reshape(-1), err,
             np.array(x.shape[:k], np.int64), np.array(strides_of(x.shape)[:k], np.int64),
             REDUCTIONS[self.reduction], backend=backend)
        check_flag(err, "ScatterND", "indices", f"[-dim, dim - 1] of data axes {list(x.shape[:k])}")


@dsl.op("ScatterND", since=11, until=15)
class ScatterND11(_ScatterND):
    pass


@dsl.op("ScatterND", since=16, until=17)
class ScatterND16(_ScatterND):
    allowed = ("none", "add", "mul")


@dsl.op("ScatterND", since=18)
class ScatterND(_ScatterND):
    """data with update slices written (or reduced) at index tuples, in order."""
    allowed = ("none", "add", "mul", "max", "min")
