"""Signal processing: DFT (opsets 17, 20), STFT (17), HannWindow, HammingWindow,
BlackmanWindow (17).

``dft_kernel`` computes one output bin per work item as a direct sum over the frame,
Σ_j x[j]·e^{∓2πi·jk/L}, with the angle reduced to (j·k mod L)/L before the cosine so long
transforms keep f32 accuracy.  It serves the forward, inverse (÷L), one-sided forward (L//2+1
bins), one-sided inverse (a real signal from the Hermitian half spectrum) and the STFT, whose
frames are windowed slices of the signal.  It is O(L²) per frame: fine for the short frames of
audio front-ends, not an FFT.  Window generators evaluate their formulas per element.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

import dsl
from dsl import In, Out, bool_, f64, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS
from ops.quant import ONNX_DTYPES

T = dsl.TypeVar("T")
TWO_PI = 2 * math.pi

HANN, HAMMING, BLACKMAN = 0, 1, 2


@dsl.kernel
def dft_kernel(x: In[T], window: In[T, 1], y: Out[T], n_in: i64, inner: i64, comps: i64, length: i64, bins: i64,
               frames: i64, step: i64, inverse: bool_, half_inverse: bool_, windowed: bool_):
    """x (outer, n_in, inner, comps); y (outer, frames, bins, inner, 2) -- or (..., 1) for the
    one-sided inverse; frame f reads samples f·step + j, j < length (zero past n_in)."""
    out_comps = 1 if half_inverse else 2
    lo, hi = dsl.split(y.size // out_comps)
    for w in range(lo, hi):
        q = w % inner
        r = w // inner
        k = r % bins
        r = r // bins
        f = r % frames
        o = r // frames
        re = f64(0)
        im = f64(0)
        for j in range(length):  # one-sided inverse: bins past n_in mirror earlier ones (Hermitian)
            theta = TWO_PI * f64((j * k) % length) / f64(length)
            c = dsl.cos(theta)
            s = dsl.sin(theta)
            if half_inverse:
                src = j if j < n_in else length - j
                p = ((o * n_in + src) * inner + q) * comps
                a = f64(x.flat[p])
                b = f64(x.flat[p + 1]) if comps == 2 else f64(0)
                if j >= n_in:
                    b = -b
                re += a * c - b * s
            else:
                sample = f * step + j
                if sample < n_in:
                    p = ((o * n_in + sample) * inner + q) * comps
                    a = f64(x.flat[p])
                    b = f64(x.flat[p + 1]) if comps == 2 else f64(0)
                    if windowed:
                        a = a * f64(window[j])
                        b = b * f64(window[j])
                    if inverse:
                        re += a * c - b * s
                        im += a * s + b * c
                    else:
                        re += a * c + b * s
                        im += b * c - a * s
        if inverse:
            re = re / f64(length)
            im = im / f64(length)
        if half_inverse:
            y.flat[w] = re
        else:
            y.flat[2 * w] = re
            y.flat[2 * w + 1] = im


@dsl.kernel
def window_kernel(y: Out[T], kind: i64, periodic: bool_):
    n = y.size if periodic else y.size - 1
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        t = TWO_PI * f64(i) / f64(n)
        v = f64(0.42) - f64(0.5) * dsl.cos(t) + f64(0.08) * dsl.cos(2 * t)
        if kind == HANN:
            s = dsl.sin(t / 2)
            v = s * s
        elif kind == HAMMING:
            v = f64(25.0 / 46.0) - (1 - f64(25.0 / 46.0)) * dsl.cos(t)
        y.flat[i] = v


def _scalar(spec: Optional[TensorSpec]) -> Optional[int]:
    if spec is None or spec.value is None:
        return None
    return int(np.asarray(spec.value).reshape(-1)[0])


# --------------------------------------------------------------------------- DFT

class _DFT(dsl.Op):
    inverse: int = 0
    onesided: int = 0
    kernels = {"default": dft_kernel}

    def _length(self, x, axis: int, dft_length=None) -> Optional[int]:
        given = _scalar(dft_length)
        if dft_length is not None and given is None:
            return None
        if given is not None:
            return given
        n = x.shape[axis]
        if n is None:
            return None
        return 2 * (n - 1) if self.inverse and self.onesided else n

    def _check(self, x, axis: int, dft_length) -> None:
        if x.dtype not in FLOATS:
            raise VerifyError(f"DFT input must be a float tensor, got {x}")
        if x.ndim < 2 or x.shape[-1] not in (None, 1, 2):
            raise VerifyError(f"DFT input must end in a real (1) or complex (2) axis, got {x}")
        if not 0 <= axis < x.ndim - 1:
            raise VerifyError(f"DFT axis {axis} must name a signal axis of {x} (not the last, complex axis)")
        n = self._length(x, axis, dft_length)
        if n is not None and n < 1:
            raise VerifyError(f"DFT dft_length must be >= 1, got {n}")

    def _out(self, x, axis: int, dft_length):
        n = self._length(x, axis, dft_length)
        shape = list(x.shape)
        if self.inverse and self.onesided:
            shape[axis], shape[-1] = n, 1
        else:
            shape[axis] = None if n is None else (n // 2 + 1 if self.onesided else n)
            shape[-1] = 2
        return TensorSpec(tuple(shape), x.dtype)

    def _launch(self, impl, inputs, y, axis: int, backend) -> None:
        x, dft_length = inputs[0], (inputs[1] if len(inputs) > 1 else None)
        if dft_length is not None:
            length = int(np.asarray(dft_length).reshape(-1)[0])
        else:
            length = 2 * (x.shape[axis] - 1) if self.inverse and self.onesided else x.shape[axis]
        inner = int(np.prod(x.shape[axis + 1:-1], dtype=np.int64))
        half_inverse = bool(self.inverse and self.onesided)
        bins = y.shape[axis]
        impl(x, np.zeros(1, x.dtype), y, x.shape[axis], inner, x.shape[-1], length, bins, 1, 0, bool(self.inverse),
             half_inverse, False, backend=backend)


@dsl.op("DFT", since=17, until=19)
class DFT17(_DFT):
    """DFT along the ``axis`` attribute (default 1); ``dft_length`` an optional input."""

    axis: int = 1

    def verify(self, x, dft_length=None):
        self._check(x, self.axis % x.ndim, dft_length)

    def infer(self, x, dft_length=None):
        return self._out(x, self.axis % x.ndim, dft_length)

    def run(self, impl, inputs, outputs, backend):
        self._launch(impl, inputs, outputs[0], self.axis % inputs[0].ndim, backend)


@dsl.op("DFT", since=20)
class DFT(_DFT):
    """DFT along the optional ``axis`` input (default -2); ``dft_length`` an optional input."""

    def _axis_of(self, x, axis_spec) -> Optional[int]:
        a = -2 if axis_spec is None else _scalar(axis_spec)
        return None if a is None else a % x.ndim

    def verify(self, x, dft_length=None, axis=None):
        a = self._axis_of(x, axis)
        if a is not None:  # else known at run time, when the model infers again with values
            self._check(x, a, dft_length)

    def infer(self, x, dft_length=None, axis=None):
        a = self._axis_of(x, axis)
        if a is None:
            return TensorSpec((None,) * x.ndim, x.dtype)
        return self._out(x, a, dft_length)

    def run(self, impl, inputs, outputs, backend):
        given = list(inputs[1:]) + [None, None]
        axis = -2 if given[1] is None else int(np.asarray(given[1]).reshape(-1)[0])
        self._launch(impl, inputs[:2], outputs[0], axis % inputs[0].ndim, backend)


# --------------------------------------------------------------------------- STFT

@dsl.op("STFT", since=17)
class STFT(dsl.Op):
    """Short-time Fourier transform of (batch, length, 1|2) signals: frames of ``frame_length``
    (the window's length when not given) every ``frame_step`` samples, windowed, transformed."""

    onesided: int = 1
    kernels = {"default": dft_kernel}

    def _frame(self, signal, window, frame_length) -> Optional[int]:
        n = _scalar(frame_length)
        if n is None and window is not None:
            n = window.shape[0]
        return n

    def verify(self, signal, frame_step, window=None, frame_length=None):
        if signal.dtype not in FLOATS or signal.ndim != 3 or signal.shape[-1] not in (None, 1, 2):
            raise VerifyError(f"STFT signal must be (batch, length, 1 or 2) floats, got {signal}")
        if window is None and frame_length is None:
            raise VerifyError("STFT needs a window or a frame_length input")
        if window is not None and (window.ndim != 1 or window.dtype != signal.dtype):
            raise VerifyError(f"STFT window must be 1-D of the signal's dtype {signal.dtype}, got {window}")
        if self.onesided and signal.shape[-1] == 2:
            raise VerifyError("STFT onesided=1 needs a real signal (last axis 1)")

    def infer(self, signal, frame_step, window=None, frame_length=None):
        n = self._frame(signal, window, frame_length)
        step = _scalar(frame_step)
        frames = None
        if n is not None and step and signal.shape[1] is not None:
            frames = (signal.shape[1] - n) // step + 1
        bins = None if n is None else (n // 2 + 1 if self.onesided else n)
        return TensorSpec((signal.shape[0], frames, bins, 2), signal.dtype)

    def run(self, impl, inputs, outputs, backend):
        signal, step = inputs[0], int(np.asarray(inputs[1]).reshape(-1)[0])
        window = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        y = outputs[0]
        n = window.shape[0] if len(inputs) < 4 or inputs[3] is None else int(np.asarray(inputs[3]).reshape(-1)[0])
        impl(signal, np.zeros(1, signal.dtype) if window is None else window, y, signal.shape[1], 1, signal.shape[2],
             n, y.shape[2], y.shape[1], step, False, False, window is not None, backend=backend)


# --------------------------------------------------------------------------- windows

class _Window(dsl.Op):
    kind = HANN
    output_datatype: int = 1
    periodic: int = 1
    kernels = {"default": window_kernel}

    def verify(self, size):
        if size.dtype not in (dsl.i32, dsl.i64) or size.size not in (None, 1):
            raise VerifyError(f"{self.op_type} size must be an int32/int64 scalar, got {size}")
        dt = ONNX_DTYPES.get(self.output_datatype)
        if dt is None:
            raise VerifyError(f"{self.op_type} output_datatype {self.output_datatype} is not an opdsl dtype")

    def infer(self, size):
        return TensorSpec((_scalar(size),), ONNX_DTYPES[self.output_datatype])

    def run(self, impl, inputs, outputs, backend):
        impl(outputs[0], self.kind, bool(self.periodic), backend=backend)


@dsl.op("HannWindow", since=17)
class HannWindow(_Window):
    """sin²(πn/N), N = size (periodic) or size - 1."""
    kind = HANN


@dsl.op("HammingWindow", since=17)
class HammingWindow(_Window):
    """25/46 - 21/46·cos(2πn/N)."""
    kind = HAMMING


@dsl.op("BlackmanWindow", since=17)
class BlackmanWindow(_Window):
    """0.42 - 0.5·cos(2πn/N) + 0.08·cos(4πn/N)."""
    kind = BLACKMAN
