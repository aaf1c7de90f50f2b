"""A warm launcher executes its generated module on first need (backends/numba/deferred_module.py,
``NumbaLauncher._module_ready``): binding a launch creates no numba dispatcher, the first launch
gives the same outputs, and a launch still checks its arguments as before.  A model loaded from
an artifact in a fresh process: tests/opgraph/test_artifact_lazy.py."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import dsl
from backends import warm_start
from backends.numba import backend as nb
from backends.numba import deferred_module

KERNELS = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def shifted(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 3.0 - {offset}
'''


def _load(folder: Path, name: str, offset: str):
    path = folder / f"{name}.py"  # a file per module: two versions never share a path (linecache)
    path.write_text(KERNELS.format(offset=offset))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _warm(kernel, monkeypatch):
    """The same function as a new kernel object, in a process that has executed no generated
    module yet (as a fresh one that finds the front-end record on disk)."""
    monkeypatch.setattr(nb, "_modules", {})
    return dsl.kernel(kernel.fn, threads=kernel.threads)


def test_a_warm_launcher_executes_its_module_on_first_launch(cache_dir, tmp_path, monkeypatch):
    mod = _load(tmp_path, "deferred_a", "0.5")
    x = np.linspace(-1, 1, 50).astype(np.float32)
    y = np.empty_like(x)
    mod.shifted(x, y)
    np.testing.assert_allclose(y, x * 3 - 0.5, rtol=1e-6, atol=1e-6)
    k = _warm(mod.shifted, monkeypatch)
    hits = warm_start.hits
    y2 = np.zeros_like(x)
    launcher, values, grid = k.prepare((x, y2), {}, backend="numba")  # what a model's plan binds
    assert warm_start.hits == hits + 1
    assert isinstance(launcher, nb.NumbaLauncher) and launcher._module is None  # nothing executed yet
    launcher(launcher.freeze(values), grid)
    assert launcher._module is not None
    np.testing.assert_array_equal(y2, y)


def test_a_deferred_launch_checks_its_arguments_as_before(cache_dir, tmp_path, monkeypatch):
    mod = _load(tmp_path, "deferred_b", "0.25")
    x = np.linspace(-1, 1, 40).astype(np.float32)
    mod.shifted(x, np.empty_like(x))
    bad = np.empty(40, np.float64)
    with pytest.raises(Exception) as cold:
        mod.shifted(x, bad)
    k = _warm(mod.shifted, monkeypatch)
    with pytest.raises(type(cold.value)) as warm:
        k(x, bad)
    assert str(warm.value) == str(cold.value) and "y" in str(warm.value)
    y = np.empty_like(x)
    k(x, y)
    np.testing.assert_allclose(y, x * 3 - 0.25, rtol=1e-6, atol=1e-6)


def test_entry_lines_and_indexes_are_the_ones_numba_uses(cache_dir, tmp_path):
    mod = _load(tmp_path, "deferred_c", "1.0")
    x = np.linspace(-1, 1, 30).astype(np.float32)
    mod.shifted(x, np.empty_like(x))  # a small launch: launch_serial compiled and saved
    (launcher,) = [v for (b, _), v in mod.shifted._variants.items() if b == "numba"]
    module, source, stem = launcher._module, launcher._source, launcher._stem
    names = deferred_module.entry_names(source)
    assert set(names) == {n for n in ("launch_parallel", "launch_serial_nd", "launch_parallel_nd", "launch_team")
                          if hasattr(module, n)}
    for which in ("launch_serial", *names, "thread"):
        assert deferred_module.first_line(source, which) == getattr(module, which).py_func.__code__.co_firstlineno
    assert deferred_module.first_line(source, "no_such_entry") is None
    assert deferred_module.on_disk(stem, source, "launch_serial")
    assert not deferred_module.on_disk(stem, source, "launch_parallel_nd")  # never compiled
