"""Keep numba's OpenMP workers off the core of the thread that launches them.

When every core is busy, Linux may wake a sleeping thread on its waker's core (the scheduler's
wake-affine choice).  A parallel launch then queues its worker behind the launching thread, which
runs its own share and spins at the region's closing barrier (``GOMP_SPINCOUNT``, about 65 µs
here) before it sleeps and the worker gets to run its share.  At load 5-6 on two cores, a
two-thread launch of the attention product 4x128x128 @ 4x128x64 took 126-143 µs best (188-202
median) that way, slower than one thread (79-85 µs); with its worker kept off the launching
thread's core, 41-50 µs (63-67 median), as numpy's two OpenBLAS threads (benchmarks/RESULTS.md,
issue 29, twenty-first session, slice attn).

``before_parallel_launch()`` runs before each parallel launch.  It costs a ``sched_getcpu``
while the launching thread stays on its core; when it has moved (or on its first parallel
launch), each worker of its team is allowed every core of the launching thread's mask but its
current one (``sched_setaffinity``, one call a worker).  The launching thread itself is never
bound.  Each thread that launches has its own libgomp pool: its workers' thread ids are read
once, by a ``GOMP_parallel`` region as wide as numba's widest.  Linux with numba's OpenMP layer
and two or more allowed cores only, and only where ``OPDSL_WORKERS_OFF_LAUNCH_CORE=1`` asks for it:
on a quiet machine it gained nothing (back to back 1.10-1.14x numpy's best either way) and
made the after-idle medians worse (300-317 µs against 183-204), so it is for machines whose
cores are all busy.  Anywhere else, or on any failure, it does nothing.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Dict, NamedTuple, Optional

ENV_ON = "OPDSL_WORKERS_OFF_LAUNCH_CORE"


class Team(NamedTuple):
    """A launching thread's workers and the core they are kept off."""

    pid: int  # a forked child's copy of the state names its parent's threads: made again there
    cpu: int
    workers: tuple
    mask: frozenset  # the launching thread's cores when the team was read


_local = threading.local()  # .team: this launching thread's Team
_off = [os.environ.get(ENV_ON) != "1"]
_libs: list = []  # [(libgomp, sched_getcpu, region callback type) or None], once known
_getcpu = [lambda: -1]  # libc's sched_getcpu once loaded


def before_parallel_launch() -> None:
    """Keep this thread's workers off its current core (see the module docstring)."""
    if _off[0]:
        return
    team = getattr(_local, "team", None)
    if team is not None and team.cpu == _getcpu[0]() and team.pid == os.getpid():
        return
    _keep_off(team)


def _keep_off(team: Optional[Team]) -> None:
    if not _libs:
        if not _layer_ready():  # the first parallel launch starts numba's threading layer: next time
            return
        _libs.append(_load())
        if _libs[0] is not None:
            _getcpu[0] = _libs[0][1]
    if _libs[0] is None:
        _off[0] = True
        return
    cpu = _getcpu[0]()
    try:
        if team is None or team.pid != os.getpid():
            import numba
            ids = team_thread_ids(numba.config.NUMBA_NUM_THREADS)
            me = threading.get_native_id()
            team = Team(os.getpid(), cpu, tuple(t for n, t in sorted(ids.items()) if n > 0 and t != me),
                        frozenset(os.sched_getaffinity(0)))
        others = team.mask - {cpu}
        if others:
            for t in team.workers:
                os.sched_setaffinity(t, others)
        _local.team = team._replace(cpu=cpu)
    except OSError:  # a worker gone, a mask refused: leave the workers where the OS puts them
        _off[0] = True


def _layer_ready() -> bool:
    """Whether numba's threading layer has started; it must be OpenMP (else: off for good)."""
    import numba
    from numba.np.ufunc import parallel as npp
    if not getattr(npp, "_is_initialized", False):
        return False
    if numba.threading_layer() != "omp" or not hasattr(os, "sched_setaffinity"):
        _off[0] = True
        return False
    return True


def _load():
    """(libgomp as numba's OpenMP layer loaded it, libc's sched_getcpu, region callback type), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libgomp" in line and ".so" in line}
        if len(paths) != 1:
            return None
        gomp = ctypes.CDLL(paths.pop())  # already loaded: the same library, the same thread pools
        getcpu = ctypes.CDLL(None).sched_getcpu
        getcpu.restype, getcpu.argtypes = ctypes.c_int, ()
        gomp.omp_get_thread_num.restype, gomp.omp_get_thread_num.argtypes = ctypes.c_int, ()
        region = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        gomp.GOMP_parallel.argtypes = [region, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        gomp.GOMP_parallel.restype = None
        return gomp, getcpu, region
    except (OSError, AttributeError):
        return None


def team_thread_ids(threads: int) -> Dict[int, int]:
    """{OpenMP thread number: Linux thread id} of a ``threads``-wide team launched by this thread
    (its libgomp pool: the threads numba's parallel regions from this thread run on)."""
    gomp, _getcpu_fn, region = _libs[0]
    seen: Dict[int, int] = {}

    def record(_data):
        seen[gomp.omp_get_thread_num()] = threading.get_native_id()

    gomp.GOMP_parallel(region(record), None, threads, 0)
    return seen


def current_team() -> Optional[Team]:
    """This thread's Team, once a parallel launch made it (tests, benchmarks)."""
    return getattr(_local, "team", None)


def enable(on: bool = True) -> None:
    """Turn the keeping on or off for this process (``OPDSL_WORKERS_OFF_LAUNCH_CORE=1`` starts it on);
    off gives this thread's workers back every core they were kept within."""
    team = current_team()
    if not on and team is not None and team.pid == os.getpid():
        for t in team.workers:
            try:
                os.sched_setaffinity(t, team.mask)
            except OSError:
                pass
    _local.team = None
    _off[0] = not on
