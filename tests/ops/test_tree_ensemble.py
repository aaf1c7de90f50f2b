"""TreeEnsemble (ai.onnx.ml 5) and TreeEnsembleRegressor (1, 3) on every backend against
Python tree walks: every mode, set membership, aggregates, post transforms, base values,
several targets per leaf; errors."""
import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(31)


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
    out = np.full((len(x), n_targets), np.nan)     # NaN: no leaf reached the target (scores 0 at the end)
    for r, row in enumerate(x.astype(np.float64)):
        for root in tree_roots:
            node, leaf = root, False
            while not leaf:
                v, m = row[nodes_featureids[node]], nodes_modes[node]
                go = v in sets[node] if m == 6 else tests[m](v, nodes_splits[node])
                node, leaf = (nodes_truenodeids[node], nodes_trueleafs[node]) if go else \
                    (nodes_falsenodeids[node], nodes_falseleafs[node])
            t, w = leaf_targetids[node], leaf_weights[node]
            out[r, t] = w if np.isnan(out[r, t]) else out[r, t] + w if aggregate_function in (0, 1) else \
                (min if aggregate_function == 2 else max)(out[r, t], w)
    if aggregate_function == 0:
        out /= len(tree_roots)
    out = np.nan_to_num(out, nan=0.0)
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



def test_tree_ensemble_errors():
    with pytest.raises(VerifyError, match="TreeEnsemble node 0's true branch 9 is not a node index in"):
        ops.TreeEnsemble(np.zeros((1, 3), np.float32), **dict(TREES, nodes_truenodeids=(9, 0, 2, 4, 4)),
                         backend="interpreter")
    with pytest.raises(VerifyError, match=r"post_transform 4 is not supported; .* PROBIT \(4\) is not"):
        ops.TreeEnsemble(np.zeros((1, 3), np.float32), **dict(TREES, post_transform=4), backend="interpreter")


# the same two trees as TREES in the regressor's form (nodes named (tree, node id), LEAF nodes
# with their (target, weight) entries), without set membership: tree 1's root tests x2 == 1.0;
# leaf 1/3 of tree 0 gives two targets
REGRESSOR = dict(
    nodes_treeids=(0, 0, 0, 0, 0, 0, 0, 1, 1, 1),
    nodes_nodeids=(0, 1, 2, 3, 4, 5, 6, 0, 1, 2),
    nodes_featureids=(0, 1, 1, 0, 0, 0, 0, 2, 0, 0),
    nodes_modes=("BRANCH_LEQ", "BRANCH_GT", "BRANCH_LT", "LEAF", "LEAF", "LEAF", "LEAF", "BRANCH_EQ", "LEAF", "LEAF"),
    nodes_values=(0.5, -0.25, 1.0, 0, 0, 0, 0, 1.0, 0, 0),
    nodes_truenodeids=(1, 3, 5, 0, 0, 0, 0, 1, 0, 0),
    nodes_falsenodeids=(2, 4, 6, 0, 0, 0, 0, 2, 0, 0),
    nodes_missing_value_tracks_true=(1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    target_treeids=(0, 0, 0, 0, 0, 1, 1), target_nodeids=(3, 3, 4, 5, 6, 1, 2), target_ids=(0, 1, 1, 0, 1, 2, 0),
    target_weights=(1.5, 0.5, -2.0, 0.25, 3.0, 4.0, -1.0), n_targets=3)


def regressor_reference(x, agg="SUM", post="NONE", base=(), **t):
    index = {(a, b): k for k, (a, b) in enumerate(zip(t["nodes_treeids"], t["nodes_nodeids"]))}
    roots = {}
    for k, tree in enumerate(t["nodes_treeids"]):
        roots.setdefault(tree, k)
    tests = {"BRANCH_LEQ": np.less_equal, "BRANCH_LT": np.less, "BRANCH_GTE": np.greater_equal,
             "BRANCH_GT": np.greater, "BRANCH_EQ": np.equal, "BRANCH_NEQ": np.not_equal}
    out = np.full((len(x), t["n_targets"]), np.nan)   # NaN: no leaf reached the target
    for r, row in enumerate(x.astype(np.float64)):
        for tree, k in roots.items():
            while t["nodes_modes"][k] != "LEAF":
                v = row[t["nodes_featureids"][k]]
                go = t["nodes_missing_value_tracks_true"][k] == 1 if np.isnan(v) else \
                    tests[t["nodes_modes"][k]](v, t["nodes_values"][k])
                k = index[tree, t["nodes_truenodeids"][k] if go else t["nodes_falsenodeids"][k]]
            for e, key in enumerate(zip(t["target_treeids"], t["target_nodeids"])):
                if key == (tree, t["nodes_nodeids"][k]):
                    tid, w = t["target_ids"][e], t["target_weights"][e]
                    out[r, tid] = w if np.isnan(out[r, tid]) else out[r, tid] + w if agg in ("SUM", "AVERAGE") \
                        else (min if agg == "MIN" else max)(out[r, tid], w)
    if agg == "AVERAGE":
        out /= len(roots)
    out = np.nan_to_num(out + np.asarray(base or 0.0), nan=0.0)   # an unreached target: 0, no base
    return 1 / (1 + np.exp(-out)) if post == "LOGISTIC" else out


@pytest.mark.parametrize("agg,post,base", [("SUM", "NONE", (0.5, -1.0, 2.0)), ("AVERAGE", "LOGISTIC", ()),
                                           ("MAX", "NONE", ())])
def test_tree_ensemble_regressor(backend, agg, post, base):
    x = np.round(RNG.uniform(-1, 3, (10, 3)) * 2) / 2
    x[0, 0] = np.nan                                        # the root's missing value goes true
    attrs = dict(REGRESSOR, aggregate_function=agg, post_transform=post, base_values=base)
    y = ops.TreeEnsembleRegressor(x, backend=backend, **attrs)
    assert y.shape == (10, 3) and y.dtype == np.float32
    np.testing.assert_allclose(y, regressor_reference(x, agg, post, base, **REGRESSOR), rtol=1e-6)
    xi = np.round(x[1:]).astype(np.int64)                   # integer features, opset 3 tensor attributes
    attrs3 = dict(REGRESSOR, nodes_values=(), nodes_values_as_tensor=np.array(REGRESSOR["nodes_values"]),
                  aggregate_function=agg, post_transform=post, base_values=base)
    np.testing.assert_allclose(ops.TreeEnsembleRegressor(xi, backend=backend, **attrs3),
                               regressor_reference(xi, agg, post, base, **REGRESSOR), rtol=1e-6)


def test_tree_ensemble_regressor_errors():
    x = np.zeros((1, 3), np.float32)
    with pytest.raises(VerifyError, match="node 0 \\(tree 0\\) branches to node id 9, which its tree does not have"):
        ops.TreeEnsembleRegressor(x, **dict(REGRESSOR, nodes_truenodeids=(9,) + REGRESSOR["nodes_truenodeids"][1:]),
                                  backend="interpreter")
    with pytest.raises(VerifyError, match="target entry \\(tree 0, node 1\\) does not name a LEAF node"):
        ops.TreeEnsembleRegressor(x, **dict(REGRESSOR, target_nodeids=(1, 3, 4, 5, 6, 1, 2)), backend="interpreter")
    with pytest.raises(VerifyError, match="post_transform PROBIT is not supported"):
        ops.TreeEnsembleRegressor(x, **REGRESSOR, post_transform="PROBIT", backend="interpreter")


def test_softmax_zero(backend):
    """SOFTMAX_ZERO: a softmax over the non-zero scores (zeros stay 0); an all-zero row is 0.5 each."""
    one_tree = dict(tree_roots=(0,), nodes_modes=np.array([0], np.uint8), nodes_featureids=(0,),
                    nodes_splits=np.array([0.0]), nodes_truenodeids=(0,), nodes_trueleafs=(1,),
                    nodes_falsenodeids=(1,), nodes_falseleafs=(1,), leaf_targetids=(0, 1),
                    leaf_weights=np.array([0.0, 2.0]), n_targets=3, post_transform=3)
    x = np.array([[-1.0], [1.0]], np.float32)     # row 0 reaches the 0-weight leaf: every score is 0
    y = ops.TreeEnsemble(x, backend=backend, **one_tree)
    np.testing.assert_allclose(y, [[0.5, 0.5, 0.5], [0.0, 1.0, 0.0]], rtol=1e-6)
