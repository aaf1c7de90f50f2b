"""The on-disk compile cache: atomic entries, locks, corruption, and numba across processes."""
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from backends import cache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(d))
    monkeypatch.delenv("OPDSL_NO_DISK_CACHE", raising=False)
    return d


# ----------------------------------------------------------------------------- the cache module

def test_store_load_roundtrip_and_layout(cache_dir):
    assert cache.cache_root() == cache_dir
    p = cache.store("opencl", "k1.bin", b"\x00binary\xff")
    assert p == cache_dir / "opencl" / "k1.bin"
    assert cache.load("opencl", "k1.bin") == b"\x00binary\xff"
    assert cache.load("opencl", "missing.bin") is None
    assert not [f for f in p.parent.iterdir() if f.name.endswith(".tmp")]  # no temp files left


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_blob_reads_as_missing_and_is_removed(cache_dir, damage):
    p = cache.store("opencl", "k.bin", b"x" * 1000)
    raw = p.read_bytes()
    p.write_bytes({"truncate": raw[:-10], "flip": raw[:-1] + b"y", "garbage": b"not a cache entry",
                   "empty": b""}[damage])
    assert cache.load("opencl", "k.bin") is None
    assert not p.exists()


def test_entry_names_must_be_plain(cache_dir):
    for bad in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="plain file name"):
            cache.path("numba", bad)
    with pytest.raises(ValueError, match="plain name"):
        cache.backend_dir("../up")


def test_info_and_clear(cache_dir):
    cache.store("numba", "a.bin", b"1" * 100)
    cache.store("opencl", "b.bin", b"2" * 50)
    with cache.lock("opencl", "b"):
        pass
    report = cache.info()
    assert report["numba"]["files"] == 1 and report["opencl"]["files"] == 1
    assert report["numba"]["bytes"] > 100
    assert "numba" in cache.format_info(report) and str(cache_dir) in cache.format_info(report)
    removed = cache.clear("opencl")
    assert removed["files"] == 1
    assert cache.load("opencl", "b.bin") is None and cache.load("numba", "a.bin") == b"1" * 100
    assert cache.clear()["files"] == 1
    assert cache.info() == {"numba": {"files": 0, "bytes": 0}, "opencl": {"files": 0, "bytes": 0}}


def test_lock_excludes_threads_and_processes(cache_dir, tmp_path):
    """Holders append 'enter'/'leave' pairs to one log; the lock must keep the pairs adjacent."""
    log = tmp_path / "log.txt"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from backends import cache
        for _ in range(3):
            with cache.lock("numba", "same-key"):
                with open({str(log)!r}, "a") as f:
                    f.write("enter\\n"); f.flush(); time.sleep(0.02); f.write("leave\\n")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]

    def local():
        for _ in range(3):
            with cache.lock("numba", "same-key"):
                with open(log, "a") as f:
                    f.write("enter\n")
                    f.flush()
                    threading.Event().wait(0.02)
                    f.write("leave\n")

    threads = [threading.Thread(target=local) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.wait(60) == 0 for p in procs)
    lines = log.read_text().split()
    assert len(lines) == 24
    assert lines == ["enter", "leave"] * 12


# ----------------------------------------------------------------------------- numba across processes

KERNELS = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def leaky_relu(x: In[f32], y: Out[f32], alpha: f32 = 0.01):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = v if v > 0 else alpha * v
'''

RUN = '''
import json, sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
import numpy as np
import backends.numba as nb
import kernels_for_cache as K

out = {{}}
for variant, n in (("serial", 100), ("parallel", 1 << 16)):
    x = np.linspace(-1, 1, n).astype(np.float32)
    y = np.zeros_like(x)
    K.leaky_relu(x, y, alpha=0.5, backend="numba")
    ok = bool((y == np.where(x > 0, x, np.float32(0.5) * x)).all())
    launcher = K.leaky_relu._variants[next(iter(K.leaky_relu._variants))]
    fn = launcher._serial if variant == "serial" else launcher._ready["launch_parallel"]
    out[variant] = dict(ok=ok, hits=sum(fn.stats.cache_hits.values()),
                        misses=sum(fn.stats.cache_misses.values()))
print("RESULT", json.dumps(out))
'''


def _run(tmp_path, cache_dir, env_extra=None, wait=True):
    (tmp_path / "kernels_for_cache.py").write_text(KERNELS)
    script = tmp_path / "run_cached.py"
    script.write_text(RUN.format(root=str(ROOT), here=str(tmp_path)))
    env = dict(os.environ, OPDSL_CACHE_DIR=str(cache_dir), **(env_extra or {}))
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    return _result(proc)


def _result(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_second_process_loads_machine_code_without_compiling(tmp_path, cache_dir):
    first = _run(tmp_path, cache_dir)
    assert first == {"serial": {"ok": True, "hits": 0, "misses": 1},
                     "parallel": {"ok": True, "hits": 0, "misses": 1}}
    files = list((cache_dir / "numba").glob("*.py"))
    assert len(files) == 1 and "def launch_serial(" in files[0].read_text()
    assert list((cache_dir / "numba" / "__pycache__").glob("*.nbi"))  # numba's index beside it
    second = _run(tmp_path, cache_dir)
    assert second == {"serial": {"ok": True, "hits": 1, "misses": 0},
                      "parallel": {"ok": True, "hits": 1, "misses": 0}}

    # a damaged module file is noticed, rewritten and compiled again
    files[0].write_text(files[0].read_text()[:200] + "\n)garbage(")
    third = _run(tmp_path, cache_dir)
    assert third["serial"] == {"ok": True, "hits": 0, "misses": 1}
    assert "def launch_serial(" in files[0].read_text()

    # damaged numba index and data files: ignored and rebuilt
    for f in (cache_dir / "numba" / "__pycache__").iterdir():
        if f.suffix in (".nbi", ".nbc"):
            f.write_bytes(b"\x80corrupt")
    fourth = _run(tmp_path, cache_dir)
    assert fourth["serial"]["ok"] and fourth["parallel"]["ok"]
    assert _run(tmp_path, cache_dir)["serial"] == {"ok": True, "hits": 1, "misses": 0}


def test_two_processes_compiling_the_same_kernel_compile_it_once(tmp_path, cache_dir):
    procs = [_run(tmp_path, cache_dir, wait=False) for _ in range(2)]
    results = [_result(p) for p in procs]
    assert all(r[v]["ok"] for r in results for v in r)
    assert sorted(r["serial"]["misses"] for r in results) == [0, 1]  # the lock made one wait


def test_no_disk_cache_keeps_everything_in_memory(tmp_path, cache_dir):
    result = _run(tmp_path, cache_dir, {"OPDSL_NO_DISK_CACHE": "1"})
    assert result["serial"]["ok"] and result["parallel"]["ok"]
    assert not (cache_dir / "numba").exists() or not list((cache_dir / "numba").glob("*.py"))
