"""The on-disk compile cache: private folders, atomic entries, locks, corruption, safe clearing,
the memory fallback, and numba's machine code across processes."""
import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest

from backends import cache
from dsl import config

ROOT = Path(__file__).resolve().parents[2]


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _unusable(match: str):
    """enabled() is False with one CacheWarning naming the root, the reason and the fallback."""
    with pytest.warns(cache.CacheWarning) as record:
        assert not cache.enabled()
        assert not cache.enabled()  # decided once: no second warning
    assert len(record) == 1
    text = str(record[0].message)
    assert str(cache.cache_root()) in text and "memory" in text
    assert match in text, text
    return text


# ----------------------------------------------------------------------------- the cache module

def test_store_load_roundtrip_layout_and_marker(cache_dir):
    assert cache.cache_root() == cache_dir
    p = cache.store("opencl", "k1.bin", b"\x00binary\xff")
    assert p == cache_dir / "opencl" / "k1.bin"
    assert cache.load("opencl", "k1.bin") == b"\x00binary\xff"
    assert cache.load("opencl", "missing.bin") is None
    assert not [f for f in p.parent.iterdir() if f.name.endswith(".tmp")]  # no temp files left
    assert cache.has_marker() and "opdsl cache clear" in (cache_dir / cache.MARKER).read_text()


def test_new_folders_are_0700_and_files_0600_whatever_the_umask(cache_dir):
    old = os.umask(0)
    try:
        nested = cache_dir / "a" / "b"
        os.environ["OPDSL_CACHE_DIR"] = str(nested)
        cache.reset()
        p = cache.store("numba", "x.bin", b"1")
        with cache.lock("numba", "x"):
            pass
    finally:
        os.umask(old)
    for d in (cache_dir, cache_dir / "a", nested, nested / "numba"):
        assert _mode(d) == 0o700, d
    for f in (p, nested / "numba" / "x.lock", nested / cache.MARKER):
        assert _mode(f) == 0o600, f


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_blob_reads_as_missing_and_is_removed(cache_dir, damage):
    p = cache.store("opencl", "k.bin", b"x" * 1000)
    raw = p.read_bytes()
    p.write_bytes({"truncate": raw[:-10], "flip": raw[:-1] + b"y", "garbage": b"not a cache entry",
                   "empty": b""}[damage])
    assert cache.load("opencl", "k.bin") is None
    assert not p.exists()


def test_entry_and_folder_names_must_be_known_and_plain(cache_dir):
    for bad in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="plain file name"):
            cache.path("numba", bad)
    for bad in ("../up", "mine", ".ssh"):
        with pytest.raises(ValueError, match="must be one of numba, numba-frontend, opencl, opencl-probe"):
            cache.backend_dir(bad)


def test_info_and_clear(cache_dir):
    cache.store("numba", "a.bin", b"1" * 100)
    cache.store("opencl", "b.bin", b"2" * 50)
    cache.store("opencl-probe", "c.json", b"3")
    with cache.lock("opencl", "b"):
        pass
    report = cache.info()
    assert report["numba"]["files"] == 1 and report["opencl"]["files"] == 1
    assert report["numba"]["bytes"] > 100
    assert "numba" in cache.format_info(report) and str(cache_dir) in cache.format_info(report)
    removed = cache.clear("opencl")  # the backend's folders: binaries and probe results
    assert removed["files"] == 2 and removed["skipped"] == []
    assert cache.load("opencl", "b.bin") is None and cache.load("numba", "a.bin") == b"1" * 100
    assert (cache_dir / "opencl" / "b.lock").exists()  # lock files stay: another process may hold one
    assert cache.clear()["files"] == 1
    assert all(r["files"] == 0 for r in cache.info().values())
    with pytest.raises(ValueError, match="accepted: numba, opencl"):
        cache.clear("opencl-probe")


def test_clear_refuses_a_folder_opdsl_did_not_create(tmp_path, monkeypatch):
    home = tmp_path / "home"
    for rel in (".ssh/id_ed25519", "Documents/thesis.tex", "projects/x.py", "numba/setup.py"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("precious")
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(home))
    cache.reset()
    try:
        before = sorted(p for p in home.rglob("*"))
        with pytest.raises(cache.NotACache, match=r"has no \.opdsl-cache file.*Nothing was deleted") as e:
            cache.clear()
        assert str(home) in str(e.value)
        assert cache.enabled()  # it may still serve as a cache (it is private) ...
        cache.store("numba", "k.bin", b"1")
        with pytest.raises(cache.NotACache):  # ... but opdsl never adopts a folder with other things in it
            cache.clear()
        assert set(before) <= set(home.rglob("*"))
        assert all((home / rel).read_text() == "precious"
                   for rel in (".ssh/id_ed25519", "Documents/thesis.tex", "projects/x.py", "numba/setup.py"))
        assert "clear` refuses" in cache.format_info()
    finally:
        cache.reset()


def test_clear_deletes_only_opdsls_folders_and_skips_symlinked_ones(cache_dir, tmp_path):
    cache.store("numba", "a.bin", b"1")
    (cache_dir / "notes.txt").write_text("mine")
    (cache_dir / "mine").mkdir()
    (cache_dir / "mine" / "f").write_text("mine")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    (cache_dir / "opencl").symlink_to(victim)
    removed = cache.clear()
    assert removed["files"] == 1 and removed["skipped"] == [str(cache_dir / "opencl")]
    assert (cache_dir / "notes.txt").read_text() == "mine" and (cache_dir / "mine" / "f").exists()
    assert (victim / "keep").read_text() == "keep"


def test_an_old_default_cache_is_adopted_but_not_a_custom_one(tmp_path, monkeypatch):
    legacy = tmp_path / "home-cache" / "opdsl"
    (legacy / "numba").mkdir(parents=True)
    (legacy / "numba" / "old.py").write_text("x = 1\n")
    monkeypatch.setattr(config, "default_cache_dir", lambda: legacy)
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(legacy))
    cache.reset()
    try:
        assert cache.enabled() and cache.has_marker()
        assert cache.clear()["files"] == 1
        other = tmp_path / "custom"
        (other / "numba").mkdir(parents=True)
        monkeypatch.setenv("OPDSL_CACHE_DIR", str(other))
        assert cache.enabled() and not cache.has_marker()
        empty = tmp_path / "empty"
        empty.mkdir()
        monkeypatch.setenv("OPDSL_CACHE_DIR", str(empty))
        assert cache.enabled() and cache.has_marker()  # an empty folder holds nothing to destroy
    finally:
        cache.reset()


# ----------------------------------------------------------------------------- unusable roots

def _plant_valid_entry(root: Path) -> None:
    (root / "opencl").mkdir(parents=True, exist_ok=True)
    (root / "opencl" / "k.bin").write_bytes(cache.frame("opencl/k.bin", b"planted"))


@pytest.mark.parametrize("mode,who", [(0o777, "its group and other users"), (0o770, "its group"), (0o702, "other users (mode 0702)")])
def test_a_root_others_can_write_is_never_read(cache_dir, mode, who):
    _plant_valid_entry(cache_dir)
    os.chmod(cache_dir, mode)
    _unusable(f"writable by {who}")
    assert cache.load("opencl", "k.bin") is None  # a valid entry is there, but not read
    assert cache.store("opencl", "k2.bin", b"1") is None and not (cache_dir / "opencl" / "k2.bin").exists()
    with cache.lock("opencl", "k"):  # threads are still serialized, no file is made
        pass
    assert not (cache_dir / "opencl" / "k.lock").exists()
    with pytest.raises(cache.CacheUnusable):
        cache.path("opencl", "k.bin")


def test_a_root_owned_by_someone_else_is_never_read(cache_dir, monkeypatch):
    _plant_valid_entry(cache_dir)
    os.chmod(cache_dir, 0o700)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(cache_dir).st_uid + 1)
    _unusable("is owned by uid")
    assert cache.load("opencl", "k.bin") is None


def test_a_world_writable_parent_without_sticky_bit_is_refused(tmp_path, monkeypatch):
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(parent / "cache"))
    cache.reset()
    try:
        _unusable("not sticky")
    finally:
        cache.reset()
    os.chmod(parent, 0o1777)  # like /tmp: others cannot rename what is ours
    cache.reset()
    try:
        assert cache.enabled()
    finally:
        cache.reset()


def test_a_root_that_is_a_file_or_too_long_is_unusable(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("not a folder")
    for root, match in ((f, "not a directory"), (f / "sub", "Not a directory"),
                        (tmp_path / ("x" * 300), "File name too long")):
        monkeypatch.setenv("OPDSL_CACHE_DIR", str(root))
        cache.reset()
        try:
            _unusable(match)
            assert cache.store("numba", "a.bin", b"1") is None and cache.load("numba", "a.bin") is None
        finally:
            cache.reset()
    assert f.read_text() == "not a folder"


def test_a_read_only_root_is_unusable(cache_dir, monkeypatch):
    cache_dir.mkdir()
    real_open = os.open

    def read_only(p, flags, *a, **k):  # what a read-only mount answers, even to root
        if str(p).startswith(str(cache_dir)) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(p))
        return real_open(p, flags, *a, **k)
    monkeypatch.setattr(os, "open", read_only)
    _unusable("Read-only file system")


def test_a_symlinked_backend_folder_is_refused_and_not_written(cache_dir, tmp_path):
    cache.store("numba", "a.bin", b"1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache_dir / "opencl").symlink_to(elsewhere)
    with pytest.warns(cache.CacheWarning, match="is a symlink"):
        assert cache.store("opencl", "k.bin", b"1") is None
    assert list(elsewhere.iterdir()) == [] and not cache.enabled()


def test_symlinked_entries_and_lock_files_are_not_followed(cache_dir, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"do not read or touch")
    d = cache.backend_dir("opencl")
    (d / "k.bin").symlink_to(secret)
    (d / "k.lock").symlink_to(secret)
    assert cache.load("opencl", "k.bin") is None
    with cache.lock("opencl", "k"):  # works (threads serialized), the link is not opened
        pass
    missing = tmp_path / "created-through-link"
    (d / "m.lock").symlink_to(missing)
    with cache.lock("opencl", "m"):
        pass
    assert not missing.exists()
    assert cache.store("opencl", "k.bin", b"new") is not None  # replaces the link itself
    assert secret.read_bytes() == b"do not read or touch"
    assert cache.load("opencl", "k.bin") == b"new" and not (d / "k.bin").is_symlink()
    assert cache.enabled()


def test_an_entry_owned_by_someone_else_is_not_read(cache_dir, monkeypatch):
    cache.store("opencl", "k.bin", b"1")
    uid = os.geteuid()
    real_fstat = os.fstat

    def foreign(fd):
        st = real_fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid + 1) + tuple(st)[5:])
        return st
    monkeypatch.setattr(os, "fstat", foreign)
    assert cache.load("opencl", "k.bin") is None


@pytest.mark.parametrize("fail", ["write", "replace"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_warns_once_leaves_no_partial_file_and_goes_to_memory(cache_dir, monkeypatch, fail, code):
    cache.store("opencl", "before.bin", b"1")

    def full(*a, **k):
        raise OSError(code, os.strerror(code))
    with monkeypatch.context() as m, pytest.warns(cache.CacheWarning, match=os.strerror(code)) as record:
        m.setattr(os, fail, full)
        assert cache.store("opencl", "k.bin", b"x" * 100000) is None
        assert cache.store("opencl", "k3.bin", b"x") is None
    assert len(record) == 1 and "compiled code stays in memory" in str(record[0].message)
    assert sorted(p.name for p in (cache_dir / "opencl").iterdir()) == ["before.bin"]
    assert not cache.enabled() and cache.load("opencl", "before.bin") is None


def test_a_relative_cache_dir_is_resolved_once(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    monkeypatch.setenv("OPDSL_CACHE_DIR", "rel-cache")
    cache.reset()
    try:
        assert cache.cache_root() == tmp_path / "a" / "rel-cache"
        cache.store("numba", "k.bin", b"1")
        monkeypatch.chdir(tmp_path / "b")
        assert cache.cache_root() == tmp_path / "a" / "rel-cache"
        assert cache.load("numba", "k.bin") == b"1"
        assert not (tmp_path / "b" / "rel-cache").exists()
    finally:
        cache.reset()


def test_no_disk_cache_env(cache_dir, monkeypatch):
    monkeypatch.setenv("OPDSL_NO_DISK_CACHE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not cache.enabled() and cache.store("numba", "a.bin", b"1") is None
    assert not cache_dir.exists()


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
    cache.backend_dir("numba")  # the root exists (and is checked) before the children start
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
import json, sys, warnings
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
import numpy as np
import backends.numba.backend as nb
import kernels_for_cache as K

out = {{}}
for variant, n in (("serial", 100), ("parallel", 1 << 16)):
    x = np.linspace(-1, 1, n).astype(np.float32)
    y = np.zeros_like(x)
    for _ in range(2 if variant == "parallel" else 1):  # a light kernel's first big launch runs serially
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
    result = json.loads(line[len("RESULT "):])
    result["stderr"] = err
    return result


def _counts(result):
    return {k: v for k, v in result.items() if k != "stderr"}


def test_second_process_loads_machine_code_without_compiling(tmp_path, cache_dir):
    numba_elsewhere = tmp_path / "numba-cache-dir"
    env = {"NUMBA_CACHE_DIR": str(numba_elsewhere)}  # numba's own setting must not move our pickles
    first = _run(tmp_path, cache_dir, env)
    assert _counts(first) == {"serial": {"ok": True, "hits": 0, "misses": 1},
                              "parallel": {"ok": True, "hits": 0, "misses": 1}}
    files = list((cache_dir / "numba").glob("*.py"))
    assert len(files) == 1 and "def launch_serial(" in files[0].read_text()
    pickles = [f for f in (cache_dir / "numba").iterdir() if f.suffix in (".nbi", ".nbc")]
    assert pickles and all(_mode(f) == 0o600 for f in pickles)
    assert not numba_elsewhere.exists() and not (cache_dir / "numba" / "__pycache__").exists()
    second = _run(tmp_path, cache_dir, env)
    assert _counts(second) == {"serial": {"ok": True, "hits": 1, "misses": 0},
                               "parallel": {"ok": True, "hits": 1, "misses": 0}}

    # the readable copy is never executed: code injected into it does not run, and it is rewritten
    sentinel = tmp_path / "injected-ran"
    files[0].write_text(f"open({str(sentinel)!r}, 'w').close()\n" + files[0].read_text())
    third = _run(tmp_path, cache_dir)
    assert not sentinel.exists()
    assert third["serial"] == {"ok": True, "hits": 1, "misses": 0}
    assert not files[0].read_text().startswith("open(")

    # damaged numba index and data files: read as missing, compiled again and rewritten
    for f in pickles:
        f.write_bytes(b"\x80corrupt")
    fourth = _run(tmp_path, cache_dir)
    assert fourth["serial"] == {"ok": True, "hits": 0, "misses": 1} and fourth["parallel"]["ok"]
    assert _run(tmp_path, cache_dir)["serial"] == {"ok": True, "hits": 1, "misses": 0}


def test_two_processes_compiling_the_same_kernel_compile_it_once(tmp_path, cache_dir):
    procs = [_run(tmp_path, cache_dir, wait=False) for _ in range(2)]
    results = [_result(p) for p in procs]
    assert all(r[v]["ok"] for r in results for v in ("serial", "parallel"))
    assert sorted(r["serial"]["misses"] for r in results) == [0, 1]  # the lock made one wait


def test_no_disk_cache_keeps_everything_in_memory(tmp_path, cache_dir):
    result = _run(tmp_path, cache_dir, {"OPDSL_NO_DISK_CACHE": "1"})
    assert result["serial"]["ok"] and result["parallel"]["ok"]
    assert not cache_dir.exists()


def test_numba_compiles_in_memory_when_the_root_is_world_writable(tmp_path, cache_dir):
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o777)
    result = _run(tmp_path, cache_dir)
    assert _counts(result) == {"serial": {"ok": True, "hits": 0, "misses": 1},
                               "parallel": {"ok": True, "hits": 0, "misses": 1}}
    assert result["stderr"].count("CacheWarning") == 1 and "writable by" in result["stderr"]
    assert list(cache_dir.iterdir()) == []
