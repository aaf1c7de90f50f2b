"""ONNX MelWeightMatrix (opset 17): the (dft_length // 2 + 1, num_mel_bins) matrix of
triangular mel filters that turns a linear spectrum (DFT/STFT magnitudes) into mel bins.

Filter edges are num_mel_bins + 2 points spaced evenly on the mel scale
(mel(f) = 2595·log10(1 + f/700)) between the edge frequencies; as in onnx's reference and
onnxruntime the spacing divides the mel range by num_mel_bins + 2, and each edge is mapped to
the spectrum bin floor((dft_length + 1)·f / sample_rate).  One output element per step,
computed in f64; the scalar inputs are read in ``run`` (they give the output's shape).
"""
from __future__ import annotations

import math

import numpy as np

import dsl
from dsl import Out, f64, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS, NUMERIC
from ops.quant import ONNX_DTYPES

T = dsl.TypeVar("T")
LN10 = math.log(10.0)


@dsl.func
def mel_edge(k, low_mel, step, dft_length, sample_rate):
    """Spectrum bin of filter edge k."""
    hz = 700 * dsl.expm1((f64(k) * step + low_mel) / 2595 * LN10)
    return i64(dsl.floor(f64(dft_length + 1) * hz / f64(sample_rate)))


@dsl.kernel
def mel_kernel(y: Out[T, 2], low_mel: f64, step: f64, dft_length: i64, sample_rate: i64):
    """y[j, i]: the rising edge (j - left)/(center - left) up to the center, the falling edge
    (right - j)/(right - center) after it, 0 elsewhere (a filter of width 0 is 1 at its center)."""
    bins = y.shape[1]
    lo, hi = dsl.split(y.size)
    for idx in range(lo, hi):
        i = idx % bins
        j = idx // bins
        left = mel_edge(i, low_mel, step, dft_length, sample_rate)
        center = mel_edge(i + 1, low_mel, step, dft_length, sample_rate)
        right = mel_edge(i + 2, low_mel, step, dft_length, sample_rate)
        v = f64(0)
        if j == center:
            v = f64(1)
        elif j >= left and j < center:
            v = f64(j - left) / f64(center - left)
        elif j > center and j < right:
            v = f64(right - j) / f64(right - center)
        y.flat[idx] = v


def _scalar(spec):
    return None if spec is None or spec.value is None else np.asarray(spec.value).reshape(-1)[0]


@dsl.op("MelWeightMatrix", since=17)
class MelWeightMatrix(dsl.Op):
    """num_mel_bins, dft_length, sample_rate (int scalars), lower/upper_edge_hertz (float
    scalars) -> (dft_length // 2 + 1, num_mel_bins) of ``output_datatype``."""
    output_datatype: int = 1
    kernels = {"default": mel_kernel}
    replay = False  # run() reads the scalar inputs

    def verify(self, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        for name, s, allowed in (("num_mel_bins", num_mel_bins, (dsl.i32, dsl.i64)),
                                 ("dft_length", dft_length, (dsl.i32, dsl.i64)),
                                 ("sample_rate", sample_rate, (dsl.i32, dsl.i64)),
                                 ("lower_edge_hertz", lower_edge_hertz, FLOATS),
                                 ("upper_edge_hertz", upper_edge_hertz, FLOATS)):
            if s.dtype not in allowed or s.size not in (None, 1):
                raise VerifyError(f"MelWeightMatrix {name} must be a scalar of {', '.join(map(str, allowed))}, got {s}")
        dt = ONNX_DTYPES.get(self.output_datatype)
        if dt is None or dt not in NUMERIC:
            raise VerifyError(f"MelWeightMatrix output_datatype {self.output_datatype} is not a numeric opdsl dtype")
        if num_mel_bins.dtype != dft_length.dtype or dft_length.dtype != sample_rate.dtype:
            raise VerifyError("MelWeightMatrix num_mel_bins, dft_length and sample_rate need one int dtype, got "
                              f"{num_mel_bins.dtype}, {dft_length.dtype}, {sample_rate.dtype}")
        for name, s in (("num_mel_bins", num_mel_bins), ("dft_length", dft_length), ("sample_rate", sample_rate)):
            v = _scalar(s)
            if v is not None and v <= 0:
                raise VerifyError(f"MelWeightMatrix {name} must be > 0, got {v}")

    def infer(self, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
        bins, n = _scalar(num_mel_bins), _scalar(dft_length)
        return TensorSpec((None if n is None else int(n) // 2 + 1, None if bins is None else int(bins)),
                          ONNX_DTYPES[self.output_datatype])

    def run(self, impl, inputs, outputs, backend):
        bins, n, rate, low, high = (np.asarray(a).reshape(-1)[0] for a in inputs)
        if min(bins, n, rate) <= 0:
            raise VerifyError(f"MelWeightMatrix num_mel_bins, dft_length and sample_rate must be > 0, got "
                              f"{bins}, {n}, {rate}")
        low_mel = 2595 * math.log1p(float(low) / 700) / LN10
        high_mel = 2595 * math.log1p(float(high) / 700) / LN10
        impl(outputs[0], low_mel=low_mel, step=(high_mel - low_mel) / (int(bins) + 2), dft_length=int(n),
             sample_rate=int(rate), backend=backend)
