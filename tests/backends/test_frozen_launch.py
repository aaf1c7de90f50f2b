"""A model's launches on numba run frozen values (backends/numba/frozen.py): adapted and
type-checked once when the plan is made, then handed straight to the compiled entry point.
Only values of exactly the compiled types may take that path; anything else stays on numba's
dispatcher, which types every call."""
import numpy as np
import pytest

import dsl
import ops
from dsl import In, Out, f32

nb = pytest.importorskip("backends.numba.backend")
frozen = pytest.importorskip("backends.numba.frozen")


@dsl.kernel(threads=2)
def affine(x: In[f32, 2], y: Out[f32, 2], a: f32, b: dsl.Vec[f32, 2]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * a + b[i % 2]


def _bound(rows):
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    y = np.full_like(x, np.nan)
    launcher, values, grid = affine.prepare((x, y, 2, [1, -1]), {}, backend="numba")
    return x, y, launcher, values, grid


@pytest.mark.parametrize("rows", [4, nb.SERIAL_MAX_ELEMENTS // 4], ids=["serial", "parallel"])
def test_frozen_values_run_the_compiled_entry_point(rows):
    x, y, launcher, values, grid = _bound(rows)
    fv = launcher.freeze(values)
    assert type(fv) is frozen.Frozen and fv.size == 2 * x.size
    assert type(fv[2]) is np.float32  # the int 2 adapted once, for every launch
    which = "launch_serial" if rows == 4 else "launch_parallel"
    for _ in range(2):
        y.fill(np.nan)
        launcher(fv, grid)
        np.testing.assert_array_equal(y, x * 2 + np.tile([1, -1], x.size // 2).reshape(x.shape))
    assert which in launcher._direct


def test_values_of_other_types_are_not_frozen():
    """A frozen tuple skips numba's typing, so freeze checks every value against the compiled
    signature: another rank, dtype or a non-contiguous array keeps the values on the dispatcher."""
    x, y, launcher, values, grid = _bound(4)
    sig = launcher._sig[:len(values)]
    assert frozen.matches(values, sig)
    for k, bad in [(0, values[0].reshape(2, 2, 4)), (0, values[0].astype(np.float64)), (1, np.empty((4, 8), np.float32)[:, ::2]),
                   (2, np.float64(2.0)), (3, np.zeros(2, np.int64))]:
        other = list(values)
        other[k] = bad
        assert not frozen.matches(other, sig), k
        assert frozen.freeze(other, launcher._tensors, sig) is None
    assert not frozen.matches(values[:-1], sig)


def test_debug_launchers_keep_their_checks():
    """Debug launches carry an error record: their values are never frozen."""
    x, y = np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32)
    launcher, values, grid = dsl.kernel(affine.fn, threads=2, debug=True).prepare((x, y, 2.0, [0, 0]), {},
                                                                                  backend="numba")
    fv = launcher.freeze(values)
    assert type(fv) is not frozen.Frozen
    launcher(fv, grid)
    np.testing.assert_array_equal(y, 2 * x)


@dsl.kernel(threads=2)
def strided(x: In[f32], y: Out[f32], step: dsl.i64):
    for i in range(dsl.thread_id(), x.size, step):
        y[i] = x[i] + 1


def test_frozen_values_keep_the_run_time_argument_checks():
    """A run-time range step carries the error record to the entry point: frozen values too."""
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    launcher, values, grid = strided.prepare((x, y, 0), {}, backend="numba")
    fv = launcher.freeze(values)
    assert type(fv) is frozen.Frozen
    with pytest.raises(dsl.KernelValueError, match="step is 0"):
        launcher(fv, grid)
    launcher, values, grid = strided.prepare((x, y, 2), {}, backend="numba")
    launcher(launcher.freeze(values), grid)
    np.testing.assert_array_equal(y, x + 1)


def test_a_model_plan_launches_frozen_values(backend):
    """On numba every kernel step of a plan holds frozen values; the other backends keep theirs."""
    g = dsl.Graph("mm")
    a = g.input("a", (3, 16, 24), dsl.f32)
    b = g.input("b", (3, 24, 40), dsl.f32)
    g.output(ops.Relu(ops.MatMul(a, b)), "y")
    model = g.compile(backend=backend)
    rng = np.random.default_rng(0)
    for _ in range(2):
        av, bv = rng.standard_normal((3, 16, 24), np.float32), rng.standard_normal((3, 24, 40), np.float32)
        np.testing.assert_allclose(model.run({"a": av, "b": bv})["y"], np.maximum(av @ bv, 0), rtol=1e-4, atol=1e-4)
    plan = next(iter(model._plans.values())).first
    kinds = {type(args[0]).__name__ for fn, args in plan.steps if len(args) == 2}
    assert kinds == ({"Frozen"} if backend == "numba" else kinds - {"Frozen"}) and kinds
