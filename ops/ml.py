"""Classic-ML ops of the ai.onnx.ml domain: Binarizer and ArrayFeatureExtractor (opset 1),
LabelEncoder (opset 4, numeric keys and values) and TreeEnsemble (opset 5).

String tensors are not opdsl dtypes, so LabelEncoder's string keys/values and
ArrayFeatureExtractor on strings are rejected by ``verify``.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, f64, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import require_dtype

T = dsl.TypeVar("T")
DOMAIN = "ai.onnx.ml"
ML_TYPES = (dsl.f32, dsl.f64, dsl.i64, dsl.i32)


@dsl.kernel
def binarizer_kernel(x: In[T], y: Out[T], threshold: f64):
    """1 where x > threshold, else 0 (a NaN gives 0: NaN > t is false)."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = 1 if f64(x.flat[i]) > threshold else 0


@dsl.kernel
def feature_kernel(x: In[T], idx: In[i64], y: Out[T], last: i64):
    """y[r, j] = x[r, idx[j]] with x viewed as (rows, last)."""
    k = idx.size
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        j = i % k
        r = i // k
        y.flat[i] = x.flat[r * last + idx.flat[j]]


@dsl.op("Binarizer", domain=DOMAIN, since=1)
class Binarizer(dsl.Op):
    """x > threshold as 1/0 in x's dtype."""
    threshold: float = 0.0
    kernels = {"default": binarizer_kernel}
    inplace = {0: 0}

    def verify(self, x):
        require_dtype("Binarizer", x, ML_TYPES, "X")

    def infer(self, x):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], threshold=float(self.threshold), backend=backend)


@dsl.op("ArrayFeatureExtractor", domain=DOMAIN, since=1)
class ArrayFeatureExtractor(dsl.Op):
    """X[..., Y] for i64 indices Y (flattened): X.shape[:-1] + (Y.size,); a 1-D X gives (1, Y.size)."""
    kernels = {"default": feature_kernel}
    replay = False  # run() range-checks the indices at every run

    def verify(self, x, y):
        require_dtype("ArrayFeatureExtractor", x, ML_TYPES, "X")
        require_dtype("ArrayFeatureExtractor", y, (dsl.i64,), "Y")
        if x.ndim < 1:
            raise VerifyError(f"ArrayFeatureExtractor X must have rank >= 1, got {x}")

    def infer(self, x, y):
        k = y.size
        return TensorSpec((1, k) if x.ndim == 1 else tuple(x.shape[:-1]) + (k,), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, idx = inputs
        last = x.shape[-1]
        if idx.size and (idx.min() < 0 or idx.max() >= last):
            raise VerifyError(f"ArrayFeatureExtractor Y indices must lie in [0, {last}) (X's last axis), got "
                              f"{idx.min()}..{idx.max()}")
        if outputs[0].size:
            impl(x, np.ascontiguousarray(idx.reshape(-1)), outputs[0], last=last, backend=backend)
