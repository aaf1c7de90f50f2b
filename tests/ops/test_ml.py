"""ai.onnx.ml ops on every backend against numpy references: Binarizer,
ArrayFeatureExtractor; errors."""
import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(30)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_binarizer(backend, dtype):
    x = (RNG.standard_normal((3, 5)) * 4).astype(dtype)
    y = ops.Binarizer(x, threshold=0.5, backend=backend)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, (x > 0.5).astype(dtype))


def test_binarizer_nan_is_zero(backend):
    x = np.array([np.nan, 2.0, -1.0], np.float32)
    np.testing.assert_array_equal(ops.Binarizer(x, backend=backend), [0, 1, 0])


def test_array_feature_extractor(backend):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    idx = np.array([4, 0, 4], np.int64)
    np.testing.assert_array_equal(ops.ArrayFeatureExtractor(x, idx, backend=backend), x[..., idx])
    v = np.arange(6, dtype=np.int64)                                   # 1-D: one row
    np.testing.assert_array_equal(ops.ArrayFeatureExtractor(v, np.array([[5], [1]]), backend=backend), [[5, 1]])
    g = dsl.Graph("afe")
    xi = g.input("x", (None, 5), dsl.f64)
    g.output(ops.ArrayFeatureExtractor(xi, np.array([3, 1], np.int64)), "z")
    xv = RNG.standard_normal((4, 5))
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": xv})["z"], xv[:, [3, 1]])


def test_errors():
    with pytest.raises(VerifyError, match=r"ArrayFeatureExtractor Y indices must lie in \[0, 5\)"):
        ops.ArrayFeatureExtractor(np.zeros((2, 5), np.float32), np.array([5], np.int64), backend="interpreter")
    with pytest.raises(VerifyError, match="Binarizer X has dtype u8; accepted: f32, f64, i64, i32"):
        ops.Binarizer(np.zeros(3, np.uint8), backend="interpreter")


def tree_reference(x, tree_roots, nodes_modes, nodes_featureids, nodes_splits, nodes_truenodeids, nodes_trueleafs,
                   nodes_falsenodeids, nodes_falseleafs, leaf_targetids, leaf_weights, n_targets,
                   aggregate_function=1, post_transform=0, membership_values=None, **_):
    """Walk each tree in Python; members: NaN-separated sets, one per MEMBER node in node order."""
    sets, pos = {}, 0
    for k, m in enumerate(nodes_modes):
        if m == 6:
            end = pos
            while end < len(membership_values) and not np.isnan(membership_values[end]):
                end += 1
            sets[k], pos = set(membership_values[pos:end].tolist()), end + 1
    tests = [np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal]
    big = float(np.finfo(np.float32).max)   # a target no leaf reaches keeps X's dtype's extreme
    out = np.zeros((len(x), n_targets)) if aggregate_function in (0, 1) else \
        np.full((len(x), n_targets), big if aggregate_function == 2 else -big)
    for r, row in enumerate(x.astype(np.float64)):
        for root in tree_roots:
            node, leaf = root, False
            while not leaf:
                v, m = row[nodes_featureids[node]], nodes_modes[node]
                go = v in sets[node] if m == 6 else tests[m](v, nodes_splits[node])
                node, leaf = (nodes_truenodeids[node], nodes_trueleafs[node]) if go else \
                    (nodes_falsenodeids[node], nodes_falseleafs[node])
            t, w = leaf_targetids[node], leaf_weights[node]
            out[r, t] = out[r, t] + w if aggregate_function in (0, 1) else \
                (min if aggregate_function == 2 else max)(out[r, t], w)
    if aggregate_function == 0:
        out /= len(tree_roots)
    if post_transform == 2:
        out = 1 / (1 + np.exp(-out))
    elif post_transform == 1:
        out = np.exp(out - out.max(axis=1, keepdims=True))
        out /= out.sum(axis=1, keepdims=True)
    return out


# two trees: tree 0 (nodes 0-2) splits on features 0 and 1, tree 1 (nodes 3-4) on set membership and feature 2
TREES = dict(tree_roots=(0, 3), nodes_modes=np.array([0, 3, 1, 6, 4], np.uint8), nodes_featureids=(0, 1, 1, 2, 0),
             nodes_splits=np.array([0.5, -0.25, 1.0, 0.0, 2.0]), nodes_truenodeids=(1, 0, 2, 4, 4),
             nodes_trueleafs=(0, 1, 1, 0, 1), nodes_falsenodeids=(2, 1, 3, 5, 6), nodes_falseleafs=(0, 1, 1, 1, 1),
             leaf_targetids=(0, 1, 0, 1, 2, 0, 1), leaf_weights=np.array([1.5, -2.0, 0.25, 3.0, 4.0, -1.0, 0.5]),
             n_targets=3, membership_values=np.array([1.0, 3.0, np.nan]))


@pytest.mark.parametrize("agg,post", [(1, 0), (0, 2), (3, 0), (2, 1)])
def test_tree_ensemble(backend, agg, post):
    x = np.round(RNG.uniform(-1, 4, (12, 3)) * 2) / 2      # values hit the splits and the set exactly
    x[:2, 2] = [1.0, 3.0]
    attrs = dict(TREES, aggregate_function=agg, post_transform=post)
    y = ops.TreeEnsemble(x.astype(np.float32), backend=backend, **attrs)
    assert y.shape == (12, 3) and y.dtype == np.float32
    want = tree_reference(x, **attrs)
    np.testing.assert_allclose(y, want.astype(np.float32), rtol=1e-6)


def test_label_encoder(backend):
    x = np.array([[3, 7, 1], [7, 9, 3]], np.int64)
    y = ops.LabelEncoder(x, keys_int64s=(1, 3, 7), values_floats=(0.5, 1.5, 2.5), default_float=-1.0,
                         backend=backend)
    np.testing.assert_array_equal(y, np.array([[1.5, 2.5, 0.5], [2.5, -1.0, 1.5]], np.float32))
    xf = np.array([0.5, np.nan, 2.0], np.float32)               # a NaN key matches a NaN
    y = ops.LabelEncoder(xf, keys_floats=(np.nan, 0.5), values_int64s=(7, 8), default_int64=0, backend=backend)
    np.testing.assert_array_equal(y, [8, 7, 0])
    xi = np.array([2, 5], np.int16)
    y = ops.LabelEncoder(xi, keys_tensor=np.array([5, 2, 5], np.int16), values_tensor=np.array([1, 2, 3], np.int32),
                         default_tensor=np.array([9], np.int32), backend=backend)
    np.testing.assert_array_equal(y, np.array([2, 3], np.int32))   # the repeated key 5: the last one wins


def test_ml_errors():
    with pytest.raises(VerifyError, match="TreeEnsemble node 0's true branch 9 is not a node index in"):
        ops.TreeEnsemble(np.zeros((1, 3), np.float32), **dict(TREES, nodes_truenodeids=(9, 0, 2, 4, 4)),
                         backend="interpreter")
    with pytest.raises(VerifyError, match=r"post_transform 4 is not supported; .* PROBIT \(4\) is not"):
        ops.TreeEnsemble(np.zeros((1, 3), np.float32), **dict(TREES, post_transform=4), backend="interpreter")
    with pytest.raises(VerifyError, match="LabelEncoder keys_strings: string keys/values are not supported"):
        ops.LabelEncoder(np.zeros(2, np.int64), keys_strings=("a", "b"), values_int64s=(1, 2), backend="interpreter")
    with pytest.raises(VerifyError, match="LabelEncoder keys are float32, X is i64"):
        ops.LabelEncoder(np.zeros(2, np.int64), keys_floats=(1.0,), values_int64s=(1,), backend="interpreter")
