"""backends/numba/worker_cores.py: a parallel launch keeps numba's OpenMP workers off the core of
the thread that launched it (each worker allowed every other core of that thread's mask), per
launching thread, when turned on (off by default).  No timing: the masks are what is checked."""
import os
import threading

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32

wc = pytest.importorskip("backends.numba.worker_cores")
numba = pytest.importorskip("numba")

N = 1 << 18  # above SERIAL_MAX_ELEMENTS: the launch goes parallel


@dsl.kernel(threads=4)
def twice_plus_one(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = 2.0 * x.flat[i] + 1.0


def launch():
    x = np.arange(N, dtype=np.float32)
    y = np.empty_like(x)
    twice_plus_one(x, y, backend="numba")
    np.testing.assert_array_equal(y, 2 * x + 1)


def _can_keep() -> bool:
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        return False
    from backends.numba import backend
    return numba.config.NUMBA_NUM_THREADS >= 2 and backend._workers() >= 2


needs_two_cores = pytest.mark.skipif(not _can_keep(), reason="needs Linux, two allowed cores and two numba threads")


@pytest.fixture
def kept():
    """The keeping on, as a fresh process starts it; this thread's team as a launch leaves it."""
    wc.enable(True)
    # a kernel's first big launch may run serially (no parallel entry compiled yet), and the
    # first parallel launch starts numba's threading layer: nothing is kept before that
    for _ in range(4):
        launch()
        if wc.current_team() is not None:
            break
    if numba.threading_layer() != "omp":
        pytest.skip(f"numba's threading layer is {numba.threading_layer()}, not OpenMP")
    yield wc.current_team()
    wc.enable(os.environ.get(wc.ENV_ON) == "1")


def _masks(team):
    return {t: frozenset(os.sched_getaffinity(t)) for t in team.workers}


@needs_two_cores
def test_a_parallel_launch_keeps_its_workers_off_the_launching_core(kept):
    team = kept
    assert team is not None and team.pid == os.getpid()
    assert team.workers and threading.get_native_id() not in team.workers
    assert all(mask == team.mask - {team.cpu} for mask in _masks(team).values())


@needs_two_cores
def test_turned_off_the_workers_get_every_core_back(kept):
    wc.enable(False)
    assert all(mask == kept.mask for mask in _masks(kept).values())
    launch()  # results stay right, and nothing is kept
    assert wc.current_team() is None
    assert all(mask == kept.mask for mask in _masks(kept).values())


@needs_two_cores
def test_a_team_recorded_by_another_process_is_read_again(kept):
    """A forked child inherits its parent's state, which names the parent's threads: a team
    whose pid is not this process's is read again before any mask is set."""
    wc._local.team = kept._replace(pid=-1, workers=(-12345,))
    launch()
    team = wc.current_team()
    assert team.pid == os.getpid() and -12345 not in team.workers


@needs_two_cores
def test_each_launching_thread_keeps_its_own_team(kept):
    got = {}

    def other():
        launch()
        got["team"] = wc.current_team()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    team = got["team"]
    assert team is not None and team.workers and not set(team.workers) & set(kept.workers)
    assert t.native_id not in team.workers
