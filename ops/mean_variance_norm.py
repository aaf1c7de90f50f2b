"""ONNX MeanVarianceNormalization (opset 9+) as a composed op: (X - mean) / (std + 1e-9)
over ``axes`` (default N, H, W: per channel).  The variance is the mean of (X - mean)², not
ONNX's E[X²] - E[X]², which loses digits to cancellation when the mean is large; the
ReduceMean, Sub, Mul, Sqrt, Add and Div kernels do the work."""
from __future__ import annotations

from typing import Tuple

import numpy as np

import dsl
from ops.binary import Div
from ops.elementwise import Add, Mul, Sub
from ops.reduce import ReduceMean
from ops.unary import Sqrt

EPSILON = 1e-9  # ONNX's: added to the standard deviation


@dsl.composed("MeanVarianceNormalization", since=9)
def mean_variance_normalization(X, *, axes: Tuple[int, ...] = (0, 2, 3)):
    """Normalize X to zero mean and unit variance over ``axes``."""
    rank = len(X.shape)
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        raise dsl.VerifyError(f"MeanVarianceNormalization axes entry {bad[0]} is out of range for X of rank "
                              f"{rank}; accepted: {-rank}..{rank - 1}")
    which = np.array(axes, np.int64)
    mean = ReduceMean(X, which, keepdims=1)
    centered = Sub(X, mean)
    var = ReduceMean(Mul(centered, centered), which, keepdims=1)
    return Div(centered, Add(Sqrt(var), EPSILON))
