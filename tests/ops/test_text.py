"""TfIdfVectorizer on every backend against a Python reference: TF/IDF/TFIDF, skips, gram
length ranges, weights, 1-D and 2-D inputs, int32 tokens; errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

POOL = dict(ngram_counts=(0, 4), pool_int64s=(2, 3, 5, 4, 5, 6, 7, 8, 6, 7), ngram_indexes=(0, 1, 2, 3, 4, 5, 6))
X = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int64)


def reference(x, mode, min_gram_length, max_gram_length, max_skip_count, pool_int64s, ngram_counts, ngram_indexes,
              weights=()):
    min_n, max_n, skip = min_gram_length, max_gram_length, max_skip_count
    grams, k = {}, 0
    for i, start in enumerate(ngram_counts):
        end = ngram_counts[i + 1] if i + 1 < len(ngram_counts) else len(pool_int64s)
        for j in range(start, end - i, i + 1):
            if min_n <= i + 1 <= max_n:
                grams[tuple(pool_int64s[j:j + i + 1])] = ngram_indexes[k]
            k += 1
    rows = x.reshape(-1, x.shape[-1])
    out = np.zeros((len(rows), max(ngram_indexes) + 1), np.float32)
    for r, row in enumerate(rows):
        for n in range(min_n, max_n + 1):
            for d in range(1, (skip if n > 1 else 0) + 2):
                for s in range(len(row) - d * (n - 1)):
                    col = grams.get(tuple(int(row[s + d * t]) for t in range(n)))
                    if col is not None:
                        out[r, col] += 1
    w = np.asarray(weights, np.float32) if weights else np.ones(out.shape[1], np.float32)
    if mode == "IDF":
        out = np.where(out > 0, w, 0).astype(np.float32)
    elif mode == "TFIDF":
        out = out * w
    return out.reshape(x.shape[:-1] + (out.shape[1],))


@pytest.mark.parametrize("mode,min_n,max_n,skip", [("TF", 1, 2, 0), ("TF", 2, 2, 3), ("IDF", 1, 2, 1),
                                                   ("TFIDF", 1, 1, 2)])
def test_modes_and_skips(backend, mode, min_n, max_n, skip):
    attrs = dict(mode=mode, min_gram_length=min_n, max_gram_length=max_n, max_skip_count=skip, **POOL)
    y = ops.TfIdfVectorizer(X, backend=backend, **attrs)
    assert y.shape == (2, 7) and y.dtype == np.float32
    np.testing.assert_array_equal(y, reference(X, **attrs))


def test_weights_1d_int32_in_a_graph(backend):
    attrs = dict(mode="TFIDF", min_gram_length=1, max_gram_length=2, max_skip_count=2,
                 weights=(0.5, 1, 2, 3, 4, 5, 6), **POOL)
    g = dsl.Graph("tfidf")
    xi = g.input("x", (9,), dsl.i32)
    g.output(ops.TfIdfVectorizer(xi, **attrs), "y")
    x = np.array([2, 5, 6, 7, 3, 6, 8, 7, 4], np.int32)
    y = g.compile(backend=backend).run({"x": x})["y"]
    assert y.shape == (7,)
    np.testing.assert_allclose(y, reference(x, **attrs))


def test_errors():
    base = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0, **POOL)
    with pytest.raises(VerifyError, match="pool_strings is not supported: strings are not opdsl dtypes"):
        ops.TfIdfVectorizer(X, **{**base, "pool_int64s": (), "pool_strings": ("a", "b")}, backend="interpreter")
    with pytest.raises(VerifyError, match="X must be a 1-D or 2-D int32/int64 tensor of token ids"):
        ops.TfIdfVectorizer(X.astype(np.float32), **base, backend="interpreter")
    with pytest.raises(VerifyError, match="mode 'BM25' is not one of TF, IDF, TFIDF"):
        ops.TfIdfVectorizer(X, **{**base, "mode": "BM25"}, backend="interpreter")
    with pytest.raises(VerifyError, match="has 7 pool n-grams but 3 ngram_indexes"):
        ops.TfIdfVectorizer(X, **{**base, "ngram_indexes": (0, 1, 2)}, backend="interpreter")
