"""``Model.run``'s flat run (dsl/opgraph/flat_run.py): after a plan instance's first run its
launches are prepared calls, Ctrl-C armed once per run.  Results match numpy on every backend,
every shape signature gets its own prepared list, outputs are fresh arrays each run, and an
interrupt stops the run and leaves the model usable."""
import numpy as np
import pytest

import dsl
import ops
from backends import interrupt
from dsl.opgraph.flat_run import FlatRun


def _chain(rows):
    g = dsl.Graph("flat_chain")
    h = g.input("x", (rows, 64), dsl.f32)
    for i in range(6):
        h = ops.Relu(h) if i % 2 else ops.Tanh(h)
    g.output(h, "y")
    g.output(ops.Neg(h), "z")
    return g


def _want(x):
    for i in range(6):
        x = np.maximum(x, 0) if i % 2 else np.tanh(x)
    return x


@pytest.fixture(scope="module")
def chains():
    """backend -> (static model, model with a free row count)"""
    out = {}
    for b in ("interpreter", "numba", "opencl"):
        try:
            out[b] = (_chain(2).compile(backend=b, fuse=False), _chain(None).compile(backend=b, fuse=False))
        except Exception as e:  # pragma: no cover - a backend missing here
            out[b] = e
    return out


def _models(chains, backend):
    got = chains[backend]
    if isinstance(got, Exception):
        pytest.skip(str(got))
    return got


def _flat(model, rows):
    return next(p for k, p in model._plans.items() if k[0][0] == rows).first.flat


def test_runs_after_the_first_are_prepared_calls(backend, chains):
    model, _ = _models(chains, backend)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((2, 64)).astype(np.float32)
        out = model.run({"x": x})
        np.testing.assert_allclose(out["y"], _want(x), rtol=2e-6, atol=1e-6)
        np.testing.assert_array_equal(out["z"], -out["y"])
    flat = _flat(model, 2)
    steps = len(next(iter(model._plans.values())).first.steps)
    # numba offers every small frozen launch's serial entry; the others keep their launchers
    assert flat.prepared == (steps if backend == "numba" else 0) and steps >= 7


def test_a_new_feed_shape_gets_its_own_plan_and_prepared_calls(backend, chains):
    _, model = _models(chains, backend)
    rng = np.random.default_rng(1)
    for rows in (3, 5, 3, 1, 5, 5):
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        out = model.run({"x": x})
        assert out["y"].shape == (rows, 64)
        np.testing.assert_allclose(out["y"], _want(x), rtol=2e-6, atol=1e-6)
    assert {k[0][0] for k in model._plans} == {1, 3, 5}
    flats = [_flat(model, r) for r in (3, 5)]
    assert all(f is not None for f in flats) and flats[0] is not flats[1]


@pytest.mark.parametrize("in_place", [False, True], ids=["copied", "read-in-place"])
def test_outputs_are_fresh_arrays_each_run(backend, chains, in_place, monkeypatch):
    """docs/ops.md, Running: every run returns new arrays; the next run must not write them.
    Also when feeds are read in place and outputs written into fresh arrays (binding.py): the
    flat run then prepares those steps again each run."""
    from dsl.opgraph import binding
    monkeypatch.setattr(binding, "MIN_BYTES", 0 if in_place else binding.MIN_BYTES)
    model = _models(chains, backend)[0] if not in_place else _chain(2).compile(backend=backend, fuse=False)
    a, b = np.full((2, 64), 0.5, np.float32), np.full((2, 64), -0.25, np.float32)
    first = model.run({"x": a})
    kept = {k: v.copy() for k, v in first.items()}
    for _ in range(3):
        second = model.run({"x": b})
    for k in first:
        np.testing.assert_array_equal(first[k], kept[k])
        assert not np.shares_memory(first[k], second[k])
    assert not np.shares_memory(first["y"], first["z"])
    plan = next(iter(model._plans.values())).first
    assert (plan.binding is not None) == in_place and plan.flat is not None
    np.testing.assert_allclose(second["y"], _want(b), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(first["y"], _want(a), rtol=2e-6, atol=1e-6)


def test_an_interrupt_stops_the_run_and_the_next_run_rearms():
    """A SIGINT during a prepared call (here: the counter moved as the C handler moves it) raises
    KeyboardInterrupt at the end of the run; the next run builds its tuples with the new counter."""
    model = _chain(2).compile(backend="numba", fuse=False)
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)
    model.run({"x": x})
    model.run({"x": x})
    plan = next(iter(model._plans.values())).first
    assert plan.flat is not None and plan.flat.prepared == len(plan.steps)
    ran = []

    def sigint():
        interrupt.COUNTER[0] += 1
    flat = FlatRun([plan.steps[0], (sigint, ()), *plan.steps[1:], (lambda: ran.append(1), ())])
    with pytest.raises(KeyboardInterrupt):
        flat.run()
    assert ran == [1]  # the steps after it ran (stopping at their first poll), then the check raised
    np.testing.assert_allclose(model.run({"x": x})["y"], _want(x), rtol=2e-6, atol=1e-6)
    assert plan.flat._start == interrupt.COUNTER[0]  # re-armed: its tuples carry the new start


def test_rebound_launches_keep_their_entry_point(monkeypatch):
    """Steps rebound to a caller's feed or a fresh output each run (binding.py) keep the entry
    point their step chose: the arrays have the very dtype, shape and layout, so the launcher is
    not asked again (that hashed numba types every run), and every run still reads its own feed."""
    from backends.numba.backend import NumbaLauncher
    from dsl.opgraph import binding
    monkeypatch.setattr(binding, "MIN_BYTES", 0)
    model = _chain(2).compile(backend="numba", fuse=False)
    rng = np.random.default_rng(3)
    model.run({"x": rng.standard_normal((2, 64)).astype(np.float32)})
    asked = []
    original = NumbaLauncher.prepared_entry
    monkeypatch.setattr(NumbaLauncher, "prepared_entry", lambda self, v, g: asked.append(1) or original(self, v, g))
    for _ in range(4):
        x = rng.standard_normal((2, 64)).astype(np.float32)
        out = model.run({"x": x})
        np.testing.assert_allclose(out["y"], _want(x), rtol=2e-6, atol=1e-6)
        np.testing.assert_array_equal(out["z"], -out["y"])
    plan = next(iter(model._plans.values())).first
    assert plan.binding is not None and plan.flat.prepared == len(plan.steps)
    rebound = plan.binding.binding.rebound(plan.steps, [None] * len(plan.binding.binding.roots))
    assert len(rebound) >= 3  # the feed's reader and both outputs' writers
    assert asked == []  # the flat run was made after the first run; no run asked again
