"""Shape ops: Reshape (0 / -1 / allowzero semantics) and Transpose (perm).

Both copy through DSL kernels: ``copy_kernel`` (a flat copy; Reshape only changes
the shape) and ``transpose_kernel``, a strided gather over a 6-D view of the
output.  ``Transpose.run`` drops size-1 axes and merges axes that stay adjacent
under the permutation, so ranks above six are rare; the rest loop over leading
output axes here.
"""
from __future__ import annotations

import itertools
from typing import List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl import In, Out, i64
from dsl.opgraph.graph import Identity
from dsl.opgraph.spec import TensorSpec, VerifyError

T = dsl.TypeVar("T")
KERNEL_RANK = 6


@dsl.kernel
def copy_kernel(x: In[T], y: Out[T]):
    """y.flat = x.flat (shapes may differ, sizes do not)."""
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]


@dsl.kernel
def transpose_kernel(x: In[T, 1], y: Out[T, 6], s0: i64, s1: i64, s2: i64, s3: i64, s4: i64,
                     s5: i64, offset: i64):
    """y[i0..i5] = x[offset + Σ i_d·s_d]: s_d is x's stride along the axis that becomes axis d."""
    n1 = y.shape[1]
    n2 = y.shape[2]
    n3 = y.shape[3]
    n4 = y.shape[4]
    n5 = y.shape[5]
    lo, hi = dsl.split(y.size)
    i = lo
    while i < hi:
        r = i // n5
        j0 = i - r * n5
        jn = min(n5, j0 + hi - i)
        i4 = r % n4
        r = r // n4
        i3 = r % n3
        r = r // n3
        i2 = r % n2
        r = r // n2
        i1 = r % n1
        i0 = r // n1
        p = offset + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4
        base = i - j0
        for j in range(j0, jn):
            y.flat[base + j] = x.flat[p + j * s5]
        i = base + jn


# --------------------------------------------------------------------------- Reshape

def _shape_value(spec: Optional[TensorSpec]) -> Optional[List[int]]:
    if spec is None or spec.value is None:
        return None
    return [int(v) for v in np.asarray(spec.value).reshape(-1)]


def reshape_dims(data_shape: Sequence[Optional[int]], target: Sequence[int], allowzero: int) -> Tuple:
    """ONNX Reshape: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    if target.count(-1) > 1:
        raise VerifyError(f"Reshape shape {list(target)} has more than one -1")
    if any(d < -1 for d in target):
        raise VerifyError(f"Reshape shape {list(target)} has a negative dim other than -1")
    if allowzero and 0 in target and -1 in target:
        raise VerifyError(f"Reshape with allowzero=1 cannot have both 0 and -1 in shape {list(target)}")
    out: List[Optional[int]] = []
    for axis, d in enumerate(target):
        if d == 0 and not allowzero:
            if axis >= len(data_shape):
                raise VerifyError(f"Reshape shape {list(target)} copies input axis {axis} (a 0), but the "
                                  f"input has rank {len(data_shape)}")
            out.append(data_shape[axis])
        else:
            out.append(d)
    total = None if any(d is None for d in data_shape) else int(np.prod(data_shape, dtype=np.int64))
    if -1 in out:
        k = out.index(-1)
        rest = [d for i, d in enumerate(out) if i != k]
        copied = {a for a, d in enumerate(target) if d == 0 and not allowzero}
        if total is None and all(a in copied for a, d in enumerate(data_shape) if d is None):
            # unknown dims are copied through by 0s: they cancel out of the -1
            known_in = int(np.prod([d for a, d in enumerate(data_shape) if a not in copied], dtype=np.int64))
            known_out = int(np.prod([d for a, d in enumerate(out) if a not in copied and a != k], dtype=np.int64))
            out[k] = known_in // known_out if known_out and known_in % known_out == 0 else None
        elif total is None or any(d is None for d in rest):
            out[k] = None
        else:
            known = int(np.prod(rest, dtype=np.int64))
            if known == 0 or total % known:
                raise VerifyError(f"Reshape cannot infer -1: {total} elements of input "
                                  f"{tuple(data_shape)} do not divide into shape {list(target)}")
            out[k] = total // known
    if total is not None and all(d is not None for d in out):
        if int(np.prod(out, dtype=np.int64)) != total:
            raise VerifyError(f"Reshape of input {tuple(data_shape)} ({total} elements) to shape "
                              f"{list(target)} -> {tuple(out)} changes the element count")
    return tuple(out)


@dsl.op("Reshape", since=5)
class Reshape(dsl.Op):
    """Same elements, new shape; ``shape`` is an i64 tensor (usually a constant)."""

    allowzero: int = 0
    inplace = {0: 0}
    kernels = {"default": copy_kernel}

    def verify(self, data, shape):
        if shape.dtype != dsl.i64:
            raise VerifyError(f"Reshape shape input must be i64, got {shape}")
        if shape.ndim != 1:
            raise VerifyError(f"Reshape shape input must be 1-D, got {shape}")

    def infer(self, data, shape):
        target = _shape_value(shape)
        if target is None:  # known only at run time
            if shape.shape[0] is None:
                raise VerifyError(f"Reshape needs the length of its shape input to know the output rank, "
                                  f"got {shape}")
            return TensorSpec((None,) * shape.shape[0], data.dtype)
        return TensorSpec(reshape_dims(data.shape, target, self.allowzero), data.dtype)

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], backend=backend)


# The one Identity op lives beside dsl.Graph, which emits it for repeated outputs; registering
# it here makes it the ONNX Identity (ops.Identity).
Identity = dsl.op("Identity", since=1)(Identity)


# --------------------------------------------------------------------------- Transpose

def collapse_transpose(shape: Sequence[int], perm: Sequence[int]):
    """(input shape, perm) with size-1 axes dropped and axes that stay neighbours merged."""
    keep = [ax for ax in range(len(shape)) if shape[ax] != 1]
    renumber = {ax: i for i, ax in enumerate(keep)}
    dims = [shape[ax] for ax in keep]
    groups: List[List[int]] = []  # input axes, in output order
    for ax in (renumber[a] for a in perm if a in renumber):
        if groups and groups[-1][-1] + 1 == ax:
            groups[-1].append(ax)
        else:
            groups.append([ax])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    new_shape = [int(np.prod([dims[a] for a in groups[g]], dtype=np.int64)) for g in order]
    position = {g: i for i, g in enumerate(order)}
    return new_shape, [position[g] for g in range(len(groups))]


@dsl.op("Transpose", since=1)
class Transpose(dsl.Op):
    """Permute axes: output axis d is input axis perm[d]; default perm reverses them."""

    perm: Optional[Tuple[int, ...]] = None
    kernels = {"default": transpose_kernel}

    def _perm(self, rank: int) -> Tuple[int, ...]:
        return tuple(range(rank))[::-1] if self.perm is None else tuple(self.perm)

    def verify(self, x):
        perm = self._perm(x.ndim)
        if sorted(perm) != list(range(x.ndim)):
            raise VerifyError(f"Transpose perm {list(perm)} is not a permutation of the {x.ndim} axes "
                              f"of input {x}; expected each of 0..{x.ndim - 1} once")

    def infer(self, x):
        return TensorSpec(tuple(x.shape[p] for p in self._perm(x.ndim)), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        shape, perm = collapse_transpose(x.shape, self._perm(x.ndim))
        strides = [int(np.prod(shape[a + 1:], dtype=np.int64)) for a in range(len(shape))]
        out_shape = [shape[p] for p in perm]
        out_strides = [strides[p] for p in perm]
        extra = max(0, len(out_shape) - KERNEL_RANK)
        pad = KERNEL_RANK - (len(out_shape) - extra)
        inner_shape = (1,) * pad + tuple(out_shape[extra:])
        inner_strides = [0] * pad + out_strides[extra:]
        flat_x = x.reshape(-1)
        yv = y.reshape(out_shape)
        for lead in itertools.product(*(range(d) for d in out_shape[:extra])):
            offset = sum(i * s for i, s in zip(lead, out_strides))
            ys = yv[lead] if lead else yv
            impl(flat_x, ys.reshape(inner_shape), *inner_strides, offset, backend=backend)
