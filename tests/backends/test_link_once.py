"""LLVM work once per entry point (backends/numba/link_once.py) and the Lean pipeline's rewrite passes
(backends/numba/pipeline.py): what is no longer optimized or emitted on its own, that results do not
change, that a body function saved by one process is linked by the next, and that numba's rewrites
still apply where they match."""
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32

nb = pytest.importorskip("backends.numba.backend")
from backends import cache  # noqa: E402
from backends.numba import link_once, pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SALT = 0  # varied per test: every test compiles code no process has seen
_salts = itertools.count(os.urandom(1)[0] * 100 + 1)


@dsl.func
def scaled(v: f32, a: f32) -> f32:
    return v * a + SALT


@dsl.kernel
def scale(x: In[f32], y: Out[f32], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = scaled(x.flat[i], a)


def _salted():
    return scale.variant(defines={"SALT": next(_salts)})


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPDSL_NO_DISK_CACHE", raising=False)
    monkeypatch.setenv("OPDSL_COMPILE_WORKERS", "0")
    cache.reset()
    yield tmp_path / "cache"
    cache.reset()


def _launcher(kernel):
    (launcher,) = [v for (b, _), v in kernel._variants.items() if b == "numba"]
    return launcher


def test_only_the_entries_are_optimized_and_emitted(own_cache, monkeypatch):
    from numba.core import codegen
    optimized = []
    original = codegen.CPUCodeLibrary._optimize_final_module

    def record(library):
        optimized.append(library.name)
        return original(library)

    monkeypatch.setattr(codegen.CPUCodeLibrary, "_optimize_final_module", record)
    kernel = _salted()
    salt = np.float32(dict(kernel.defines)["SALT"])
    x = np.linspace(-2, 2, 1000, dtype=np.float32)
    y = np.empty_like(x)
    launcher = kernel.prepare((x, y, np.float32(3)), {}, backend="numba")[0]
    launcher.run_serial(launcher._adapt((x, y, np.float32(3))), 4)
    np.testing.assert_array_equal(y, x * np.float32(3) + salt)
    y[:] = 0
    launcher.run_parallel(launcher._adapt((x, y, np.float32(3))), 4)
    np.testing.assert_array_equal(y, x * np.float32(3) + salt)
    # thread, the @dsl.func and numba's parfor gufunc and its wrappers were each optimized and
    # turned into machine code on their own before: now only the two entries are
    # (NRT's own library, generated at the process's first compile, is called directly: it has machine code)
    entries = sorted(n.rsplit(".", 1)[-1] for n in optimized if n != "nrt")
    assert entries == ["launch_parallel", "launch_serial"], optimized
    mod = launcher._module
    (body,) = mod.thread.overloads.values()
    assert body.library._link_only  # linked twice, never finalized on its own
    assert all(not cres.library._link_only for cres in mod.launch_parallel.overloads.values())


def test_outside_its_block_numba_finalizes_as_before():
    from numba import njit
    from numba.core.registry import cpu_target

    @njit(cache=False)
    def twice(v):
        return v * 2

    assert twice(4) == 8
    (cres,) = twice.overloads.values()
    assert type(cres.library) is not link_once.LinkOnceLibrary
    with link_once.compiling():
        assert type(cpu_target.target_context.codegen().create_library("x")) is link_once.LinkOnceLibrary
    assert type(cpu_target.target_context.codegen().create_library("x")) is not link_once.LinkOnceLibrary


def test_a_body_saved_by_one_process_is_linked_by_the_next(own_cache):
    """The first process compiles the serial entry (its thread is saved as bitcode: it never had
    machine code); the second compiles the parallel entry from it without typing thread again."""
    salt = next(_salts)
    script = textwrap.dedent(f"""
        import sys, numpy as np
        from tests.backends.test_link_once import scale
        kernel = scale.variant(defines={{"SALT": {salt}}})
        x = np.linspace(-2, 2, 1000, dtype=np.float32)
        y = np.empty_like(x)
        launcher = kernel.prepare((x, y, np.float32(3)), {{}}, backend="numba")[0]
        args = launcher._adapt((x, y, np.float32(3)))
        launcher.run_parallel(args, 4) if sys.argv[1] == "parallel" else launcher.run_serial(args, 4)
        assert np.array_equal(y, x * np.float32(3) + np.float32({salt})), y[:4]
        thread = launcher._module.thread
        print(sum(thread.stats.cache_hits.values()), sum(thread.stats.cache_misses.values()))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    counts = []
    for which in ("serial", "parallel"):
        done = subprocess.run([sys.executable, "-c", script, which], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        counts.append(done.stdout.split()[-2:])
    assert counts == [["0", "1"], ["1", "0"]]  # compiled by the first, read from disk by the second


def test_rewrites_apply_where_they_match_and_are_skipped_elsewhere():
    """Constant tuple indexes and a static power exponent (rewritten in place), an array expression
    (numba's after-typing pass) and nothing to rewrite: same results as numba's own pipeline."""
    from numba import njit

    def static_parts(t, x):
        return t[1] * x ** 2 + t[0]

    def array_expression(a, b):
        return (a * 2.0 + b).sum()

    def plain(a):
        s = 0.0
        for i in range(a.size):
            s += a[i] * i
        return s

    a = np.arange(6.0)
    b = np.ones(6)
    for fn, args in ((static_parts, ((2, 5), 3)), (array_expression, (a, b)), (plain, (a,))):
        lean = njit(pipeline_class=pipeline.Lean, cache=False)(fn)
        assert lean(*args) == njit(cache=False)(fn)(*args) == fn(*args)
        (cres,) = lean.overloads.values()
        times = {name for t in cres.metadata["pipeline_times"].values() for name in t}
        assert any(p.endswith("opdsl_generic_rewrites") for p in times)
        assert not any(p.endswith(("_generic_rewrites", "_nopython_rewrites")) and "opdsl" not in p for p in times)


def test_which_rewrites_match_is_read_without_changing_the_function(monkeypatch):
    from numba import njit

    def static_index(t):
        return t[1]

    found = []
    original = pipeline.matching_rewrites

    def probe(kind, state):
        before = {k: [str(i) for i in b.body] for k, b in state.func_ir.blocks.items()}
        names = [c.__name__ for c in original(kind, state)]
        assert {k: [str(i) for i in b.body] for k, b in state.func_ir.blocks.items()} == before
        found.append((kind, names))
        return original(kind, state)

    monkeypatch.setattr(pipeline, "matching_rewrites", probe)
    assert njit(pipeline_class=pipeline.Lean, cache=False)(static_index)((4, 9)) == 9
    assert found == [("before-inference", ["RewriteConstGetitems"]), ("after-inference", [])]
    assert set(found[0][1]) <= set(pipeline.IN_PLACE)
