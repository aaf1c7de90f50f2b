"""ONNX Unique (opset 11+): the distinct elements of a tensor, or distinct slices along ``axis``.

``unique_kernel`` works on an (outer, n, inner) view, comparing the n slices x[:, k, :]
lexicographically (elements in row-major order, so with ``axis`` this is numpy's
``np.unique(axis=)`` order; without it the flattened elements, outer = inner = 1).  One
thread runs a stable bottom-up merge sort of the slice numbers (O(n log n) comparisons),
then walks the sorted order once, opening a group at every change: a group's first member
is the smallest original index (the sort is stable), its size is the count, and every
member's inverse index is the group.  With ``sorted=0`` the groups are renumbered in order
of first occurrence (a bucket pass over the first indices, O(n)).  NaN sorts after every
number and equals NaN, as in numpy.  The output length is data-dependent: the op counts
then gathers the groups' first slices with ``gather_kernel``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import dsl
from dsl import In, Out, bool_, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.gather import ALL, DataDependent, gather_kernel, launch_gather, norm_axis, require

T = dsl.TypeVar("T")


@dsl.func
def order3(a, b):
    """-1, 0, 1 comparing two elements; NaN after every number and equal to NaN."""
    r = 0
    if a != a or b != b:
        r = (1 if a != a else 0) - (1 if b != b else 0)
    elif a < b:
        r = -1
    elif a > b:
        r = 1
    return r


@dsl.kernel
def unique_kernel(x: In[T, 3], order: Out[i64], tmp: Out[i64], first: Out[i64], counts: Out[i64],
                  inverse: Out[i64], scratch: Out[i64], found: Out[i64], keep_sorted: bool_):
    outer = x.shape[0]
    n = x.shape[1]
    inner = x.shape[2]
    lo, hi = dsl.split(1)
    for w in range(lo, hi):
        for k in range(n):
            order[k] = k
        width = 1
        while width < n:  # bottom-up merge sort of slice numbers, stable (ties keep index order)
            start = 0
            while start < n:
                mid = min(start + width, n)
                end = min(start + 2 * width, n)
                i = start
                j = mid
                for k in range(start, end):
                    left = i < mid
                    if left and j < end:
                        c = 0
                        p = 0
                        while c == 0 and p < outer:
                            q = 0
                            while c == 0 and q < inner:
                                c = order3(x[p, order[i], q], x[p, order[j], q])
                                q += 1
                            p += 1
                        left = c <= 0
                    if left:
                        tmp[k] = order[i]
                        i += 1
                    else:
                        tmp[k] = order[j]
                        j += 1
                start = end
            for k in range(n):
                order[k] = tmp[k]
            width *= 2
        groups = 0
        for k in range(n):  # groups of equal slices, in sorted order
            fresh = k == 0
            if k > 0:
                c = 0
                p = 0
                while c == 0 and p < outer:
                    q = 0
                    while c == 0 and q < inner:
                        c = order3(x[p, order[k - 1], q], x[p, order[k], q])
                        q += 1
                    p += 1
                fresh = c != 0
            if fresh:
                first[groups] = order[k]
                counts[groups] = 0
                groups += 1
            counts[groups - 1] += 1
            inverse[order[k]] = groups - 1
        found[0] = groups
        if not keep_sorted:  # renumber groups by first occurrence
            for k in range(n):
                tmp[k] = -1
            for g in range(groups):
                tmp[first[g]] = g
                scratch[g] = counts[g]
            pos = 0
            for k in range(n):
                if tmp[k] >= 0:
                    order[tmp[k]] = pos  # order[old group] = new group
                    first[pos] = k
                    counts[pos] = scratch[tmp[k]]
                    pos += 1
            for k in range(n):
                inverse[k] = order[inverse[k]]


@dsl.op("Unique", since=11)
class Unique(DataDependent):
    """-> Y (the distinct elements, or slices along ``axis``), indices (first occurrence in X),
    inverse_indices (for every element/slice of X, its position in Y), counts; all i64 but Y.
    ``sorted=1`` orders Y ascending, ``sorted=0`` by first occurrence."""
    axis: Optional[int] = None
    sorted: int = 1
    kernels = {"default": unique_kernel}

    def verify(self, X):
        require("Unique", X, ALL, "X")
        if self.axis is not None:
            norm_axis("Unique", self.axis, X.ndim)
        if self.sorted not in (0, 1):
            raise VerifyError(f"Unique sorted must be 0 or 1, got {self.sorted}")

    def _slices(self, X) -> Optional[int]:
        if self.axis is None:
            return X.size
        return X.shape[norm_axis("Unique", self.axis, X.ndim)]

    def infer(self, X):
        n = self._slices(X)
        unique = 0 if n == 0 else None  # how many are distinct depends on the values
        if self.axis is None:
            y = TensorSpec((unique,), X.dtype)
        else:
            a = norm_axis("Unique", self.axis, X.ndim)
            y = TensorSpec(X.shape[:a] + (unique,) + X.shape[a + 1:], X.dtype)
        return (y, TensorSpec((unique,), dsl.i64), TensorSpec((n,), dsl.i64), TensorSpec((unique,), dsl.i64))

    def run_dynamic(self, impl, inputs, backend):
        x = inputs[0]
        if self.axis is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = norm_axis("Unique", self.axis, x.ndim)
        outer, n, inner = int(np.prod(x.shape[:axis])), x.shape[axis], int(np.prod(x.shape[axis + 1:]))
        work = [np.empty(max(n, 1), np.int64) for _ in range(6)]
        order, tmp, first, counts, inverse, scratch = work
        found = np.zeros(1, np.int64)
        if n:
            impl(x.reshape(outer, n, inner), order, tmp, first, counts, inverse, scratch, found,
                 keep_sorted=bool(self.sorted), backend=backend)
        u = int(found[0])
        y = np.empty(x.shape[:axis] + (u,) + x.shape[axis + 1:], x.dtype)
        if y.size:
            launch_gather(gather_kernel, x, axis, first[:u].copy(), y, "Unique", backend)
        return [y, first[:u].copy(), inverse[:n].copy(), counts[:u].copy()]

    def run(self, impl, inputs, outputs, backend):  # only reached with an empty input
        pass
