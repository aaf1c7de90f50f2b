"""Pad: constant / reflect / edge / wrap padding; negative pads crop.

One kernel for every mode and dtype: the output is walked row by row (its last axis) over an
8-D view, each output coordinate mapped to its source coordinate by ``pad_source`` (or to the
constant).  Opsets: 1 (``paddings`` attribute), 2-10 (``pads`` attribute), 11-17 (``pads`` and
``constant_value`` inputs), 18 (optional ``axes`` input), 19+ (``wrap`` mode).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl import In, Out, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.gather import ALL, RANK, const_ints, norm_axis, pad8

T = dsl.TypeVar("T")

CONSTANT = 0
REFLECT = 1
EDGE = 2
WRAP = 3
MODES = {"constant": CONSTANT, "reflect": REFLECT, "edge": EDGE, "wrap": WRAP}


@dsl.func
def pad_source(p, n, mode):
    """The input coordinate output coordinate ``p`` (already shifted by the begin pad) reads,
    or -1 for the constant."""
    if p >= 0 and p < n:
        return p
    if mode == CONSTANT or n == 0:
        return -1
    if mode == EDGE:
        return 0 if p < 0 else n - 1
    if mode == WRAP:
        return p % n
    if n == 1:
        return 0
    period = 2 * (n - 1)
    q = p % period
    return q if q < n else period - q


@dsl.kernel
def pad_kernel(x: In[T], value: In[T], y: Out[T], xdims: dsl.Vec[i64, 8], ydims: dsl.Vec[i64, 8],
               begin: dsl.Vec[i64, 8], mode: i32):
    """y = x padded: y[c] = x[pad_source(c - begin)] per axis, value where any axis is outside."""
    width = ydims[7]
    rows = y.size // width if width > 0 else 0
    cval = value.flat[0]
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        rr = r
        off = 0
        inside = True
        stride = xdims[7]
        for a in dsl.static_range(6, -1, -1):
            c = rr % ydims[a]
            rr = rr // ydims[a]
            s = pad_source(c - begin[a], xdims[a], mode)
            if s < 0:
                inside = False
            off += s * stride
            stride *= xdims[a]
        base = r * width
        for j in range(width):
            s = pad_source(j - begin[7], xdims[7], mode)
            if inside and s >= 0:
                y.flat[base + j] = x.flat[off + s]
            else:
                y.flat[base + j] = cval


def pad_shape(what: str, shape: Sequence[Optional[int]], pads: Optional[Sequence[int]]) -> Tuple:
    rank = len(shape)
    if pads is None:
        return (None,) * rank
    if len(pads) != 2 * rank:
        raise VerifyError(f"{what} pads {list(pads)} must have 2 * rank = {2 * rank} entries for input of "
                          f"shape {tuple(shape)}")
    out = []
    for a, d in enumerate(shape):
        if d is None:
            out.append(None)
            continue
        n = d + pads[a] + pads[a + rank]
        if n < 0:
            raise VerifyError(f"{what} pads {list(pads)} crop axis {a} of size {d} below zero")
        out.append(n)
    return tuple(out)


class _Pad(dsl.Op):
    op_type = "Pad"
    mode: str = "constant"
    modes = ("constant", "reflect", "edge")
    allowed = ALL
    kernels = {"default": pad_kernel}

    def _check(self, data):
        if self.mode not in self.modes:
            raise VerifyError(f"Pad mode {self.mode!r} is not accepted at opsets {self.since}-"
                              f"{self.until or 'latest'}; accepted: {', '.join(self.modes)}")
        if data.dtype not in self.allowed:
            raise VerifyError(f"Pad input 'data' has dtype {data.dtype}; accepted: {', '.join(map(str, self.allowed))}")
        if data.ndim > RANK:
            raise VerifyError(f"Pad supports rank <= {RANK}, got {data}")

    def launch(self, impl, x, y, pads: List[int], value: np.ndarray, backend):
        rank = x.ndim
        if rank == 0:
            impl(x.reshape(1), value, y.reshape(1), [1] * RANK, [1] * RANK, [0] * RANK,
                 MODES[self.mode], backend=backend)
            return
        if x.size == 0 and self.mode != "constant":
            raise VerifyError(f"Pad mode {self.mode!r} needs a non-empty input, got shape {x.shape}")
        impl(x.reshape(-1), value.reshape(1), y.reshape(-1), pad8(x.shape, 1), pad8(y.shape, 1),
             pad8(pads[:rank], 0), MODES[self.mode], backend=backend)


class _PadAttr(_Pad):
    value: float = 0.0
    allowed = (dsl.f16, dsl.bf16, dsl.f32, dsl.f64)

    def _pads(self):
        return list(self.pads)

    def verify(self, data):
        self._check(data)
        pad_shape("Pad", data.shape, self._pads())

    def infer(self, data):
        return TensorSpec(pad_shape("Pad", data.shape, self._pads()), data.dtype)

    def run(self, impl, inputs, outputs, backend):
        x = inputs[0]
        self.launch(impl, x, outputs[0], self._pads(), np.full(1, self.value, x.dtype), backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@dsl.op("Pad", since=1, until=1)
class Pad1(_PadAttr):
    paddings: Tuple[int, ...] = ()

    def _pads(self):
        return list(self.paddings)


@dsl.op("Pad", since=2, until=10)
class Pad2(_PadAttr):
    pads: Tuple[int, ...] = ()


class Pad11(_Pad):
    """Pads as an i64 input (begins then ends per axis, or per ``axes`` from opset 18)."""
    takes_axes = False

    def _full_pads(self, data, pads, axes) -> Optional[List[int]]:
        p = const_ints(pads)
        if p is None:
            return None
        rank = data.ndim
        if axes is None:
            return p
        ax = const_ints(axes)
        if ax is None:
            return None
        ax = [norm_axis("Pad", a, rank, "axes") for a in ax]
        if len(p) != 2 * len(ax):
            raise VerifyError(f"Pad pads {p} must have 2 * len(axes) = {2 * len(ax)} entries for axes {ax}")
        full = [0] * (2 * rank)
        for i, a in enumerate(ax):
            full[a], full[a + rank] = p[i], p[i + len(ax)]
        return full

    def verify(self, data, pads, constant_value=None, axes=None):
        self._check(data)
        if pads.dtype != dsl.i64 or pads.ndim != 1:
            raise VerifyError(f"Pad input 'pads' must be a 1-D i64 tensor, got {pads}")
        if constant_value is not None:
            if constant_value.dtype != data.dtype:
                raise VerifyError(f"Pad constant_value {constant_value} must have data's dtype {data.dtype}")
            if constant_value.size not in (None, 0, 1):
                raise VerifyError(f"Pad constant_value must be a scalar, got {constant_value}")
        if axes is not None and not self.takes_axes:
            raise VerifyError(f"Pad takes an axes input from opset 18, this is opset {self.since}-{self.until}")
        if axes is not None and axes.dtype not in (dsl.i32, dsl.i64):
            raise VerifyError(f"Pad input 'axes' must be i32 or i64, got {axes}")

    def infer(self, data, pads, constant_value=None, axes=None):
        full = self._full_pads(data, pads, axes)
        return TensorSpec(pad_shape("Pad", data.shape, full), data.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, pads = inputs[0], inputs[1]
        cv = inputs[2] if len(inputs) > 2 else None
        axes = inputs[3] if len(inputs) > 3 else None
        full = self._full_pads(TensorSpec.of(x, with_value=False), TensorSpec.of(pads),
                               None if axes is None else TensorSpec.of(axes))
        value = np.zeros(1, x.dtype) if cv is None or cv.size == 0 else cv.reshape(1)
        self.launch(impl, x, outputs[0], full, value, backend)


Pad11 = dsl.op("Pad", since=11, until=17)(Pad11)


@dsl.op("Pad", since=18, until=18)
class Pad18(Pad11):
    takes_axes = True


@dsl.op("Pad", since=19)
class Pad(Pad18):
    """data padded by ``pads`` (begin values, then end values; negative crops) in ``mode``
    constant (constant_value, default 0), reflect, edge or wrap; ``axes`` selects axes."""
    modes = ("constant", "reflect", "edge", "wrap")


@dsl.op("CenterCropPad", since=18)
class CenterCropPad(_Pad):
    """Crop or zero-pad ``axes`` (default: all) to ``shape``, centered: a crop drops
    (in - out) // 2 leading elements, a pad adds (out - in) // 2 leading zeros."""
    op_type = "CenterCropPad"
    axes: Optional[Tuple[int, ...]] = None

    def _axes(self, rank: int) -> List[int]:
        if self.axes is None:
            return list(range(rank))
        return [norm_axis("CenterCropPad", a, rank, "axes") for a in self.axes]

    def _target(self, data, shape):
        sizes = const_ints(shape)
        if sizes is None:
            return None
        axes = self._axes(data.ndim)
        if len(sizes) != len(axes):
            raise VerifyError(f"CenterCropPad shape {sizes} needs one size per axis of {axes}")
        out = list(data.shape)
        for a, n in zip(axes, sizes):
            if n < 0:
                raise VerifyError(f"CenterCropPad shape {sizes} has a negative size")
            out[a] = n
        return out

    def verify(self, input_data, shape):
        self._check(input_data)
        if shape.dtype not in (dsl.i32, dsl.i64) or shape.ndim != 1:
            raise VerifyError(f"CenterCropPad shape must be a 1-D i32/i64 tensor, got {shape}")
        self._target(input_data, shape)

    def infer(self, input_data, shape):
        out = self._target(input_data, shape)
        return TensorSpec(tuple(out) if out is not None else (None,) * input_data.ndim, input_data.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        begin = [(o - i) // 2 if o >= i else -((i - o) // 2) for i, o in zip(x.shape, y.shape)]
        self.launch(impl, x, y, begin, np.zeros(1, x.dtype), backend)
