"""The ONNX backend test suite (``onnx.backend.test``) as opdsl sees it.

Every CPU case onnx ships -- the generated node cases plus the ``pytorch-converted``,
``pytorch-operator`` and ``simple`` model folders -- is classified once:

* ``missing``: the model uses an op no registered opdsl op answers at its opset (the
  reason lists them, so the skip list shrinks by itself as the library grows);
* ``excluded``: matched by a pattern of ``EXCLUDE`` (the value says why);
* otherwise it must pass.

``python tests/onnx/conformance.py`` prints the counts per group and the most wanted
missing ops; the light CNNs (``real``) have their own test (test_light_models.py).
"""
from __future__ import annotations

import collections
import importlib
import glob
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# pattern (re.search on the case name) -> why the case is not run
EXCLUDE: Dict[str, str] = {
    r"e4m3|e5m2|e8m0|float4|int4|uint4|int2|uint2|FLOAT8|FLOAT4|INT4": "float8/float4/4-bit/2-bit types are not opdsl dtypes",
    r"^test_batchnorm_.*training_mode": "BatchNormalization runs inference only (training_mode=1 is an error)",
    r"^test_strnorm|^test_string|^test_regex|^test_cast.*STRING|^test_castlike.*STRING|_string": "string tensors are not opdsl dtypes",
    r"^test_dft_inverse(_opset19)?$": "expected data holds numpy's f32 FFT noise (1.9e-7) where the exact value is 0, "
                                      "above the case's atol 1e-7; opdsl's f64-accumulated result is within 4e-15 of 0",
    r"^test_attention_4d_(causal_)?fp16_expanded$": "2 of 192 f16 outputs differ by 2 f16 ulps (4.9e-4 at 0.42-0.47) "
                                                    "from onnx's f16-at-every-step reference, above the case's rtol "
                                                    "1e-3 (about one ulp); opdsl's ops round to f16 once per op (the "
                                                    "interpreter and numba agree; non-causal: max error to the f64 "
                                                    "result 3.0e-4, the reference's 4.7e-4); the fused op passes",
    r"^test_training_dropout": "Dropout runs inference only (training_mode=True, random masks, is an error)",
    r"^test_affine_grid_2d(_align_corners)?_expanded$": "the 2-D branch of AffineGrid's expanded If squeezes (Squeeze "
                                                        "without axes) a tensor whose shape comes from the values of "
                                                        "the graph input 'size'; opdsl builds bodies at load, when those "
                                                        "values are unknown. The direct AffineGrid and the 3-D expanded "
                                                        "cases run",
    r"^test_cast(like)?_(.*_)?U?INT2(_|$)": "2-bit integer types (INT2/UINT2) are not opdsl dtypes",
    r"^test_ai_onnx_ml_label_encoder_tensor_(value_only_)?mapping$": "LabelEncoder from a string input with string "
                                                                    "keys; strings are not opdsl dtypes (numeric "
                                                                    "LabelEncoder runs: tests/ops/test_ml.py)",
}

# pattern -> (low, high, integral): cases whose outputs are random draws.  ONNX fixes no
# sequence for a seed (onnx's Bernoulli case says implementations differ), so their stored
# outputs are one numpy draw: run_case checks each output's shape and dtype and that every
# value lies in [low, high] (and is a whole number when integral), not the values themselves
RANDOM: Dict[str, Tuple[float, float, bool]] = {
    r"^test_bernoulli": (0.0, 1.0, True),
}

GROUPS = ("node", "pytorch-converted", "pytorch-operator", "simple")


@dataclass
class Case:
    name: str
    group: str
    rtol: float
    atol: float
    _model: object = None
    _model_dir: Optional[str] = None
    _data: Optional[List[Tuple[List[np.ndarray], List[np.ndarray]]]] = None

    @property
    def model(self):
        if self._model is None:
            import onnx
            self._model = onnx.load(os.path.join(self._model_dir, "model.onnx"))
        return self._model

    @property
    def data_sets(self) -> List[Tuple[List[np.ndarray], List[np.ndarray]]]:
        """[(inputs, expected outputs)] as numpy arrays."""
        if self._data is None:
            self._data = [_read_data_set(d) for d in sorted(glob.glob(os.path.join(self._model_dir, "test_data_set_*")))]
        return [(_resolved(list(inputs)), _resolved(list(outputs))) for inputs, outputs in self._data]


def _to_array(x):
    """A case's value as a model feed: an array, a list of arrays (a sequence) or None (an
    empty optional), as onnxruntime takes them."""
    import onnx
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [_to_array(e) for e in x]
    return np.asarray(onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x)


def _read_data_set(folder: str):
    import onnx

    def read(prefix):
        out = []
        for path in sorted(glob.glob(os.path.join(folder, f"{prefix}_*.pb")),
                           key=lambda p: int(re.search(r"_(\d+)\.pb$", p).group(1))):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            out.append(onnx.numpy_helper.to_array(t))
        return out
    return read("input"), read("output")


class _PendingPool(np.ndarray):
    """A large pooling result of onnx's reference ``pool`` not computed yet: zeros of the
    result's shape and dtype (all a case's model needs), ``compute`` giving the real values
    when a case runs.  Any array derived from one (a view, ``astype``, arithmetic) carries
    ``compute = None`` and is refused when resolved, so a transformed placeholder can never
    stand in for expected data."""
    compute = None

    def __array_finalize__(self, obj):
        self.compute = None


# onnx's node cases compute their expected outputs at import; its python-loop ``pool`` takes
# ~10 s CPU for the three 3-D default pool cases alone, in every pytest-xdist worker, while at
# most one worker runs each case: results of at least this many elements are computed on use
_DEFER_POOL_ELEMENTS = 10_000


def _deferred_pool(real):
    def pool(padded, x_shape, kernel, strides, out_shape, pooling_type, *args, **kwargs):
        shape = (int(x_shape[0]), int(x_shape[1]), *(int(d) for d in out_shape))
        if int(np.prod(shape)) < _DEFER_POOL_ELEMENTS:
            return real(padded, x_shape, kernel, strides, out_shape, pooling_type, *args, **kwargs)
        frozen = np.array(padded, copy=True)
        pending = np.zeros(shape, padded.dtype).view(_PendingPool)
        done: list = []

        def compute():
            if not done:
                done.append(real(frozen, x_shape, kernel, strides, out_shape, pooling_type, *args, **kwargs))
                assert done[0].shape == shape and done[0].dtype == padded.dtype, "deferred pool changed shape"
            return done[0]
        pending.compute = compute
        return pending
    return pool


def _resolved(value):
    """``value`` with every pending pooling result computed (lists recursed)."""
    if isinstance(value, _PendingPool):
        if value.compute is None:
            raise RuntimeError("an onnx node case transformed a deferred pooling result; lower "
                               "_DEFER_POOL_ELEMENTS or compute that case eagerly")
        return value.compute()
    if isinstance(value, list):
        return [_resolved(v) for v in value]
    return value


def _node_testcases():
    """onnx's generated node cases with large reference pooling results deferred, and without
    the source snippets onnx extracts for its own docs (``inspect.getsource`` per export,
    ~2 s CPU, unused here)."""
    import warnings

    from onnx.backend.test.case import base
    from onnx.reference.ops import op_pool_common

    real_pool, real_snippet = op_pool_common.pool, base.process_snippet
    op_pool_common.pool = _deferred_pool(real_pool)
    base.process_snippet = lambda op_name, name, export: (name[len("export_"):] or op_name.lower(), "")
    try:
        from onnx.backend.test.case.node import collect_testcases
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
            return collect_testcases(None)
    finally:
        op_pool_common.pool, base.process_snippet = real_pool, real_snippet


def collect() -> List[Case]:
    """Every CPU case of the installed onnx, node cases first (importing them costs ~6 s)."""
    from onnx.backend.test.loader import load_model_tests
    node = _node_testcases()
    out: List[Case] = []
    seen = set()
    for c in node:
        if c.name in seen:
            continue
        seen.add(c.name)
        out.append(Case(c.name, "node", c.rtol, c.atol, _model=c.model, _data=c.data_sets))
    for group in GROUPS[1:]:
        for c in load_model_tests(kind=group):
            out.append(Case(c.name, group, c.rtol, c.atol, _model_dir=c.model_dir))
    return out


def missing_ops(model) -> List[str]:
    """Ops of ``model`` that no registered op answers (the importer's own scan)."""
    importlib.import_module("ops")  # registers the library the scan asks about
    from dsl.onnx.coverage import missing_ops as scan
    from dsl.opgraph import registry
    opsets = {registry.normalize_domain(o.domain): o.version for o in model.opset_import}
    return sorted(m.op_type if not m.domain else f"{m.domain}::{m.op_type}" for m in scan(model, opsets))


def skip_reason(case: Case) -> Optional[str]:
    why = next((why for p, why in EXCLUDE.items() if re.search(p, case.name)), None)
    if why:
        return why
    try:
        missing = missing_ops(case.model)
    except Exception as e:  # a model onnx cannot even parse here
        return f"model unreadable: {type(e).__name__}: {e}"
    return f"missing ops: {', '.join(missing)}" if missing else None


def run_case(case: Case, backend: str) -> None:
    """Load through dsl.load_onnx and compare every data set with onnx's own tolerance check."""
    import dsl
    model = case.model
    init = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    compiled = dsl.load_onnx(model, backend=backend)
    for inputs, expected in case.data_sets:
        inputs, expected = [_to_array(x) for x in inputs], [_to_array(x) for x in expected]
        out = compiled.run(dict(zip(names, inputs)))
        got = [out[o.name] for o in model.graph.output]
        draw = next((r for p, r in RANDOM.items() if re.search(p, case.name)), None)
        if draw is not None:
            _check_draws(expected, got, *draw)
        else:
            assert_similar(expected, got, case.rtol, case.atol)


def assert_similar(expected, got, rtol: float, atol: float) -> None:
    """onnx's own tolerance check, output by output; a sequence output (a list) must have as
    many tensors and each must match (onnx's check recurses into lists, which fails on 0-d
    elements), an empty optional (None) must be None."""
    from onnx.backend.test.runner import Runner
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for k, (e, g) in enumerate(zip(expected, got)):
        if e is None or g is None:
            assert e is None and g is None, f"output {k}: got {g!r}, expected {e!r}"
        elif isinstance(e, list):
            assert isinstance(g, list) and len(g) == len(e), f"output {k}: got {g!r}, expected a list of {len(e)}"
            for a, b in zip(e, g):
                Runner.assert_similar_outputs([a], [b], rtol=rtol, atol=atol)
        else:
            Runner.assert_similar_outputs([e], [g], rtol=rtol, atol=atol)


def _check_draws(expected, got, low: float, high: float, integral: bool) -> None:
    """Random outputs: the expected shapes and dtypes, every value in [low, high]."""
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for k, (e, g) in enumerate(zip(expected, got)):
        g = np.asarray(g)
        assert g.shape == e.shape and g.dtype == e.dtype, f"output {k}: {g.dtype}{g.shape}, expected {e.dtype}{e.shape}"
        v = g.astype(np.float64)
        assert np.all((v >= low) & (v <= high)), f"output {k}: values outside [{low}, {high}]: {g}"
        assert not integral or np.all(v == np.round(v)), f"output {k}: values must be whole numbers: {g}"


def summary(cases: Sequence[Case]) -> str:
    counts = collections.Counter()
    wanted = collections.Counter()
    for c in cases:
        why = skip_reason(c)
        counts[(c.group, "runnable" if why is None else ("missing" if why.startswith("missing") else "excluded"))] += 1
        if why and why.startswith("missing ops: "):
            for op in why[len("missing ops: "):].split(", "):
                wanted[op] += 1
    lines = [f"{g:18} runnable {counts[(g, 'runnable')]:5}  missing-op {counts[(g, 'missing')]:5}  "
             f"excluded {counts[(g, 'excluded')]:5}" for g in GROUPS]
    lines.append("most wanted: " + ", ".join(f"{op} ({n})" for op, n in wanted.most_common(40)))
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(collect()))
