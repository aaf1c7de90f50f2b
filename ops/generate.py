"""Ops that make tensors from a few numbers, or rearrange blocks: Range, ConstantOfShape,
EyeLike, Trilu, Dropout (inference), DepthToSpace and SpaceToDepth.

Scalars a kernel needs in the tensor's own dtype (the fill value, Range's start and
delta, the 0 and 1 of EyeLike, Trilu's zero) are passed as small arrays, so one kernel
serves every dtype, bool and f16 included, and a launch does not depend on input values
(the model can replay it).  DepthToSpace / SpaceToDepth are a reshape plus a transpose:
one strided copy (shape.py).
"""
from __future__ import annotations

import math
from typing import Literal, Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.shape import _shape_value, launch_transpose, strided_copy_kernel

T = dsl.TypeVar("T")
M = dsl.TypeVar("M")  # a mask's dtype: bool, or the data's before Dropout-10

# modes of diagonal_kernel (module constants fold into the kernel)
EYE = 0
UPPER = 1
LOWER = 2


# --------------------------------------------------------------------------- kernels

@dsl.kernel
def fill_kernel(v: In[T], y: Out[T]):
    """Every element of y = v.flat[0]."""
    c = v.flat[0]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = c


@dsl.kernel
def range_kernel(start: In[T], delta: In[T], y: Out[T]):
    """y[i] = start + i * delta."""
    s = start.flat[0]
    d = delta.flat[0]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        y.flat[i] = s + i * d


@dsl.kernel
def diagonal_kernel(x: In[T, 3], values: In[T], k: In[i64], y: Out[T, 3], mode: i32):
    """Per matrix of x (batch, rows, cols): mode EYE writes values[1] where col - row == k,
    values[0] elsewhere (x unused); UPPER / LOWER keep x where col - row >= k / <= k, else
    values[0]."""
    cols = y.shape[2]
    rows = y.shape[1]
    kk = k.flat[0]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        c = i % cols
        r = (i // cols) % rows
        if mode == EYE:
            y.flat[i] = values.flat[1] if c - r == kk else values.flat[0]
        elif mode == UPPER:
            y.flat[i] = x.flat[i] if c - r >= kk else values.flat[0]
        else:
            y.flat[i] = x.flat[i] if c - r <= kk else values.flat[0]


@dsl.kernel
def dropout_kernel(x: In[T], y: Out[T], mask: Out[M]):
    """Inference dropout: y = x and every mask element True (1 for a float mask, opsets 1-9).
    x and y may be NCHWc16 (more elements, padding included) while the mask stays plain."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]
    lo, hi = dsl.split(mask.size)
    for i in range(lo, hi):
        mask.flat[i] = True


# --------------------------------------------------------------------------- Range

RANGE_TYPES = (dsl.f32, dsl.f64, dsl.i16, dsl.i32, dsl.i64, dsl.f16, dsl.bf16)  # f16/bf16: opset 27


def _scalar(spec: TensorSpec):
    return None if spec.value is None else np.asarray(spec.value).reshape(-1)[0]


def range_length(start, limit, delta) -> int:
    """max(ceil((limit - start) / delta), 0), exact for integers."""
    if delta == 0:
        raise VerifyError("Range delta is 0")
    if isinstance(start, (np.integer, int)):
        n = -((int(start) - int(limit)) // int(delta))
    else:
        n = math.ceil((float(limit) - float(start)) / float(delta))
    return max(int(n), 0)


@dsl.op("Range", since=11)
class Range(dsl.Op):
    """start, start + delta, ... up to (not including) limit; three scalars of one dtype.
    The length is known at compile time when the three are constants."""

    kernels = {"default": range_kernel}

    def verify(self, start, limit, delta):
        for name, s in (("start", start), ("limit", limit), ("delta", delta)):
            if s.dtype != start.dtype or s.dtype not in RANGE_TYPES:
                raise VerifyError(f"Range {name} is {s}; start, limit and delta need one dtype of "
                                  f"{', '.join(map(str, RANGE_TYPES))}")
            if s.size not in (1, None):
                raise VerifyError(f"Range {name} must be a scalar, got {s}")

    def infer(self, start, limit, delta):
        vals = [_scalar(s) for s in (start, limit, delta)]
        n = None if any(v is None for v in vals) else range_length(*vals)
        return TensorSpec((n,), start.dtype)

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0].reshape(1), inputs[2].reshape(1), outputs[0], backend=backend)


# --------------------------------------------------------------------------- ConstantOfShape

@dsl.op("ConstantOfShape", since=9)
class ConstantOfShape(dsl.Op):
    """A tensor of the shape given by the 1-D i64 input, every element ``value`` (a one-element
    tensor; default f32 0)."""

    value: Optional[np.ndarray] = None
    kernels = {"default": fill_kernel}

    def _value(self) -> np.ndarray:
        v = np.zeros(1, np.float32) if self.value is None else np.asarray(self.value)
        if v.size != 1:
            raise VerifyError(f"ConstantOfShape value must have one element, got shape {v.shape}")
        return v.reshape(1)

    def verify(self, shape):
        if shape.dtype != dsl.i64 or shape.ndim != 1:
            raise VerifyError(f"ConstantOfShape input must be a 1-D i64 tensor, got {shape}")
        dims = _shape_value(shape)
        if dims is not None and any(d < 0 for d in dims):
            raise VerifyError(f"ConstantOfShape shape {dims} has a negative dim")

    def infer(self, shape):
        dtype = TensorSpec.of(self._value()).dtype
        dims = _shape_value(shape)
        if dims is None:
            if shape.shape[0] is None:
                raise VerifyError(f"ConstantOfShape needs the length of its input to know the output rank, "
                                  f"got {shape}")
            return TensorSpec((None,) * shape.shape[0], dtype)
        return TensorSpec(tuple(dims), dtype)

    def run(self, impl, inputs, outputs, backend):
        impl(self._value(), outputs[0], backend=backend)


# --------------------------------------------------------------------------- EyeLike, Trilu

def _diag_values(dtype: np.dtype) -> np.ndarray:
    return np.array([0, 1], dtype)


@dsl.op("EyeLike", since=9)
class EyeLike(dsl.Op):
    """A 2-D tensor of the input's shape: ones on diagonal ``k`` (above the main one for
    k > 0), zeros elsewhere; ``dtype`` defaults to the input's."""

    dtype: Optional[dsl.DType] = None
    k: int = 0
    kernels = {"default": diagonal_kernel}

    def verify(self, x):
        if x.ndim != 2:
            raise VerifyError(f"EyeLike input must be 2-D, got {x}")

    def infer(self, x):
        return TensorSpec(x.shape, self.dtype or x.dtype)

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        y3 = y.reshape((1,) + y.shape)
        values = _diag_values(y.dtype)  # also the (unread) x of EYE mode
        impl(values.reshape(1, 1, 2), values, np.array([self.k], np.int64), y3, mode=EYE, backend=backend)


@dsl.op("Trilu", since=14)
class Trilu(dsl.Op):
    """Upper (``upper=1``) or lower triangle of the last two axes, shifted by the optional
    scalar i64 input ``k``; the rest zero."""

    upper: int = 1
    kernels = {"default": diagonal_kernel}

    def verify(self, x, k=None):
        if x.ndim < 2:
            raise VerifyError(f"Trilu input must have at least 2 axes, got {x}")
        if k is not None and (k.dtype != dsl.i64 or k.size not in (1, None)):
            raise VerifyError(f"Trilu k must be an i64 scalar, got {k}")

    def infer(self, x, k=None):
        return x.spec

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        k = np.zeros(1, np.int64) if len(inputs) < 2 or inputs[1] is None else inputs[1].reshape(1)
        shape = (-1,) + x.shape[-2:]
        impl(x.reshape(shape), _diag_values(y.dtype), k, y.reshape(shape), mode=UPPER if self.upper else LOWER,
             backend=backend)


# --------------------------------------------------------------------------- Dropout

class _DropoutFormats:
    """The output keeps the input's format, so a blocked CNN (squeezenet) needs no reorder around
    a Dropout that the model skips anyway; the mask is always plain."""

    formats = ("plain", "nchwc16")
    keeps_padding = True  # y is a copy of x, padding lanes included; the mask has none

    def select_format(self, x, *rest):
        fmt = "nchwc16" if x.format == "nchwc16" else "plain"
        return (fmt,) + tuple(None if t is None else "plain" for t in rest), (fmt, "plain")


@dsl.op("Dropout", since=1, until=9)
class DropoutV1(_DropoutFormats, dsl.Op):
    """Inference dropout (opsets 1-9): the output is the input, the optional mask all ones in the
    input's dtype. ``is_test`` is ignored: opdsl always runs inference."""

    op_type = "Dropout"
    ratio: float = 0.5
    is_test: int = 0
    consumed_inputs: Optional[Tuple[int, ...]] = None
    inplace = {0: 0}
    inplace_noop = True  # run in place with its mask unread, the copy changes nothing: the model skips it
    kernels = {"default": dropout_kernel}

    def infer(self, x):
        return x.spec, TensorSpec(x.shape, x.dtype)


@dsl.op("Dropout", since=10, until=11)
class DropoutV10(DropoutV1):
    """Inference dropout (opsets 10-11): as opsets 1-9, but the mask became bool."""

    def infer(self, x):
        return x.spec, TensorSpec(x.shape, dsl.bool_)


@dsl.op("Dropout", since=12)
class Dropout(_DropoutFormats, dsl.Op):
    """Inference dropout: output = data, mask all True.  ``ratio`` is ignored; a
    ``training_mode`` other than a constant False is an error (opdsl runs inference only)."""

    seed: Optional[int] = None
    inplace = {0: 0}
    inplace_noop = True  # run in place with its mask unread, the copy changes nothing: the model skips it
    kernels = {"default": dropout_kernel}

    def verify(self, data, ratio=None, training_mode=None):
        if training_mode is not None:
            if training_mode.dtype != dsl.bool_:
                raise VerifyError(f"Dropout training_mode must be a bool scalar, got {training_mode}")
            if training_mode.value is None or bool(np.asarray(training_mode.value).reshape(-1)[0]):
                shown = "not a constant" if training_mode.value is None else "True"
                raise VerifyError(f"Dropout training_mode is {shown}: opdsl runs inference only, so "
                                  f"training_mode must be a constant False or absent")

    def infer(self, data, ratio=None, training_mode=None):
        return data.spec, TensorSpec(data.shape, dsl.bool_)

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], outputs[1], backend=backend)


# --------------------------------------------------------------------------- DepthToSpace, SpaceToDepth

def _blocks(what: str, x: TensorSpec, b: int):
    if x.ndim != 4:
        raise VerifyError(f"{what} input must be 4-D (N, C, H, W), got {x}")
    if b < 1:
        raise VerifyError(f"{what} blocksize must be >= 1, got {b}")


@dsl.op("DepthToSpace", since=1)
class DepthToSpace(dsl.Op):
    """(N, C, H, W) -> (N, C/b², H·b, W·b): channel blocks become b×b pixel blocks, in depth-
    column-row order (``DCR``, the default) or column-row-depth (``CRD``)."""

    keeps_quant = "per_tensor"  # moves data: a quantized input's quant carries over

    blocksize: int
    mode: Literal["DCR", "CRD"] = "DCR"
    kernels = {"default": strided_copy_kernel}

    def verify(self, x):
        b = self.blocksize
        _blocks("DepthToSpace", x, b)
        if x.shape[1] is not None and x.shape[1] % (b * b):
            raise VerifyError(f"DepthToSpace channels {x.shape[1]} of input {x} are not a multiple of "
                              f"blocksize² = {b * b}")

    def infer(self, x):
        n, c, h, w = x.shape
        b = self.blocksize
        return TensorSpec((n, None if c is None else c // (b * b), None if h is None else h * b,
                           None if w is None else w * b), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        n, c, h, w = x.shape
        b = self.blocksize
        if self.mode == "DCR":
            view, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
        else:
            view, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
        launch_transpose(impl, x.reshape(view), y, perm, backend=backend)


@dsl.op("SpaceToDepth", since=1)
class SpaceToDepth(dsl.Op):
    """(N, C, H, W) -> (N, C·b², H/b, W/b): each b×b pixel block becomes channels, in
    ``DCR`` order (block row, block column, channel) or ``CRD`` (channel first; opset 28)."""

    keeps_quant = "per_tensor"  # moves data: a quantized input's quant carries over

    blocksize: int
    mode: Literal["DCR", "CRD"] = "DCR"
    kernels = {"default": strided_copy_kernel}

    def verify(self, x):
        b = self.blocksize
        _blocks("SpaceToDepth", x, b)
        for name, d in (("height", x.shape[2]), ("width", x.shape[3])):
            if d is not None and d % b:
                raise VerifyError(f"SpaceToDepth {name} {d} of input {x} is not a multiple of blocksize {b}")

    def infer(self, x):
        n, c, h, w = x.shape
        b = self.blocksize
        return TensorSpec((n, None if c is None else c * b * b, None if h is None else h // b,
                           None if w is None else w // b), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        n, c, h, w = x.shape
        b = self.blocksize
        perm = (0, 3, 5, 1, 2, 4) if self.mode == "DCR" else (0, 1, 3, 5, 2, 4)
        launch_transpose(impl, x.reshape(n, c, h // b, b, w // b, b), y, perm, backend=backend)
