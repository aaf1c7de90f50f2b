"""A fourth backend gets every path by implementing the launcher protocol (backends/base.py):
kernel launches, model plans and tiles, with only ``__call__`` written and the optional
capabilities taken from their documented defaults."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32
from backends import base
from backends.interpreter import InterpreterBackend


class DoubleLauncher(base.Launcher):
    """Only ``__call__``: run_serial, run_parallel, freeze and kernel_ir come from the protocol."""

    def __init__(self, inner, limit=None):
        self.inner, self.calls = inner, []
        if limit is not None:
            self.max_logical_threads = limit

    def __call__(self, args, grid):
        self.calls.append(grid)
        self.inner(args, grid)


class DoubleBackend(base.Backend):
    """A test double: the interpreter's code behind a launcher of its own, claiming parallel teams."""

    name = "double"
    parallel = True

    def __init__(self, limit=None):
        self.inner, self.limit, self.launchers = InterpreterBackend(), limit, []

    def compile(self, request):
        launcher = DoubleLauncher(self.inner.compile(request), self.limit)
        self.launchers.append(launcher)
        return launcher

    def source(self, request):
        return self.inner.source(request)


@pytest.fixture
def double(monkeypatch):
    fake = DoubleBackend()
    monkeypatch.setattr(base, "_entry_points", lambda: {"double": lambda: fake})
    monkeypatch.setattr(base, "_LOADED", {})
    return fake


@dsl.kernel(threads=2)
def scale(x: In[f32], y: Out[f32], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i]


def test_the_protocol_defaults_describe_a_launcher_with_one_entry():
    launcher = DoubleLauncher(inner=lambda args, grid: None)
    assert launcher.can_run_parallel is False and launcher.kernel_ir is None
    assert launcher.max_logical_threads == base.MAX_LOGICAL_THREADS
    values = (np.zeros(2), 3)
    assert launcher.freeze(values) is values
    launcher.run_serial(values, 1)
    launcher.run_parallel(values, 2)
    assert launcher.calls == [1, 2]


def test_kernel_launches_run_on_the_double(double):
    x = np.arange(10, dtype=np.float32)
    y = np.empty_like(x)
    scale(x, y, a=3.0, backend="double")
    scale(x, y, a=2.0, backend="double")  # the fast path, same launcher
    np.testing.assert_array_equal(y, 2 * x)
    assert len(double.launchers) == 1 and double.launchers[0].calls == [1, 1]


def test_a_launchers_thread_limit_is_checked_before_it_runs(monkeypatch):
    fake = DoubleBackend(limit=4)
    monkeypatch.setattr(base, "_entry_points", lambda: {"double": lambda: fake})
    monkeypatch.setattr(base, "_LOADED", {})
    fresh = dsl.kernel(threads=2)(scale.fn)  # kernels keep launchers per backend name: a new one
    x = np.arange(10, dtype=np.float32)
    y = np.zeros_like(x)
    with pytest.raises(ValueError, match=r"grid=3 x threads=2 = 6 logical threads exceeds the double backend's "
                                         r"limit of 4 \(thread indexes are limited by the device\)"):
        fresh(x, y, a=1.0, backend="double", grid=3)
    assert not y.any()


@dsl.kernel(threads=2)
def row_sums(x: In[f32, 2], y: Out[f32, 2]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        acc = f32(0)
        for j in range(x.shape[1]):
            acc += x[r, j]
        y[r, 0] = acc


class RowSums(dsl.Op):
    """Row sums, tiled along the rows: the model runs its tiles on the launchers' serial entry."""

    kernels = {"default": row_sums}

    def infer(self, x):
        return dsl.TensorSpec((x.shape[0], 1), x.dtype)

    def tiling(self, x):
        return {0: 1}

    def map_tiles(self, out_tile, x):
        return [(out_tile[0][0], slice(None))]


def test_a_model_plans_and_tiles_on_the_double(double, monkeypatch):
    from dsl.opgraph import tiling
    serial_runs = []
    monkeypatch.setattr(DoubleLauncher, "run_serial",
                        lambda self, args, grid: (serial_runs.append(grid), self(args, grid)), raising=False)
    g = dsl.Graph("g")
    x = g.input("x", (64, 32), "f32")
    g.output(RowSums()(x), "y")
    model = g.compile(backend="double", tiling=2)
    assert tiling.runs_tiles_concurrently("double") and "tiles=" in str(model)
    xv = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    for _ in range(2):  # the plan is built on the first run and replayed on the second
        y = model.run({"x": xv})["y"]
        np.testing.assert_allclose(y[:, 0], xv.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert len(serial_runs) >= 2  # each tile launched on the serial entry


def test_builtin_backends_state_their_capabilities_and_ops_read_them_not_names(double, monkeypatch):
    import ops.matmul
    import ops.norm
    assert (dsl.target("numba").parallel, dsl.target("numba").packed_kernels,
            dsl.target("numba").fastmath_keeps_inf_nan) == (True, True, True)
    assert not (dsl.target("interpreter").parallel or dsl.target("interpreter").packed_kernels)
    big = (dsl.f32, 512, 512, 512)
    assert ops.matmul._select(*big, "double") != "packed" and ops.norm._select_rows("double") == "default"
    monkeypatch.setattr(DoubleBackend, "packed_kernels", True)
    monkeypatch.setattr(DoubleBackend, "fastmath_keeps_inf_nan", True)
    from dsl.runtime import target
    monkeypatch.setattr(target, "_made", {})
    assert ops.matmul._select(*big, "double") == "packed" and ops.norm._select_rows("double") == "rows"
