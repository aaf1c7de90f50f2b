"""Hostile entries inside a private compile cache, each case in its own process: entries swapped
between keys, FIFOs and over-large files where a cache file should be, autotune records nested
too deep to parse.  Each must be a miss with one warning and the right answer, never the other
key's code, a hang or a traceback on every later launch."""
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.adversarial.isolated import run

KERNELS = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def twice(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 2.0

@dsl.kernel
def thrice(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 3.0

@dsl.kernel
def scale_by(x: In[f32], y: Out[f32], C: dsl.const[int]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * C

@dsl.autotune(configs=[{"C": 2}, {"C": 2}], key=["x.size"])
@dsl.kernel
def tuned(x: In[f32], y: Out[f32], C: dsl.const[int]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * C
'''

# Runs the kernels on one backend and prints one line per check plus each warning's class.
CHECK = '''
import sys, warnings
warnings.simplefilter("always")
sys.path.insert(0, {here!r})
import numpy as np
import entry_kernels as K
from backends import base
backend = {backend!r}
if backend == "opencl" and base.get("opencl").available():
    print("opencl: no device"); raise SystemExit(0)
x = np.arange(64, dtype=np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name, launch, factor in [("twice", lambda y: K.twice(x, y, backend=backend), 2),
                                 ("thrice", lambda y: K.thrice(x, y, backend=backend), 3),
                                 ("C2", lambda y: K.scale_by(x, y, C=2, backend=backend), 2),
                                 ("C3", lambda y: K.scale_by(x, y, C=3, backend=backend), 3),
                                 ("tuned", lambda y: K.tuned(x, y, backend=backend), 2)][:{count}]:
        y = np.zeros_like(x)
        launch(y)
        print(name, "ok" if (y == factor * x).all() else "WRONG")
for w in caught:
    print("WARNING", w.category.__name__, str(w.message).splitlines()[0])
'''

ENV_OPENCL = {"OPDSL_OPENCL_DEVICE": os.environ.get("OPDSL_OPENCL_DEVICE", "Oclgrind")}


def _run(tmp_path, cache, backend="numba", count=5, timeout=300):
    (tmp_path / "entry_kernels.py").write_text(KERNELS)
    env = {"OPDSL_CACHE_DIR": str(cache), "OPDSL_NO_DISK_CACHE": None, "OPDSL_COMPILE_WORKERS": "0",
           **(ENV_OPENCL if backend == "opencl" else {})}
    out = run(CHECK.format(here=str(tmp_path), backend=backend, count=count), env=env, timeout=timeout)
    if "opencl: no device" in out.stdout:
        pytest.skip("no usable OpenCL device")
    assert "WRONG" not in out.stdout, out.describe()
    return out


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A folder whose numba cache holds every kernel of KERNELS, compiled once for the module: each
    numba case starts from a copy (``_warm_cache``), so only the first pays the cold compiles."""
    here = tmp_path_factory.mktemp("entries")
    _run(here, here / "cache")
    return here


def _warm_cache(warm: Path) -> Path:
    """A fresh copy of the warm cache beside the module's kernels (the same source file, so its
    entries are hits)."""
    cache = warm / f"cache-{len(list(warm.glob('cache-*')))}"
    shutil.copytree(warm / "cache", cache, symlinks=True)
    return cache


def _warnings(out, category="CacheEntryWarning"):
    return [ln for ln in out.stdout.splitlines() if ln.startswith(f"WARNING {category}")]


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_name(a.name + ".swap")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)


def _data_files(folder: Path, kernel: str) -> dict:
    """{entry point: data file} of the generated module whose source names ``kernel``."""
    (stem,) = [p.stem for p in folder.glob("*.py") if kernel in p.read_text()]
    found = {p.name[len(stem):]: p for p in folder.glob(stem + ".*.nbc")}
    assert found, sorted(p.name for p in folder.iterdir())
    return found


def test_swapped_numba_data_files_are_a_miss_with_one_warning(warm):
    cache = _warm_cache(warm)
    a, b = _data_files(cache / "numba", "twice"), _data_files(cache / "numba", "thrice")
    assert a.keys() == b.keys()
    for entry in a:  # the indexes still name these files: numba alone would load thrice's code for twice
        _swap(a[entry], b[entry])
    out = _run(warm, cache, count=2)
    assert "twice ok" in out.stdout and "thrice ok" in out.stdout
    swapped = [w for w in _warnings(out) if "another key" in w]
    assert swapped and len(swapped) == len(set(swapped)), out.describe()  # at most one per entry
    out = _run(warm, cache, count=2)  # the rebuilt entries are good again
    assert not _warnings(out), out.describe()


def test_swapped_opencl_binaries_of_two_const_specializations_never_run_each_other(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path, cache, backend="opencl", count=4)
    bins = sorted((cache / "opencl").glob("*.bin"), key=lambda p: p.stat().st_mtime_ns)
    assert len(bins) >= 4, sorted(p.name for p in (cache / "opencl").iterdir())
    # twice, thrice, C2, C3 were built in that order: swap the C=2 and C=3 binaries
    _swap(bins[-2], bins[-1])
    out = _run(tmp_path, cache, backend="opencl", count=4)
    assert "C2 ok" in out.stdout and "C3 ok" in out.stdout
    assert len([w for w in _warnings(out) if "another key" in w]) == 2, out.describe()


def _fifo_in_place_of(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifos_in_place_of_numba_index_and_data_files_do_not_hang(warm):
    cache = _warm_cache(warm)
    for data in _data_files(cache / "numba", "twice").values():  # twice: its machine code files
        _fifo_in_place_of(data)
    for data in _data_files(cache / "numba", "thrice").values():
        _fifo_in_place_of(Path(str(data)[:-len(".1.nbc")] + ".nbi"))  # thrice: its indexes
    out = _run(warm, cache, count=2, timeout=240)
    fifos = [w for w in _warnings(out) if "FIFO" in w]
    assert fifos and len(fifos) == len(set(fifos)), out.describe()  # one warning per file


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_the_opencl_probe_record_does_not_hang(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path, cache, backend="opencl", count=1)
    records = list((cache / "opencl-probe").iterdir())
    assert records
    for r in records:
        _fifo_in_place_of(r)
    out = _run(tmp_path, cache, backend="opencl", count=1, timeout=240)
    # the device is probed before the launches whose warnings CHECK prints: this one is on stderr
    assert "twice ok" in out.stdout and out.stderr.count("CacheEntryWarning") == len(records), out.describe()
    assert "FIFO" in out.stderr


def _autotune_records(cache: Path):
    return sorted((cache / "numba").glob("autotune-*.json"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_an_autotune_record_does_not_hang(warm):
    cache = _warm_cache(warm)
    (record,) = _autotune_records(cache)
    _fifo_in_place_of(record)
    out = _run(warm, cache, timeout=240)
    assert "tuned ok" in out.stdout and len([w for w in _warnings(out) if "FIFO" in w]) == 1, out.describe()


def test_a_deeply_nested_autotune_record_is_a_miss_with_one_warning(warm):
    cache = _warm_cache(warm)
    (record,) = _autotune_records(cache)
    digest = json.loads(record.read_text())["id"]
    record.write_text('{"id": "%s", "best": 0, "deep": %s%s}' % (digest, "[" * 100000, "]" * 100000))
    out = _run(warm, cache)
    assert "tuned ok" in out.stdout and "RecursionError" in out.stdout, out.describe()
    assert len(_warnings(out, "TuningCacheWarning")) == 1, out.describe()
    out = _run(warm, cache)  # the winner was timed again and the record rewritten
    assert not _warnings(out, "TuningCacheWarning"), out.describe()


def test_an_oversized_cache_entry_is_a_miss_with_one_warning(warm):
    cache = _warm_cache(warm)
    (record,) = _autotune_records(cache)
    with open(record, "ab") as f:
        f.truncate(3 << 20)  # a sparse 3 MiB record: larger than any record opdsl writes
    out = _run(warm, cache)
    assert "tuned ok" in out.stdout and len([w for w in _warnings(out) if "more than" in w]) == 1, out.describe()
