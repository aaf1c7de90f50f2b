"""Compiling numba entry points in worker processes, side by side.

numba compiles one function at a time under a global lock, so a process compiles a model's
kernels one after the other (light_resnet50: ~20 entry points of 1-28 s each).  Worker
processes (``python -m backends.numba.compile_worker``, started on first need and kept for
the life of the process) each compile a job -- the entry points one plan needs of one generated
module, in one process so its shared ``thread`` function is typed once -- and numba writes the
machine code to the disk cache (backends/numba/cache.py); the calling process then loads it
from there, as a second process would.  So this works only with a usable disk cache.

Jobs are collected per compile batch (backends/compile_batch.py).  Workers are started only
when a batch has START_JOBS jobs or more, or one big one (START_WEIGHT: a few small kernels compile
faster in-process than a worker starts); once started, they get every job as it comes, in this
batch and every later one.  A job that is cancelled, fails or
whose worker cannot start or dies resolves to an error, and the caller compiles that entry
point in-process: a compile error then reads exactly as without workers.
``OPDSL_COMPILE_WORKERS=0`` turns all of this off.
"""
from __future__ import annotations

import atexit
import collections
import itertools
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Deque, List, Optional, Tuple

from backends import cache
from dsl import config

START_JOBS = 4  # a batch needs this many jobs before worker processes are started,
START_WEIGHT = 20_000  # or one job this heavy (Job.weight: a generated module this long compiles for
#                        seconds, more than a worker's start; light_resnet50's convolutions are 33-77 K)
_LENGTH = struct.Struct("<Q")


def wanted() -> bool:
    """Whether entry points may go to workers now: workers allowed and a disk cache to pass code through."""
    return config.compile_workers() > 0 and cache.enabled()


# --------------------------------------------------------------------------- the wire

def send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def receive(stream) -> Any:
    """The next object, or None when the other side closed the pipe."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (n,) = _LENGTH.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


# --------------------------------------------------------------------------- jobs

class Job:
    """Entry points of one generated module, compiled in this order by one worker (so the module's
    shared ``thread`` function is typed once): everything a worker needs, nothing to import."""

    __slots__ = ("stem", "source", "kernel", "entries", "future", "sent", "settled")

    def __init__(self, stem: str, source: str, kernel: str):
        self.stem, self.source, self.kernel = stem, source, kernel
        self.sent = False  # queued for the workers (else still held by its batch)
        self.settled = False  # its batch has ended: a caller now waits for the worker
        self.entries: List[Tuple[str, Tuple]] = []  # (entry point, numba signature)
        self.future: Future = Future()

    def message(self) -> dict:
        return {"cache_dir": str(cache.cache_root()), "stem": self.stem, "source": self.source,
                "entries": list(self.entries)}

    def weight(self) -> int:
        """Bigger first: generated text times entry points stands in for the compile time."""
        return len(self.source) * len(self.entries)


def wait(job: Optional[Job]) -> bool:
    """Wait for ``job``; True when its machine code should now be on disk.  A job whose batch has
    not ended (a launch during planning needs the code now) is cancelled instead unless a worker
    has started it: the caller compiles it rather than queue behind bigger jobs."""
    if job is None or (not job.settled and job.future.cancel()):
        return False
    try:
        status = job.future.result()
    except Exception:  # pragma: no cover - a pool bug: compile in-process
        return False
    return status[0] == "ok"


def submit(batch, stem: str, source: str, kernel: str, which: str, sig: Tuple) -> Job:
    """The job that will compile this entry point.  Until workers run, jobs wait in the batch;
    workers start as soon as a batch holds START_JOBS jobs, and from then on every job goes to
    them at once (their queue hands out the biggest waiting job first), so they compile while the
    model still plans (light_resnet50: its weight packing compiles in the calling process for
    ~50 s, during which held jobs left both workers idle).  An entry point of a module whose job
    has not started joins that job (its shared ``thread`` is typed once).  When workers never
    start, the few held jobs are cancelled at the end (compiled in-process)."""
    held: List[Job] = batch.state.setdefault("numba_held_jobs", [])
    jobs: List[Job] = batch.state.setdefault("numba_jobs", [])
    if _release not in batch.finishers:
        batch.finishers.append(_release)
    with _lock:
        job = next((j for j in jobs if j.stem == stem and not j.future.done() and not j.future.running()), None)
        if job is None:
            job = Job(stem, source, kernel)
            held.append(job)
            jobs.append(job)
        if all(w != which for w, _ in job.entries):
            job.entries.append((which, sig))
    if _pool is None and (len(held) >= START_JOBS or sum(j.weight() for j in held) >= START_WEIGHT):
        _get_pool()
    if _pool is not None and held:
        with _lock:
            ready, held[:] = [j for j in held if not j.future.cancelled()], []
        _pool.put_all(ready)
    return job


def _release(batch) -> None:
    """At the end of a batch: held jobs go to the workers (biggest first) if they run, else are cancelled."""
    held = batch.state.get("numba_held_jobs", [])
    for job in batch.state.get("numba_jobs", []):
        job.settled = True
    jobs, held[:] = [j for j in held if not j.future.cancelled()], []
    if _pool is None and len(jobs) >= START_JOBS:
        _get_pool()
    if _pool is None:
        for job in jobs:
            job.future.cancel()
        return
    _pool.put_all(jobs)


# --------------------------------------------------------------------------- the pool

class _Pool:
    """``size`` threads, each feeding one worker process from a shared queue."""

    def __init__(self, size: int):
        self.queue: "queue.PriorityQueue" = queue.PriorityQueue()  # (-weight, order, job); None ends
        self.order = itertools.count()
        self.size = size
        self.processes: List[subprocess.Popen] = []
        self.broken = ""  # why workers cannot start here; every job then fails at once
        for k in range(size):
            threading.Thread(target=self._serve, name=f"opdsl-compile-{k}", daemon=True).start()

    def put_all(self, jobs: List[Job]) -> None:
        """Queue ``jobs``; an idle worker takes the biggest (they are put in that order, so the first
        one taken is the biggest too)."""
        for job in sorted(jobs, key=Job.weight, reverse=True):
            job.sent = True
            self.queue.put((-job.weight(), next(self.order), job))

    def _serve(self) -> None:
        proc = None
        try:  # start now: the worker's imports and first compile overlap the planning
            proc = self._start()
        except OSError as e:
            self.broken = f"cannot start a compile worker: {e}"
        while True:
            job = self.queue.get()[2]
            if job is None:
                return
            if not job.future.set_running_or_notify_cancel():
                continue  # the caller compiled it meanwhile
            started = time.perf_counter()
            if self.broken:
                job.future.set_result(("error", self.broken))
                continue
            try:
                if proc is None or proc.poll() is not None:
                    proc = None
                    proc = self._start()
                with _lock:  # submit() may still add an entry point until the job runs
                    message = job.message()
                send(proc.stdin, message)
                result = receive(proc.stdout)
            except (OSError, ValueError, pickle.PickleError) as e:
                result = None
                if proc is None:  # could not start one: do not try again for every job
                    self.broken = f"cannot start a compile worker: {e}"
            if result is None:  # the worker died (or never started): the caller compiles in-process
                result = ("error", self.broken or "the compile worker exited")
                proc = None
            history.append((job.kernel, tuple(w for w, _ in job.entries), result[0] if result[0] == "ok" else
                            f"{result[0]}: {result[1]}", started, time.perf_counter(),
                            result[2] if result[0] == "ok" and len(result) > 2 else 0.0))
            job.future.set_result(result)

    def _start(self) -> subprocess.Popen:
        root = str(Path(__file__).resolve().parents[2])  # the folder holding the backends package
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env["OPDSL_COMPILE_WORKERS"] = "0"  # a worker never starts workers of its own
        proc = subprocess.Popen([sys.executable, "-m", "backends.numba.compile_worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, cwd=root, close_fds=True)
        with _lock:
            self.processes.append(proc)
        return proc

    def close(self) -> None:
        """Close the workers' input: each exits after its current job."""
        for _ in range(self.size):
            self.queue.put((0, next(self.order), None))
        with _lock:
            procs, self.processes = self.processes, []
        for proc in procs:
            try:
                proc.stdin.close()
            except OSError:  # pragma: no cover - already gone
                pass


_lock = threading.Lock()
# (kernel, entry points, "ok"/"error", start, end, the worker's CPU seconds) of every job the workers
# ran (benchmarks/compile_profile.py)
history: Deque[Tuple[str, Tuple[str, ...], str, float, float, float]] = collections.deque(maxlen=1000)
_pool: Optional[_Pool] = None


def _get_pool() -> _Pool:
    global _pool
    with _lock:
        if _pool is None:
            _pool = _Pool(max(1, config.compile_workers()))
            atexit.register(_pool.close)
        return _pool


def shutdown() -> None:
    """Stop the workers (tests; they are started again when needed)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()
