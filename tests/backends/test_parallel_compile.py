"""Compiling a batch of numba entry points in worker processes (backends/numba/parallel_compile.py,
backends/compile_batch.py): same results as compiling in-process, the machine code really
comes from the workers (the calling process only loads it from the disk cache), the
OPDSL_COMPILE_WORKERS switch, the fallbacks (no disk cache, workers that cannot start), the
same CompileError when a compile fails in a worker, and a model planned from ``__main__``."""
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dsl
from backends import cache
from backends.numba import backend as nb
from backends.numba import parallel_compile
from dsl import In, Out
from backends import compile_batch

ROOT = Path(__file__).resolve().parents[2]
SALT = 0  # varied per test through Kernel.variant: every test compiles code no process has seen
_salts = itertools.count(os.urandom(1)[0] * 100 + 1)  # small: exact in f32, fits i32

T = dsl.TypeVar("T")


@dsl.kernel
def axpb(x: In[T], y: Out[T], a: T):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + SALT


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A fresh cache folder, workers started for any batch (START_JOBS=1), and stopped afterwards
    (a worker keeps the cache folder of its last job)."""
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPDSL_NO_DISK_CACHE", raising=False)
    monkeypatch.setenv("OPDSL_COMPILE_WORKERS", "2")
    monkeypatch.setattr(parallel_compile, "START_JOBS", 1)
    cache.reset()
    parallel_compile.shutdown()
    yield tmp_path / "cache"
    parallel_compile.shutdown()
    cache.reset()


def _salted():
    return axpb.variant(defines={"SALT": next(_salts)})


def _cases():
    small = np.arange(-6, 6, dtype=np.float32)
    big = np.linspace(-1, 1, 1 << 18).astype(np.float64)  # large enough for the parallel entry point
    ints = np.arange(-5, 5, dtype=np.int32)
    return [(small, np.float32(2)), (big, np.float64(-3)), (ints, np.int32(7))]


def _run_batch(kernel):
    """Prepare one launch per case inside a batch, then run them; -> (outputs, launchers)."""
    prepared = []
    with compile_batch.batch():
        for x, a in _cases():
            y = np.empty_like(x)
            prepared.append((y, kernel.prepare((x, y, a), {}, backend="numba")))
    outs = []
    for y, (launcher, values, grid) in prepared:
        launcher(values, grid)
        outs.append(y)
    return outs, [p[1][0] for p in prepared]


def _hits(launchers):
    """(cache hits, compiles) of the dispatchers these launchers used in this process."""
    hits = misses = 0
    for launcher in launchers:
        for fn in [launcher._serial, *launcher._ready.values()]:
            if not hasattr(fn, "stats"):
                continue  # launch_serial of a batch's launcher that never ran serially: never compiled
            hits += sum(fn.stats.cache_hits.values())
            misses += sum(fn.stats.cache_misses.values())
    return hits, misses


def test_workers_compile_a_batch_with_in_process_results(fresh, monkeypatch):
    kernel = _salted()
    salt = dict(kernel.defines)["SALT"]
    outs, launchers = _run_batch(kernel)
    for (x, a), y in zip(_cases(), outs):
        np.testing.assert_array_equal(y, a * x + x.dtype.type(salt))
    assert "launch_parallel" in launchers[1]._ready  # the big case asked for the parallel entry point only
    assert launchers[1]._pending and not launchers[0]._pending
    assert _hits(launchers) == (3, 0), list(parallel_compile.history)  # all 3 compiled by the workers
    # a process that finds them on disk (here: forgetting the loaded modules) sends no job
    nb._modules.clear()
    again, launchers = _run_batch(kernel.variant(defines={"SALT": salt}))
    assert not any(l._jobs or l._pending for l in launchers[::2]) and _hits(launchers)[1] == 0
    for y, r in zip(outs, again):
        np.testing.assert_array_equal(y, r)
    # the same kernel compiled in-process (workers off, another cache) gives the same bits
    monkeypatch.setenv("OPDSL_COMPILE_WORKERS", "0")
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(fresh.parent / "other"))
    cache.reset()
    again = kernel.variant(defines={"SALT": salt})
    nb._modules.clear()
    ref, launchers = _run_batch(again)
    for y, r in zip(outs, ref):
        np.testing.assert_array_equal(y, r)
    assert _hits(launchers) == (0, 3)  # in-process too, the big case compiles its parallel entry only


def test_running_workers_get_each_job_before_the_batch_ends(fresh):
    """Once workers run, a job goes to them when submitted (a model may plan for a long while yet:
    light_resnet50's weight packing compiles in-process for most of its planning)."""
    kernel = _salted()
    salt = dict(kernel.defines)["SALT"]
    prepared = []
    with compile_batch.batch() as b:
        for x, a in _cases():
            y = np.empty_like(x)
            prepared.append((x, a, y, kernel.prepare((x, y, a), {}, backend="numba")))
        jobs = list(b.state["numba_jobs"])
        assert len(jobs) == 3 and all(j.sent for j in jobs) and not any(j.settled for j in jobs)
    assert all(j.settled for j in jobs)
    for x, a, y, (launcher, values, grid) in prepared:
        launcher(values, grid)
        np.testing.assert_array_equal(y, a * x + x.dtype.type(salt))


def test_a_planning_launch_takes_back_a_queued_job_and_waits_once_planning_ended():
    queued = parallel_compile.Job("stem", "source", "kernel")
    queued.sent = True  # with the workers, no worker has started it, its batch still planning
    assert parallel_compile.wait(queued) is False and queued.future.cancelled()  # compiled in-process
    done = parallel_compile.Job("stem", "source", "kernel")
    done.sent = done.settled = True
    done.future.set_result(("ok", 0.0, 0.0))
    assert parallel_compile.wait(done) is True


def test_switch_off_compiles_in_process(fresh, monkeypatch):
    monkeypatch.setenv("OPDSL_COMPILE_WORKERS", "0")
    kernel = _salted()
    outs, launchers = _run_batch(kernel)
    assert parallel_compile._pool is None and _hits(launchers) == (0, 3)
    x, a = _cases()[0]
    np.testing.assert_array_equal(outs[0], a * x + np.float32(dict(kernel.defines)["SALT"]))
    monkeypatch.setenv("OPDSL_COMPILE_WORKERS", "many")
    with pytest.raises(ValueError, match=r"OPDSL_COMPILE_WORKERS='many'; accepted: a whole number from 0"):
        parallel_compile.wanted()


def test_few_jobs_stay_in_process(fresh, monkeypatch):
    monkeypatch.setattr(parallel_compile, "START_JOBS", 10)
    outs, launchers = _run_batch(_salted())
    assert parallel_compile._pool is None and _hits(launchers) == (0, 3)


def test_no_disk_cache_compiles_in_process(fresh, monkeypatch):
    monkeypatch.setenv("OPDSL_NO_DISK_CACHE", "1")
    kernel = _salted()
    outs, launchers = _run_batch(kernel)
    assert parallel_compile._pool is None
    x, a = _cases()[2]
    np.testing.assert_array_equal(outs[2], a * x + np.int32(dict(kernel.defines)["SALT"]))


def test_workers_that_cannot_start_fall_back(fresh, monkeypatch):
    def no_processes(self):
        raise OSError("processes are not allowed here")
    monkeypatch.setattr(parallel_compile._Pool, "_start", no_processes)
    kernel = _salted()
    outs, launchers = _run_batch(kernel)
    assert "cannot start a compile worker: processes are not allowed here" in parallel_compile._pool.broken
    assert _hits(launchers) == (0, 3)
    x, a = _cases()[1]
    np.testing.assert_array_equal(outs[1], a * x + dict(kernel.defines)["SALT"])


def _break_serial_entry(monkeypatch):
    """Generated code numba rejects (a bug in the generator, as far as the user can tell)."""
    program = nb.NumbaBackend.program

    class Broken:
        def __init__(self, real):
            self.real, self.gen = real, real.gen

        def source(self):
            text = self.real.source()
            at = text.index("\n", text.index('"""', text.index("def launch_serial(")) + 3)
            return text[:at] + "\n    opdsl_no_such_helper(0)" + text[at:]

    monkeypatch.setattr(nb.NumbaBackend, "program", staticmethod(lambda request: Broken(program(request))))


def test_failing_compile_in_a_worker_raises_the_in_process_error(fresh, monkeypatch):
    _break_serial_entry(monkeypatch)
    x = np.ones(8, np.float32)
    messages = []
    for workers in ("2", "0"):
        monkeypatch.setenv("OPDSL_COMPILE_WORKERS", workers)
        kernel = _salted()
        with pytest.raises(dsl.CompileError) as err:
            with compile_batch.batch():
                launcher, values, grid = kernel.prepare((x, np.empty_like(x), np.float32(1)), {}, backend="numba")
                assert launcher._jobs if workers == "2" else not launcher._jobs
            launcher(values, grid)
        messages.append(str(err.value))
    assert "numba could not compile the generated launch_serial for kernel 'axpb'" in messages[0]
    assert messages[0] == messages[1]


def test_a_model_planned_from_main_uses_the_workers(tmp_path):
    """A script run as ``__main__`` (no ``if __name__ == '__main__'`` guard): workers never import it."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import dsl, ops
        from backends.numba import parallel_compile
        parallel_compile.START_JOBS = 1
        g = dsl.Graph("m")
        x = g.input("x", (3, 70000), dsl.f32)
        g.output(ops.Sqrt(ops.Abs(ops.Mul(x, x))), "y")
        model = g.compile(backend="numba", fuse=False)
        xv = np.linspace(-4, 4, 3 * 70000).astype(np.float32).reshape(3, 70000)
        np.testing.assert_allclose(model.run({"x": xv})["y"], np.abs(xv), rtol=1e-6)
        print("workers", len(parallel_compile._pool.processes))
    """))
    env = dict(os.environ, OPDSL_CACHE_DIR=str(tmp_path / "cache"), OPDSL_COMPILE_WORKERS="2",
               PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "workers 2" in done.stdout or "workers 1" in done.stdout
    assert list((tmp_path / "cache" / "numba").glob("*.launch_parallel-*.nbi"))  # compiled there, while planning
