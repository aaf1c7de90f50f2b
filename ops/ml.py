"""Classic-ML ops of the ai.onnx.ml domain: Binarizer and ArrayFeatureExtractor (opset 1) and
LabelEncoder (opset 2+, numeric keys and values; tensor attributes from 4).  The tree
ensembles live in ops/tree_ensemble.py.

String tensors are not opdsl dtypes, so LabelEncoder's string keys/values and
ArrayFeatureExtractor on strings are rejected by ``verify``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, f64, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import require_dtype

T = dsl.TypeVar("T")
U = dsl.TypeVar("U")
DOMAIN = "ai.onnx.ml"
ML_TYPES = (dsl.f32, dsl.f64, dsl.i64, dsl.i32)
LABEL_TYPES = (dsl.i64, dsl.f32, dsl.i32, dsl.i16, dsl.f64)



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


@dsl.kernel
def label_kernel(x: In[T], keys: In[T], values: In[U], default: In[U], y: Out[U]):
    """y = values[k] for the last k with keys[k] == x (NaN keys match NaN), else default[0]."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        out = default[0]
        for k in range(keys.size):
            key = keys[k]
            if key == v or (key != key and v != v):
                out = values[k]
        y.flat[i] = out


@dsl.op("LabelEncoder", domain=DOMAIN, since=2)
class LabelEncoder(dsl.Op):
    """Maps each element through keys -> values (numeric: keys_int64s/keys_floats/keys_tensor,
    values_int64s/values_floats/values_tensor), others to the default.  String keys or values
    are not supported (strings are not opdsl dtypes)."""
    keys_int64s: Tuple[int, ...] = ()
    keys_floats: Tuple[float, ...] = ()
    keys_strings: Tuple[str, ...] = ()
    keys_tensor: Optional[np.ndarray] = None
    values_int64s: Tuple[int, ...] = ()
    values_floats: Tuple[float, ...] = ()
    values_strings: Tuple[str, ...] = ()
    values_tensor: Optional[np.ndarray] = None
    default_int64: int = -1
    default_float: float = -0.0
    default_string: str = "_Unused"
    default_tensor: Optional[np.ndarray] = None
    kernels = {"default": label_kernel}

    def _keys(self) -> np.ndarray:
        if self.keys_tensor is not None:
            return np.asarray(self.keys_tensor).reshape(-1)
        if self.keys_int64s:
            return np.asarray(self.keys_int64s, np.int64)
        return np.asarray(self.keys_floats, np.float32)

    def _values(self) -> np.ndarray:
        if self.values_tensor is not None:
            return np.asarray(self.values_tensor).reshape(-1)
        if self.values_int64s:
            return np.asarray(self.values_int64s, np.int64)
        return np.asarray(self.values_floats, np.float32)

    def _default(self, values: np.ndarray) -> np.ndarray:
        if self.default_tensor is not None:
            return np.asarray(self.default_tensor, values.dtype).reshape(-1)[:1]
        if values.dtype == np.int64 and self.values_tensor is None:
            return np.array([self.default_int64], np.int64)
        if values.dtype == np.float32 and self.values_tensor is None:
            return np.array([self.default_float], np.float32)
        return np.array([-1 if values.dtype.kind == "i" else -0.0], values.dtype)

    def verify(self, x):
        strings = [n for n in ("keys_strings", "values_strings") if getattr(self, n)] + \
            [n for n in ("keys_tensor", "values_tensor", "default_tensor")
             if getattr(self, n) is not None and np.asarray(getattr(self, n)).dtype.kind in "OUS"]
        if strings:
            raise VerifyError(f"LabelEncoder {', '.join(strings)}: string keys/values are not supported "
                              f"(strings are not opdsl dtypes)")
        keys, values = self._keys(), self._values()
        if len(keys) != len(values):
            raise VerifyError(f"LabelEncoder needs as many keys as values, got {len(keys)} keys and {len(values)} values")
        require_dtype("LabelEncoder", x, LABEL_TYPES, "X")
        if keys.dtype != x.dtype.np:
            raise VerifyError(f"LabelEncoder keys are {keys.dtype}, X is {x.dtype}; they must have one type")
        if TensorSpec.of(values).dtype not in LABEL_TYPES:
            raise VerifyError(f"LabelEncoder values dtype {values.dtype} is not supported")

    def infer(self, x):
        return TensorSpec(x.shape, TensorSpec.of(self._values()).dtype)

    def run(self, impl, inputs, outputs, backend):
        values = self._values()
        keys = self._keys()
        if outputs[0].size == 0:
            return
        impl(inputs[0], np.ascontiguousarray(keys), np.ascontiguousarray(values), self._default(values), outputs[0],
             backend=backend)
