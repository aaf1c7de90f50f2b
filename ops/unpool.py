"""MaxUnpool: MaxPool's partial inverse, scattering values back to the positions its Indices
output named (zeros elsewhere). A scatter, not a window reduction, so it lives apart from pool.py."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import require_dtype
from ops.pool import FLOATS, FLOATS_BF16, T, _pad3


@dsl.kernel
def unpool_kernel(x: In[T], ind: In[i64], y: Out[T, 4], inf: dsl.Vec[i64, 3]):
    """y = 0, then x[j] at the position ind[j] names in the (N·C, inf...) image, which sits at
    y's low corner (positions outside y or negative indices are dropped)."""
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = 0
    dsl.sync()
    lo, hi = dsl.split(x.size)
    for j in range(lo, hi):
        q = ind.flat[j]
        pw = q % inf[2]
        r = q // inf[2]
        ph = r % inf[1]
        r = r // inf[1]
        pd = r % inf[0]
        r = r // inf[0]
        if q >= 0 and r < y.shape[0] and pd < y.shape[1] and ph < y.shape[2] and pw < y.shape[3]:
            y[r, pd, ph, pw] = x.flat[j]


@dsl.op("MaxUnpool", since=9, until=21)
class MaxUnpoolV9(dsl.Op):
    """Partial inverse of MaxPool: X scattered to the flattened positions Indices name in the
    unpooled image ((in - 1)·stride - pads + kernel per axis), zeros elsewhere; an
    ``output_shape`` input (N, C, spatial...) pads that image at the end (or crops it)."""

    kernel_shape: Tuple[int, ...] = ()
    pads: Optional[Tuple[int, ...]] = None
    strides: Optional[Tuple[int, ...]] = None
    kernels = {"default": unpool_kernel}
    DTYPES = FLOATS

    def _unpooled(self, x):
        rank = len(self.kernel_shape)
        strides = tuple(self.strides) if self.strides else (1,) * rank
        pads = tuple(self.pads) if self.pads else (0,) * (2 * rank)
        return tuple(None if i is None else (i - 1) * s - pads[a] - pads[a + rank] + k
                     for a, (i, s, k) in enumerate(zip(x.shape[2:], strides, self.kernel_shape)))

    def verify(self, x, ind, output_shape=None):
        require_dtype("MaxUnpool", x, self.DTYPES)
        require_dtype("MaxUnpool", ind, (i64,))
        if x.ndim not in (3, 4, 5):
            raise VerifyError(f"MaxUnpool supports 1-D to 3-D images, got X {x}")
        rank = x.ndim - 2
        if len(self.kernel_shape) != rank:
            raise VerifyError(f"MaxUnpool kernel_shape {list(self.kernel_shape)} needs {rank} values for X {x}")
        for attr, v, n in (("strides", self.strides, rank), ("pads", self.pads, 2 * rank)):
            if v and len(v) != n:
                raise VerifyError(f"MaxUnpool {attr} {list(v)} needs {n} values for X {x}")
        if ind.ndim != x.ndim or any(a is not None and b is not None and a != b for a, b in zip(ind.shape, x.shape)):
            raise VerifyError(f"MaxUnpool Indices {ind} must have the shape of X {x}")
        if output_shape is not None and (output_shape.ndim != 1 or output_shape.shape[0] not in (None, x.ndim)):
            raise VerifyError(f"MaxUnpool output_shape must be a 1-D tensor of {x.ndim} values, got {output_shape}")

    def infer(self, x, ind, output_shape=None):
        if output_shape is None:
            return TensorSpec(tuple(x.shape[:2]) + self._unpooled(x), x.dtype)
        if output_shape.value is None:
            return TensorSpec((None,) * x.ndim, x.dtype)
        shape = tuple(int(v) for v in np.asarray(output_shape.value).reshape(-1))
        if any(a is not None and a != b for a, b in zip(x.shape[:2], shape[:2])):
            raise VerifyError(f"MaxUnpool output_shape {list(shape)} must keep X's N and C {list(x.shape[:2])}")
        return TensorSpec(shape, x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, ind, y = inputs[0], inputs[1], outputs[0]
        unpooled = _pad3(self._unpooled(TensorSpec.of(x)), 1)
        impl(x, ind, y.reshape((-1,) + _pad3(y.shape[2:], 1)), unpooled, backend=backend)


@dsl.op("MaxUnpool", since=22)
class MaxUnpool(MaxUnpoolV9):
    """MaxUnpool of bf16 too (opset 22+)."""
    DTYPES = FLOATS_BF16
