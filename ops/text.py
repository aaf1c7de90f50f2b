"""ONNX TfIdfVectorizer (opset 9) on integer token ids: count, per input row, the n-grams of
a pool given as attributes, with up to ``max_skip_count`` tokens skipped between the items of
an n-gram, then weight the counts (TF: counts; IDF: the weight, or 1, where the count is
non-zero; TFIDF: weight · count).

The pool (``pool_int64s`` cut by ``ngram_counts`` into groups of 1-grams, 2-grams...) is
unpacked once per op into padded arrays: one row per n-gram whose length lies in
[min_gram_length, max_gram_length], with its output column (``ngram_indexes``); a repeated
n-gram counts for its last column only, as in onnxruntime.  ``tfidf_kernel`` computes one
output element per step by counting the n-grams of its column, so there are no write
conflicts.  As in the reference, a 1-gram is counted once (skips only separate items of
longer n-grams).  String pools (``pool_strings``) are not supported: strings are not opdsl
dtypes.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError

I = dsl.TypeVar("I")  # noqa: E741  token dtype
MODES = {"TF": 0, "IDF": 1, "TFIDF": 2}
TF, IDF, TFIDF = 0, 1, 2


@dsl.kernel
def tfidf_kernel(x: In[I, 2], grams: In[i64, 2], lens: In[i64], cols: In[i64], weights: In[f32], y: Out[f32, 2],
                 max_skip: i64, mode: i32, has_weights: bool_):
    """y[r, c] from the occurrences in row r of every pool n-gram g with cols[g] == c."""
    length = x.shape[1]
    out_n = y.shape[1]
    lo, hi = dsl.split(y.size)
    for idx in range(lo, hi):
        c = idx % out_n
        r = idx // out_n
        count = i64(0)
        for g in range(lens.size):
            if cols[g] == c:
                n = lens[g]
                for d in range(1, max_skip + 2):
                    if n == 1 and d > 1:
                        break
                    s = 0
                    while s + d * (n - 1) < length:
                        hit = True
                        for t in range(n):
                            if i64(x[r, s + d * t]) != grams[g, t]:
                                hit = False
                                break
                        if hit:
                            count += 1
                        s += 1
        v = f32(count)
        if mode == IDF:
            v = f32(0)
            if count > 0:
                v = weights[c] if has_weights else f32(1)
        elif mode == TFIDF and has_weights:
            v = weights[c] * f32(count)
        y[r, c] = v


@dsl.op("TfIdfVectorizer", since=9)
class TfIdfVectorizer(dsl.Op):
    """X (C,) or (N, C) int32/int64 tokens -> f32 (max(ngram_indexes) + 1,) or (N, ...)."""
    mode: str
    min_gram_length: int
    max_gram_length: int
    max_skip_count: int
    ngram_counts: Tuple[int, ...]
    ngram_indexes: Tuple[int, ...]
    pool_int64s: Tuple[int, ...] = ()
    pool_strings: Tuple[str, ...] = ()
    weights: Tuple[float, ...] = ()
    kernels = {"default": tfidf_kernel}

    def _pool(self):
        """(grams (G, max_n) i64, lengths (G,), output columns (G,)) for the n-grams in the length range."""
        found = {}
        pool, counts = list(self.pool_int64s), list(self.ngram_counts)
        k = 0
        for i, start in enumerate(counts):
            end = counts[i + 1] if i + 1 < len(counts) else len(pool)
            n = i + 1
            for j in range(start, end - n + 1, n):
                if self.min_gram_length <= n <= self.max_gram_length:
                    found[tuple(pool[j:j + n])] = self.ngram_indexes[k]   # a repeat keeps its last column
                k += 1
        width = max((len(t) for t in found), default=1)
        grams = np.zeros((max(len(found), 1), width), np.int64)
        lens = np.zeros(len(found), np.int64)
        cols = np.zeros(len(found), np.int64)
        for g, (t, col) in enumerate(found.items()):
            grams[g, :len(t)], lens[g], cols[g] = t, len(t), col
        return grams, lens, cols

    def verify(self, x):
        if self.pool_strings:
            raise VerifyError("TfIdfVectorizer pool_strings is not supported: strings are not opdsl dtypes; "
                              "use pool_int64s with integer token ids")
        if x.dtype not in (dsl.i32, dsl.i64) or x.ndim not in (1, 2):
            raise VerifyError(f"TfIdfVectorizer X must be a 1-D or 2-D int32/int64 tensor of token ids, got {x}")
        if self.mode not in MODES:
            raise VerifyError(f"TfIdfVectorizer mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not 1 <= self.min_gram_length <= self.max_gram_length or self.max_skip_count < 0:
            raise VerifyError(f"TfIdfVectorizer needs 1 <= min_gram_length <= max_gram_length and max_skip_count "
                              f">= 0, got {self.min_gram_length}, {self.max_gram_length}, {self.max_skip_count}")
        counts = list(self.ngram_counts)
        if not self.ngram_indexes or any(i < 0 for i in self.ngram_indexes) or \
                counts != sorted(counts) or any(c < 0 or c > len(self.pool_int64s) for c in counts):
            raise VerifyError(f"TfIdfVectorizer ngram_counts {counts} must be ascending offsets into pool_int64s "
                              f"(length {len(self.pool_int64s)}) and ngram_indexes non-empty and non-negative")
        total = sum(((counts[i + 1] if i + 1 < len(counts) else len(self.pool_int64s)) - c) // (i + 1)
                    for i, c in enumerate(counts))
        if len(self.ngram_indexes) < total:
            raise VerifyError(f"TfIdfVectorizer has {total} pool n-grams but {len(self.ngram_indexes)} ngram_indexes; "
                              f"each n-gram needs its output column")
        if self.weights and len(self.weights) < max(self.ngram_indexes) + 1:
            raise VerifyError(f"TfIdfVectorizer weights has {len(self.weights)} values; it needs one per output "
                              f"column ({max(self.ngram_indexes) + 1})")

    def infer(self, x):
        out = max(self.ngram_indexes) + 1
        return TensorSpec((out,) if x.ndim == 1 else (x.shape[0], out), dsl.f32)

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        if y.size == 0:
            return
        grams, lens, cols = self._pool()
        weights = np.asarray(self.weights or (0.0,), np.float32)
        impl(x.reshape(1, -1) if x.ndim == 1 else x, grams, lens, cols, weights, y.reshape(-1, y.shape[-1]), max_skip=self.max_skip_count,
             mode=MODES[self.mode], has_weights=bool(self.weights), backend=backend)
