"""Tree ensembles of the ai.onnx.ml domain: TreeEnsemble (opset 5: node and leaf arrays, set
membership) and TreeEnsembleRegressor (opsets 1 and 3: nodes named by (tree id, node id) with
string modes, leaves carrying several (target, weight) entries, base values).

Both become the same arrays for ``tree_kernel``: per interior node its feature, split, mode,
missing-value rule and true/false children (each a node or a leaf); per leaf a range of
(target, weight) entries; per tree its root.  One input row per step walks every tree,
aggregates (SUM, AVERAGE, MIN, MAX) per target in f64, adds the base values and applies the
post transform (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO; PROBIT is not supported).  A target
that no reached leaf names scores 0 (without its base value), as in onnxruntime; onnx's
reference would leave it at the dtype's extreme under MIN/MAX and add the base value.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, bool_, f64, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import require_dtype

T = dsl.TypeVar("T")
U = dsl.TypeVar("U")
DOMAIN = "ai.onnx.ml"

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)             # node modes (TreeEnsemble's nodes_modes codes)
AVERAGE, SUM, MIN, MAX = range(4)                         # aggregate_function
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)  # post_transform
MODE_NAMES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT, "BRANCH_EQ": EQ,
              "BRANCH_NEQ": NEQ}
AGGREGATES = {"AVERAGE": AVERAGE, "SUM": SUM, "MIN": MIN, "MAX": MAX}
ZERO_EPS = 1e-7  # SOFTMAX_ZERO's "zero" (onnxruntime and onnx's reference)
POSTS = {"NONE": NONE, "SOFTMAX": SOFTMAX, "LOGISTIC": LOGISTIC, "SOFTMAX_ZERO": SOFTMAX_ZERO, "PROBIT": PROBIT}


@dsl.kernel
def tree_kernel(x: In[T, 2], splits: In[f64], feats: In[i64], modes: In[i64], true_ids: In[i64], false_ids: In[i64],
                true_leaf: In[i64], false_leaf: In[i64], missing_true: In[i64], member_lo: In[i64],
                member_hi: In[i64], members: In[f64], roots: In[i64], root_leaf: In[i64], entry_lo: In[i64],
                entry_hi: In[i64], entry_t: In[i64], entry_w: In[f64], base: In[f64], acc: Out[f64, 2],
                seen: Out[i64, 2], y: Out[U, 2], agg: i32, post: i32, nan_neq: bool_, has_base: bool_):
    """One input row per step: walk every tree to its leaf, aggregate the leaf's (target,
    weight) entries in ``acc``, add ``base``, apply ``post`` while storing y.  A NaN feature
    takes the true branch when its node's missing_true is set (or, with ``nan_neq``, at a NEQ
    node).  A target no reached leaf names scores 0, without base value (onnxruntime; onnx's
    reference leaves MIN/MAX at the dtype's extremes there)."""
    targets = y.shape[1]
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        for t in range(targets):
            acc[r, t] = f64(0)
            seen[r, t] = 0
        for tree in range(roots.size):
            node = roots[tree]
            leaf = root_leaf[tree] != 0
            while not leaf:
                v = f64(x[r, feats[node]])
                m = modes[node]
                sp = splits[node]
                go = False
                if v != v:
                    go = missing_true[node] != 0 or (nan_neq and m == NEQ)
                elif m == LEQ:
                    go = v <= sp
                elif m == LT:
                    go = v < sp
                elif m == GTE:
                    go = v >= sp
                elif m == GT:
                    go = v > sp
                elif m == EQ:
                    go = v == sp
                elif m == NEQ:
                    go = v != sp
                else:
                    for k in range(member_lo[node], member_hi[node]):
                        if members[k] == v:
                            go = True
                if go:
                    leaf = true_leaf[node] != 0
                    node = true_ids[node]
                else:
                    leaf = false_leaf[node] != 0
                    node = false_ids[node]
            for q in range(entry_lo[node], entry_hi[node]):
                t = entry_t[q]
                w = entry_w[q]
                if seen[r, t] == 0:
                    acc[r, t] = w
                elif agg == SUM or agg == AVERAGE:
                    acc[r, t] += w
                elif agg == MIN:
                    acc[r, t] = min(acc[r, t], w)
                else:
                    acc[r, t] = max(acc[r, t], w)
                seen[r, t] += 1
        for t in range(targets):
            if agg == AVERAGE:
                acc[r, t] = acc[r, t] / f64(roots.size)
            if has_base and seen[r, t] > 0:
                acc[r, t] += base[t]
        if post == SOFTMAX or post == SOFTMAX_ZERO:
            # SOFTMAX_ZERO: scores within 1e-7 of 0 stay 0, an all-zero row gives 0.5 each
            top = f64(-1.7976931348623157e308)
            for t in range(targets):
                top = max(top, acc[r, t])
            total = f64(0)
            for t in range(targets):
                e = f64(0)
                if post == SOFTMAX or abs(acc[r, t]) > ZERO_EPS:
                    e = dsl.exp(acc[r, t] - top)
                acc[r, t] = e
                total += e
            for t in range(targets):
                y[r, t] = acc[r, t] / total if total > 0 else f64(0.5)
        else:
            for t in range(targets):
                v = acc[r, t]
                y[r, t] = 1 / (1 + dsl.exp(-v)) if post == LOGISTIC else v


class Forest:
    """The kernel's arrays for one ensemble (built once per op from its attributes)."""

    def __init__(self, n_nodes: int):
        z = lambda: np.zeros(n_nodes, np.int64)  # noqa: E731
        self.splits = np.zeros(n_nodes, np.float64)
        self.feats, self.modes, self.true_ids, self.false_ids = z(), z(), z(), z()
        self.true_leaf, self.false_leaf, self.missing, self.member_lo, self.member_hi = z(), z(), z(), z(), z()
        self.members = np.zeros(1, np.float64)
        self.roots = np.zeros(0, np.int64)
        self.root_leaf = np.zeros(0, np.int64)
        self.entry_lo = self.entry_hi = self.entry_t = np.zeros(0, np.int64)
        self.entry_w = np.zeros(0, np.float64)

    def arrays(self):
        return (self.splits, self.feats, self.modes, self.true_ids, self.false_ids, self.true_leaf, self.false_leaf,
                self.missing, self.member_lo, self.member_hi, self.members, self.roots, self.root_leaf,
                self.entry_lo, self.entry_hi, self.entry_t, self.entry_w)


class _Trees(dsl.Op):
    kernels = {"default": tree_kernel}
    nan_neq = False

    def forest(self) -> Forest:
        raise NotImplementedError

    def codes(self) -> Tuple[int, int]:
        """(aggregate code, post-transform code)."""
        raise NotImplementedError

    def base(self) -> Optional[np.ndarray]:
        return None

    def check_codes(self):
        agg, post = self.codes()
        if post == PROBIT:
            raise VerifyError(f"{self.op_type} post_transform PROBIT is not supported; accepted: NONE, SOFTMAX, "
                              f"LOGISTIC, SOFTMAX_ZERO")

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        if y.size == 0:
            return
        agg, post = self.codes()
        base = self.base()
        acc, seen = np.empty(y.shape, np.float64), np.empty(y.shape, np.int64)
        impl(inputs[0], *self.forest().arrays(), np.zeros(1) if base is None else base, acc, seen, y, agg=agg,
             post=post, nan_neq=self.nan_neq, has_base=base is not None, backend=backend)


@dsl.op("TreeEnsemble", domain=DOMAIN, since=5)
class TreeEnsemble(_Trees):
    """X (N, F) -> (N, n_targets): the aggregated leaf weights of every tree (tree arrays as
    attributes: ``nodes_*`` per interior node, ``leaf_*`` per leaf)."""
    tree_roots: Tuple[int, ...]
    nodes_modes: np.ndarray
    nodes_featureids: Tuple[int, ...]
    nodes_splits: np.ndarray
    nodes_truenodeids: Tuple[int, ...]
    nodes_trueleafs: Tuple[int, ...]
    nodes_falsenodeids: Tuple[int, ...]
    nodes_falseleafs: Tuple[int, ...]
    leaf_targetids: Tuple[int, ...]
    leaf_weights: np.ndarray
    n_targets: Optional[int] = None
    aggregate_function: int = SUM
    post_transform: int = NONE
    nodes_missing_value_tracks_true: Tuple[int, ...] = ()
    nodes_hitrates: Optional[np.ndarray] = None
    membership_values: Optional[np.ndarray] = None
    nan_neq = True  # NaN != split is true in opset 5's comparisons

    def _targets(self) -> int:
        return self.n_targets if self.n_targets is not None else max(self.leaf_targetids, default=-1) + 1

    def codes(self):
        return self.aggregate_function, self.post_transform

    def forest(self) -> Forest:
        n = len(self.nodes_featureids)
        f = Forest(n)
        f.modes = np.asarray(self.nodes_modes).reshape(-1).astype(np.int64)
        if self.membership_values is not None:
            f.members = np.asarray(self.membership_values, np.float64).reshape(-1)
            pos = 0
            for k in np.flatnonzero(f.modes == MEMBER):   # members of each MEMBER node, NaN-separated
                f.member_lo[k] = pos
                while pos < len(f.members) and not np.isnan(f.members[pos]):
                    pos += 1
                f.member_hi[k], pos = pos, pos + 1
        f.missing = np.asarray(self.nodes_missing_value_tracks_true or (0,) * n, np.int64)
        f.splits = np.asarray(self.nodes_splits, np.float64).reshape(-1)
        f.feats, f.true_ids, f.false_ids, f.true_leaf, f.false_leaf = (
            np.asarray(v, np.int64) for v in (self.nodes_featureids, self.nodes_truenodeids, self.nodes_falsenodeids,
                                               self.nodes_trueleafs, self.nodes_falseleafs))
        roots = np.asarray(self.tree_roots, np.int64)
        f.root_leaf = np.array([int(self.nodes_trueleafs[k] and self.nodes_falseleafs[k]
                                    and self.nodes_truenodeids[k] == self.nodes_falsenodeids[k]) for k in roots],
                               np.int64)
        f.roots = np.where(f.root_leaf != 0, f.true_ids[roots], roots)   # a one-leaf tree names its leaf
        leaves = len(self.leaf_targetids)
        f.entry_lo, f.entry_hi = np.arange(leaves, dtype=np.int64), np.arange(1, leaves + 1, dtype=np.int64)
        f.entry_t = np.asarray(self.leaf_targetids, np.int64)
        f.entry_w = np.asarray(self.leaf_weights, np.float64).reshape(-1)
        return f

    def verify(self, x):
        require_dtype("TreeEnsemble", x, (dsl.f32, dsl.f64, dsl.f16), "X")
        if x.ndim != 2:
            raise VerifyError(f"TreeEnsemble X must be (N, F), got {x}")
        n = len(self.nodes_featureids)
        for name in ("nodes_modes", "nodes_splits", "nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                     "nodes_falseleafs") + (("nodes_missing_value_tracks_true",)
                                            if self.nodes_missing_value_tracks_true else ()):
            if np.asarray(getattr(self, name)).size != n:
                raise VerifyError(f"TreeEnsemble {name} has {np.asarray(getattr(self, name)).size} entries; every "
                                  f"nodes_* attribute needs one per node ({n}, as nodes_featureids)")
        leaves = len(self.leaf_targetids)
        if np.asarray(self.leaf_weights).size != leaves:
            raise VerifyError(f"TreeEnsemble leaf_weights has {np.asarray(self.leaf_weights).size} entries, "
                              f"leaf_targetids {leaves}; both need one per leaf")
        for k in range(n):
            for ids, is_leaf, what in ((self.nodes_truenodeids, self.nodes_trueleafs, "true"),
                                       (self.nodes_falsenodeids, self.nodes_falseleafs, "false")):
                limit = leaves if is_leaf[k] else n
                if not 0 <= ids[k] < limit:
                    raise VerifyError(f"TreeEnsemble node {k}'s {what} branch {ids[k]} is not a "
                                      f"{'leaf' if is_leaf[k] else 'node'} index in [0, {limit})")
        if any(not 0 <= r < n for r in self.tree_roots):
            raise VerifyError(f"TreeEnsemble tree_roots {list(self.tree_roots)} must index nodes in [0, {n})")
        modes = np.asarray(self.nodes_modes).reshape(-1)
        if modes.size and (modes.min() < 0 or modes.max() > MEMBER):
            raise VerifyError(f"TreeEnsemble nodes_modes must be 0..6 (LEQ, LT, GTE, GT, EQ, NEQ, MEMBER), got "
                              f"{sorted(set(modes.tolist()))}")
        if (modes == MEMBER).any() and self.membership_values is None:
            raise VerifyError("TreeEnsemble has BRANCH_MEMBER nodes but no membership_values")
        if any(not 0 <= t < self._targets() for t in self.leaf_targetids):
            raise VerifyError(f"TreeEnsemble leaf_targetids must lie in [0, n_targets={self._targets()})")
        if x.shape[1] is not None and any(not 0 <= f < x.shape[1] for f in self.nodes_featureids):
            raise VerifyError(f"TreeEnsemble nodes_featureids must index X's {x.shape[1]} features")
        if self.aggregate_function not in (AVERAGE, SUM, MIN, MAX):
            raise VerifyError(f"TreeEnsemble aggregate_function {self.aggregate_function} is not one of "
                              f"0 (AVERAGE), 1 (SUM), 2 (MIN), 3 (MAX)")
        if self.post_transform not in (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO):
            raise VerifyError(f"TreeEnsemble post_transform {self.post_transform} is not supported; accepted: "
                              f"0 (NONE), 1 (SOFTMAX), 2 (LOGISTIC), 3 (SOFTMAX_ZERO); PROBIT (4) is not")

    def infer(self, x):
        return TensorSpec((x.shape[0], self._targets()), x.dtype)


@dsl.op("TreeEnsembleRegressor", domain=DOMAIN, since=1)
class TreeEnsembleRegressor(_Trees):
    """X (N, F) of f32/f64/i64/i32 -> f32 (N, n_targets) (opsets 1 and 3; the ``*_as_tensor``
    attributes of opset 3 replace their float lists).  Nodes are named (tree id, node id),
    a tree's root is its first node, a LEAF node's (target, weight) entries all count."""
    nodes_treeids: Tuple[int, ...]
    nodes_nodeids: Tuple[int, ...]
    nodes_featureids: Tuple[int, ...]
    nodes_modes: Tuple[str, ...]
    nodes_truenodeids: Tuple[int, ...]
    nodes_falsenodeids: Tuple[int, ...]
    target_treeids: Tuple[int, ...]
    target_nodeids: Tuple[int, ...]
    target_ids: Tuple[int, ...]
    nodes_values: Tuple[float, ...] = ()
    nodes_values_as_tensor: Optional[np.ndarray] = None
    target_weights: Tuple[float, ...] = ()
    target_weights_as_tensor: Optional[np.ndarray] = None
    base_values: Tuple[float, ...] = ()
    base_values_as_tensor: Optional[np.ndarray] = None
    nodes_missing_value_tracks_true: Tuple[int, ...] = ()
    nodes_hitrates: Tuple[float, ...] = ()
    nodes_hitrates_as_tensor: Optional[np.ndarray] = None
    n_targets: int = 1
    aggregate_function: str = "SUM"
    post_transform: str = "NONE"

    def _values(self, name: str) -> np.ndarray:
        t = getattr(self, name + "_as_tensor")
        return np.asarray(t if t is not None else getattr(self, name), np.float64).reshape(-1)

    def codes(self):
        return AGGREGATES[self.aggregate_function], POSTS[self.post_transform]

    def base(self):
        b = self._values("base_values")
        return b if b.size else None

    def _index(self) -> Dict[Tuple[int, int], int]:
        return {(t, n): k for k, (t, n) in enumerate(zip(self.nodes_treeids, self.nodes_nodeids))}

    def forest(self) -> Forest:
        n = len(self.nodes_nodeids)
        index = self._index()
        f = Forest(n)
        f.splits = self._values("nodes_values")
        f.feats = np.asarray(self.nodes_featureids, np.int64)
        f.modes = np.array([MODE_NAMES.get(m, LEQ) for m in self.nodes_modes], np.int64)
        leaf = np.array([m == "LEAF" for m in self.nodes_modes], bool)
        f.missing = np.asarray(self.nodes_missing_value_tracks_true or (0,) * n, np.int64)
        for k in range(n):
            if leaf[k]:
                continue
            tree = self.nodes_treeids[k]
            f.true_ids[k] = index[tree, self.nodes_truenodeids[k]]
            f.false_ids[k] = index[tree, self.nodes_falsenodeids[k]]
            f.true_leaf[k], f.false_leaf[k] = leaf[f.true_ids[k]], leaf[f.false_ids[k]]
        roots: Dict[int, int] = {}
        for k, tree in enumerate(self.nodes_treeids):
            roots.setdefault(tree, k)
        f.roots = np.array([roots[t] for t in sorted(roots)], np.int64)
        f.root_leaf = leaf[f.roots].astype(np.int64)
        # each leaf node's (target, weight) entries, grouped by leaf
        entries: List[List[int]] = [[] for _ in range(n)]
        for e, key in enumerate(zip(self.target_treeids, self.target_nodeids)):
            entries[index[key]].append(e)
        order = [e for group in entries for e in group]
        sizes = np.array([len(g) for g in entries], np.int64)
        f.entry_hi = np.cumsum(sizes)
        f.entry_lo = f.entry_hi - sizes
        f.entry_t = np.asarray(self.target_ids, np.int64)[order] if order else np.zeros(0, np.int64)
        f.entry_w = self._values("target_weights")[order] if order else np.zeros(0, np.float64)
        return f

    def verify(self, x):
        what = "TreeEnsembleRegressor"
        require_dtype(what, x, (dsl.f32, dsl.f64, dsl.i64, dsl.i32), "X")
        if x.ndim != 2:
            raise VerifyError(f"{what} X must be (N, F), got {x}")
        n = len(self.nodes_nodeids)
        lists = {"nodes_treeids": self.nodes_treeids, "nodes_featureids": self.nodes_featureids,
                 "nodes_modes": self.nodes_modes, "nodes_truenodeids": self.nodes_truenodeids,
                 "nodes_falsenodeids": self.nodes_falsenodeids, "nodes_values": self._values("nodes_values")}
        if self.nodes_missing_value_tracks_true:
            lists["nodes_missing_value_tracks_true"] = self.nodes_missing_value_tracks_true
        for name, v in lists.items():
            if len(v) != n:
                raise VerifyError(f"{what} {name} has {len(v)} entries; every nodes_* attribute needs one per node "
                                  f"({n}, as nodes_nodeids)")
        bad = sorted(set(self.nodes_modes) - set(MODE_NAMES) - {"LEAF"})
        if bad:
            raise VerifyError(f"{what} nodes_modes {bad} are not supported; accepted: {', '.join(MODE_NAMES)}, LEAF")
        index = self._index()
        if len(index) != n:
            raise VerifyError(f"{what} (nodes_treeids, nodes_nodeids) pairs must be unique")
        for k, m in enumerate(self.nodes_modes):
            if m == "LEAF":
                continue
            for child in (self.nodes_truenodeids[k], self.nodes_falsenodeids[k]):
                if (self.nodes_treeids[k], child) not in index:
                    raise VerifyError(f"{what} node {k} (tree {self.nodes_treeids[k]}) branches to node id {child}, "
                                      f"which its tree does not have")
        m = len(self.target_ids)
        if len(self.target_treeids) != m or len(self.target_nodeids) != m or len(self._values("target_weights")) != m:
            raise VerifyError(f"{what} target_treeids, target_nodeids, target_ids and target_weights need one entry "
                              f"per leaf weight ({m})")
        for key in zip(self.target_treeids, self.target_nodeids):
            if key not in index or self.nodes_modes[index[key]] != "LEAF":
                raise VerifyError(f"{what} target entry (tree {key[0]}, node {key[1]}) does not name a LEAF node")
        if any(not 0 <= t < self.n_targets for t in self.target_ids):
            raise VerifyError(f"{what} target_ids must lie in [0, n_targets={self.n_targets})")
        base = self._values("base_values")
        if base.size not in (0, self.n_targets):
            raise VerifyError(f"{what} base_values has {base.size} values; it needs n_targets={self.n_targets}")
        if self.aggregate_function not in AGGREGATES or self.post_transform not in POSTS:
            raise VerifyError(f"{what} aggregate_function {self.aggregate_function!r} / post_transform "
                              f"{self.post_transform!r}: accepted {', '.join(AGGREGATES)} / {', '.join(POSTS)}")
        self.check_codes()
        if x.shape[1] is not None and any(not 0 <= f < x.shape[1] for f, mode in
                                          zip(self.nodes_featureids, self.nodes_modes) if mode != "LEAF"):
            raise VerifyError(f"{what} nodes_featureids must index X's {x.shape[1]} features")

    def infer(self, x):
        return TensorSpec((x.shape[0], self.n_targets), dsl.f32)
