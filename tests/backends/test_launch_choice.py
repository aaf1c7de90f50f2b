"""The numba launcher's choice between its serial and parallel entries (backends/numba/backend.py):
small launches run serially, unless their serial runs keep taking longer than SERIAL_HEAVY_S
(then waking the worker threads is worth it).  The threshold is patched here, so no test depends
on how fast the machine is; results are the same on either entry."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i32

nb = pytest.importorskip("backends.numba.backend")


@dsl.kernel(threads=4)
def polish(x: In[f32], y: Out[f32], rounds: i32):
    """A few sin rounds per element: much work on few elements."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        for _ in range(rounds):
            v = dsl.sin(v) + 0.5 * v
        y.flat[i] = v


def reference(x, rounds):
    v = x.astype(np.float32)
    for _ in range(rounds):
        v = (np.sin(v) + np.float32(0.5) * v).astype(np.float32)
    return v


def bound(x, y, rounds=3):
    launcher, values, grid = polish.prepare((x, y, rounds), {}, backend="numba")
    return launcher, values, grid


def test_a_launch_whose_serial_runs_stay_slow_moves_to_the_parallel_entry(monkeypatch):
    monkeypatch.setattr(nb, "SERIAL_HEAVY_S", -1.0)  # every serial run counts as slow
    x = np.linspace(-2, 2, 1000, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y)
    assert not launcher.goes_parallel(grid, 2 * x.size)
    seen = []
    real = launcher._run
    monkeypatch.setattr(launcher, "_run", lambda fn, *a: (seen.append(fn.__name__), real(fn, *a)))
    for _ in range(nb.HEAVY_AFTER + 2):
        y.fill(np.nan)
        launcher(values, grid)
        np.testing.assert_allclose(y, reference(x, 3), rtol=1e-5, atol=1e-6)
    assert seen == ["launch_serial"] * nb.HEAVY_AFTER + ["launch_parallel"] * 2
    assert launcher.goes_parallel(grid, 2 * x.size)
    assert not launcher.goes_parallel(grid, 2 * x.size + 2)  # another size is counted on its own


def test_fast_serial_launches_stay_serial(monkeypatch):
    monkeypatch.setattr(nb, "SERIAL_HEAVY_S", float("inf"))
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y, rounds=1)
    for _ in range(nb.HEAVY_AFTER + 2):
        launcher(values, grid)
    assert not launcher.goes_parallel(grid, 2 * x.size)
    np.testing.assert_allclose(y, reference(x, 1), rtol=1e-6)


@dsl.kernel(threads=4)
def negate(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = -x.flat[i]


@dsl.kernel(threads=1)
def prefix(x: In[f32], y: Out[f32]):
    for i in range(x.size):
        acc = 0.0
        for j in range(i + 1):
            acc += x.flat[j]
        y.flat[i] = acc


@pytest.mark.parametrize("kernel", [negate, prefix], ids=["one loop", "one thread"])
def test_launches_that_cannot_gain_are_never_timed(monkeypatch, kernel):
    """One loop over the elements (little work each) or a single thread: always serial, untimed."""
    monkeypatch.setattr(nb, "SERIAL_HEAVY_S", -1.0)
    x = np.arange(8, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = kernel.prepare((x, y), {}, backend="numba")
    assert not launcher._timed
    for _ in range(nb.HEAVY_AFTER + 1):
        launcher(values, grid)
    assert not launcher._slow and not launcher.goes_parallel(grid, 16)
    np.testing.assert_array_equal(y, -x if kernel is negate else np.cumsum(x))


def test_the_memory_of_slow_sizes_is_bounded(monkeypatch):
    monkeypatch.setattr(nb, "SERIAL_HEAVY_S", -1.0)
    monkeypatch.setattr(nb, "_HEAVY_KEYS", 4)
    launcher = None
    for n in range(1, 12):
        x = np.ones(n, np.float32)
        y = np.empty_like(x)
        launcher, values, grid = bound(x, y, rounds=0)
        launcher(values, grid)
        np.testing.assert_array_equal(y, x)
    assert 0 < len(launcher._slow) <= 4


def test_only_slow_runs_in_a_row_count(monkeypatch):
    """A tiny launch the OS preempted now and then must not move to the parallel entry."""
    x = np.linspace(-1, 1, 32, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y, rounds=1)
    for _ in range(3):
        for slow in [True] * (nb.HEAVY_AFTER - 1) + [False]:
            monkeypatch.setattr(nb, "SERIAL_HEAVY_S", -1.0 if slow else float("inf"))
            launcher(values, grid)
    assert not launcher.goes_parallel(grid, 2 * x.size)
    np.testing.assert_allclose(y, reference(x, 1), rtol=1e-6)
