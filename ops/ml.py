"""Classic-ML ops of the ai.onnx.ml domain: Binarizer and ArrayFeatureExtractor (opset 1),
LabelEncoder (opset 2+, numeric keys and values; tensor attributes from 4) and TreeEnsemble
(opset 5).

String tensors are not opdsl dtypes, so LabelEncoder's string keys/values and
ArrayFeatureExtractor on strings are rejected by ``verify``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, f64, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import require_dtype

T = dsl.TypeVar("T")
U = dsl.TypeVar("U")
DOMAIN = "ai.onnx.ml"
ML_TYPES = (dsl.f32, dsl.f64, dsl.i64, dsl.i32)
LABEL_TYPES = (dsl.i64, dsl.f32, dsl.i32, dsl.i16, dsl.f64)

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)           # TreeEnsemble nodes_modes
AVERAGE, SUM, MIN, MAX = range(4)                       # aggregate_function
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)  # post_transform


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
def tree_kernel(x: In[T, 2], splits: In[f64], feats: In[i64], modes: In[i64], true_ids: In[i64], false_ids: In[i64],
                true_leaf: In[i64], false_leaf: In[i64], missing_true: In[i64], member_lo: In[i64],
                member_hi: In[i64], members: In[f64], roots: In[i64], root_leaf: In[i64], leaf_w: In[f64],
                leaf_t: In[i64], acc: Out[f64, 2], y: Out[T, 2], agg: i32, post: i32, big: f64):
    """One input row per step: walk every tree to its leaf, aggregate the leaf weights per
    target in ``acc``, then apply ``post`` while storing y.  MIN/MAX start from ±big (X's
    dtype's largest value, which a target no leaf reaches keeps, as in onnx's reference)."""
    targets = y.shape[1]
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        for t in range(targets):
            acc[r, t] = f64(0) if agg == SUM or agg == AVERAGE else (big if agg == MIN else -big)
        for tree in range(roots.size):
            node = roots[tree]
            leaf = root_leaf[tree] != 0
            while not leaf:
                v = f64(x[r, feats[node]])
                m = modes[node]
                sp = splits[node]
                go = False
                if v != v:
                    go = missing_true[node] != 0 or m == NEQ
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
            t = leaf_t[node]
            w = leaf_w[node]
            if agg == SUM or agg == AVERAGE:
                acc[r, t] += w
            elif agg == MIN:
                acc[r, t] = min(acc[r, t], w)
            else:
                acc[r, t] = max(acc[r, t], w)
        if agg == AVERAGE:
            for t in range(targets):
                acc[r, t] = acc[r, t] / f64(roots.size)
        if post == SOFTMAX or post == SOFTMAX_ZERO:
            top = f64(-1.7976931348623157e308)
            for t in range(targets):
                if post == SOFTMAX or acc[r, t] != 0:
                    top = max(top, acc[r, t])
            total = f64(0)
            for t in range(targets):
                e = f64(0)
                if post == SOFTMAX or acc[r, t] != 0:
                    e = dsl.exp(acc[r, t] - top)
                acc[r, t] = e
                total += e
            for t in range(targets):
                y[r, t] = acc[r, t] / total if total > 0 else f64(0)
        else:
            for t in range(targets):
                v = acc[r, t]
                y[r, t] = 1 / (1 + dsl.exp(-v)) if post == LOGISTIC else v


@dsl.op("TreeEnsemble", domain=DOMAIN, since=5)
class TreeEnsemble(dsl.Op):
    """X (N, F) -> (N, n_targets): the aggregated leaf weights of every tree (tree arrays as
    attributes: ``nodes_*`` per interior node, ``leaf_*`` per leaf).  PROBIT is not supported."""
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
    kernels = {"default": tree_kernel}

    def _targets(self) -> int:
        return self.n_targets if self.n_targets is not None else max(self.leaf_targetids, default=-1) + 1

    def _arrays(self):
        """The tree attributes as kernel arrays, plus each node's slice of membership_values."""
        n = len(self.nodes_featureids)
        modes = np.asarray(self.nodes_modes).reshape(-1).astype(np.int64)
        lo, hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
        members = np.zeros(1, np.float64)
        if self.membership_values is not None:
            members = np.asarray(self.membership_values, np.float64).reshape(-1)
            pos = 0
            for k in np.flatnonzero(modes == MEMBER):   # members of each MEMBER node, NaN-separated
                lo[k] = pos
                while pos < len(members) and not np.isnan(members[pos]):
                    pos += 1
                hi[k], pos = pos, pos + 1
        missing = np.asarray(self.nodes_missing_value_tracks_true or (0,) * n, np.int64)
        roots = np.asarray(self.tree_roots, np.int64)
        root_leaf = np.array([int(self.nodes_trueleafs[k] and self.nodes_falseleafs[k]
                                  and self.nodes_truenodeids[k] == self.nodes_falsenodeids[k]) for k in roots],
                             np.int64)
        # a one-leaf tree: its root entry's true branch names the leaf
        roots = np.where(root_leaf != 0, np.asarray(self.nodes_truenodeids, np.int64)[roots], roots)
        i64a = lambda v: np.asarray(v, np.int64)  # noqa: E731
        return (np.asarray(self.nodes_splits, np.float64).reshape(-1), i64a(self.nodes_featureids), modes,
                i64a(self.nodes_truenodeids), i64a(self.nodes_falsenodeids), i64a(self.nodes_trueleafs),
                i64a(self.nodes_falseleafs), missing, lo, hi, members, roots, root_leaf,
                np.asarray(self.leaf_weights, np.float64).reshape(-1), i64a(self.leaf_targetids))

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

    def run(self, impl, inputs, outputs, backend):
        y = outputs[0]
        if y.size == 0:
            return
        acc = np.empty(y.shape, np.float64)
        impl(inputs[0], *self._arrays(), acc, y, agg=self.aggregate_function, post=self.post_transform,
             big=float(np.finfo(y.dtype).max), backend=backend)


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
