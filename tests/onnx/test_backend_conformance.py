"""ONNX's own backend test suite through ``dsl.load_onnx`` (classification in conformance.py).

Every case whose ops opdsl has must pass with onnx's tolerances; the others skip with the
missing ops or the stated exclusion.  The backend is numba unless
``OPDSL_CONFORMANCE_BACKEND`` names another.
"""
from __future__ import annotations

import os

import pytest

pytest.importorskip("onnx")

import conformance  # noqa: E402 (tests/onnx is on sys.path under pytest)

BACKEND = os.environ.get("OPDSL_CONFORMANCE_BACKEND", "numba")
CASES = conformance.collect()


def _params():
    """One param per case.  An ``_expanded`` case (the op's function body, expanded at load)
    whose direct case also runs is marked ``slow``: the default suite keeps one run per op and
    the expansions that are an op's only coverage; ``-m slow`` runs them all."""
    runs = {(c.group, c.name) for c in CASES if conformance.skip_reason(c) is None}
    out = []
    for case in CASES:
        reason = conformance.skip_reason(case)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        direct = case.name.split("_expanded")[0]
        if not reason and "_expanded" in case.name and (case.group, direct) in runs:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(case, id=f"{case.group}/{case.name}", marks=marks))
    return out


def test_every_group_was_found():
    groups = {c.group for c in CASES}
    assert groups == set(conformance.GROUPS) and len(CASES) > 1900


@pytest.mark.parametrize("case", _params())
def test_case(case):
    conformance.run_case(case, BACKEND)


def test_deferred_pool_results_are_computed_on_use_and_never_stand_in_once_transformed():
    """conformance.py defers onnx's large reference pooling results: the placeholder resolves to
    the real values, and an array derived from it is refused instead of passing as zeros."""
    import numpy as np
    calls = []
    real = lambda padded, *a, **k: calls.append(1) or np.full((1, 1, 200, 100), 2.0, padded.dtype)  # noqa: E731
    pending = conformance._deferred_pool(real)(np.ones((1, 1, 201, 101), np.float32), (1, 1, 201, 101),
                                               [2, 2], [1, 1], [200, 100], "MAX")
    assert isinstance(pending, conformance._PendingPool) and not calls
    assert conformance._resolved([pending])[0].max() == 2.0 and calls == [1]
    with pytest.raises(RuntimeError, match="transformed a deferred pooling result"):
        conformance._resolved(pending.astype(np.float64))
