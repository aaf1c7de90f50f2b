"""The numba launcher's choice between its serial and parallel entries for small launches
(backends/numba/entry_choice.py): a kernel with nested loops whose serial runs keep taking long
tries the parallel entry and keeps the faster.  Thresholds and the required gain are patched
here, so no test depends on how fast or loaded the machine is; results are the same on either
entry."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i32

nb = pytest.importorskip("backends.numba.backend")
ec = pytest.importorskip("backends.numba.entry_choice")


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


def bound(x, y, rounds=3, fresh=True):
    """The launch bound; ``fresh``: forget what earlier tests taught the shared launcher."""
    launcher, values, grid = polish.prepare((x, y, rounds), {}, backend="numba")
    if fresh:
        launcher._choice = ec.EntryChoice()
    return launcher, values, grid


def entries(monkeypatch, launcher):
    """The names of the compiled entries the launcher runs, in order (the first serial run goes
    through the wrapper that compiles launch_serial on first use)."""
    seen = []
    real = launcher._run
    lazy = launcher._serial_when_ready

    def run(fn, *a):
        seen.append("launch_serial" if fn == lazy else fn.__name__)
        return real(fn, *a)
    monkeypatch.setattr(launcher, "_run", run)
    return seen


@pytest.mark.parametrize("frozen", [False, True], ids=["values", "frozen"])
@pytest.mark.parametrize("gain, settled", [(float("inf"), "launch_parallel"), (0.0, "launch_serial")],
                         ids=["parallel faster", "parallel not faster"])
def test_slow_serial_runs_try_the_parallel_entry_and_keep_the_faster(monkeypatch, gain, settled, frozen):
    """Also with a plan's frozen values (backends/numba/frozen.py), which run the same entries."""
    monkeypatch.setattr(ec, "SERIAL_HEAVY_S", -1.0)  # every serial run counts as slow
    monkeypatch.setattr(ec, "PARALLEL_GAIN", gain)    # inf: parallel always wins; 0: never
    x = np.linspace(-2, 2, 1000, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y)
    if frozen:
        values = launcher.freeze(values)
        assert type(values).__name__ == "Frozen"
    assert launcher._timed and not launcher.goes_parallel(grid, 2 * x.size)
    seen = entries(monkeypatch, launcher)
    for _ in range(ec.HEAVY_AFTER + ec.TRIALS + 2):
        y.fill(np.nan)
        launcher(values, grid)
        np.testing.assert_allclose(y, reference(x, 3), rtol=1e-5, atol=1e-6)
    assert seen == (["launch_serial"] * ec.HEAVY_AFTER + ["launch_parallel"] * ec.TRIALS + [settled] * 2)
    assert launcher.goes_parallel(grid, 2 * x.size) == (settled == "launch_parallel")
    assert not launcher.goes_parallel(grid, 2 * x.size + 2)  # another size is decided on its own


def test_fast_serial_launches_stay_serial_and_are_not_remembered(monkeypatch):
    monkeypatch.setattr(ec, "SERIAL_HEAVY_S", float("inf"))
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y, rounds=1)
    seen = entries(monkeypatch, launcher)
    for _ in range(ec.HEAVY_AFTER + ec.TRIALS + 1):
        launcher(values, grid)
    assert set(seen) == {"launch_serial"} and not launcher._choice.states
    np.testing.assert_allclose(y, reference(x, 1), rtol=1e-6)


def test_only_slow_runs_in_a_row_count(monkeypatch):
    """A tiny launch the OS preempted now and then must not go parallel."""
    x = np.linspace(-1, 1, 32, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y, rounds=1)
    for _ in range(3):
        for slow in [True] * (ec.HEAVY_AFTER - 1) + [False]:
            monkeypatch.setattr(ec, "SERIAL_HEAVY_S", -1.0 if slow else float("inf"))
            launcher(values, grid)
    assert launcher._choice.phase((grid, 2 * x.size)) == ec.TIMING
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
    monkeypatch.setattr(ec, "SERIAL_HEAVY_S", -1.0)
    x = np.arange(8, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = kernel.prepare((x, y), {}, backend="numba")
    launcher._choice = ec.EntryChoice()
    assert not launcher._timed
    for _ in range(ec.HEAVY_AFTER + 1):
        launcher(values, grid)
    assert not launcher._choice.states and not launcher.goes_parallel(grid, 16)
    np.testing.assert_array_equal(y, -x if kernel is negate else np.cumsum(x))


def test_the_memory_of_launch_signatures_is_bounded(monkeypatch):
    monkeypatch.setattr(ec, "SERIAL_HEAVY_S", -1.0)
    monkeypatch.setattr(ec, "MAX_KEYS", 4)
    launcher = None
    for n in range(1, 12):
        x = np.ones(n, np.float32)
        y = np.empty_like(x)
        launcher, values, grid = bound(x, y, rounds=0, fresh=n == 1)
        launcher(values, grid)
        np.testing.assert_array_equal(y, x)
    assert 0 < len(launcher._choice.states) <= 4


def test_the_state_machine_alone():
    choice = ec.EntryChoice()
    key = (3, 1000)
    choice.serial_took(key, ec.SERIAL_HEAVY_S / 2)
    assert choice.phase(key) == ec.TIMING and key not in choice.states
    for _ in range(ec.HEAVY_AFTER):
        choice.serial_took(key, 1.0)
    assert choice.phase(key) == ec.TRYING
    choice.parallel_took(key, 0.9)   # a slow trial (another process held the other core)...
    for _ in range(ec.TRIALS - 1):
        choice.parallel_took(key, 0.3)  # ...does not decide: the best trial does
    assert choice.phase(key) == ec.PARALLEL
    choice.parallel_took(key, 0.1)  # a late trial from another thread changes nothing
    choice.parallel_took((9, 9), 0.1)  # nor one for a signature forgotten meanwhile
    assert choice.phase(key) == ec.PARALLEL and choice.states[key][3] == 0.3


def test_a_settled_choice_is_timed_again_after_a_while(monkeypatch):
    """A choice made while a neighbour held the other core must not stick for the process's life."""
    monkeypatch.setattr(ec, "RECHECK_AFTER", 5)
    choice = ec.EntryChoice()
    key = (1, 4096)
    for _ in range(ec.HEAVY_AFTER):
        choice.serial_took(key, 1.0)
    for _ in range(ec.TRIALS):
        choice.parallel_took(key, 1.0)  # the other core was busy: parallel no faster
    assert choice.settled(key) == ec.SERIAL
    assert [choice.phase(key) for _ in range(5)] == [ec.SERIAL] * 5
    assert choice.phase(key) == ec.TIMING and key not in choice.states  # timed again from the start
    for _ in range(ec.HEAVY_AFTER):
        choice.serial_took(key, 1.0)
    for _ in range(ec.TRIALS):
        choice.parallel_took(key, 0.4)  # the neighbour is gone
    assert choice.settled(key) == ec.PARALLEL


def test_a_launcher_rechecks_its_settled_entry(monkeypatch):
    monkeypatch.setattr(ec, "SERIAL_HEAVY_S", -1.0)
    monkeypatch.setattr(ec, "PARALLEL_GAIN", 0.0)  # parallel never wins: settles serial
    monkeypatch.setattr(ec, "RECHECK_AFTER", 2)
    x = np.linspace(-2, 2, 1000, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y)
    seen = entries(monkeypatch, launcher)
    trial = ["launch_serial"] * ec.HEAVY_AFTER + ["launch_parallel"] * ec.TRIALS
    for _ in range(2 * (len(trial) + 2)):
        launcher(values, grid)
    assert seen == (trial + ["launch_serial"] * 2) * 2
    np.testing.assert_allclose(y, reference(x, 3), rtol=1e-5, atol=1e-6)
