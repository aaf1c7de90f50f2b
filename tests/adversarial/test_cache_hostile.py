"""Hostile compile caches, each case in its own process: planted pickles, foreign owners, a home
folder given as the cache, full and read-only disks, files and over-long paths where a folder should
be.  Every case checks the kernels still give numpy's answer (compiled in memory) and that nothing
outside opdsl's own files was read, run or touched."""
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.adversarial.isolated import ROOT, run

KERNELS = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def twice(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 2.0
'''

# Runs twice() on numba (and on OpenCL when a device is usable) and prints one line per backend.
CHECK = '''
import sys, warnings
warnings.simplefilter("always")
sys.path.insert(0, {here!r})
import numpy as np
import hostile_kernels as K
from backends import base
x = np.arange(64, dtype=np.float32)
for backend in {backends!r}:
    if backend == "opencl" and base.get("opencl").available():
        print("opencl: no device")
        continue
    y = np.zeros_like(x)
    K.twice(x, y, backend=backend)
    print(backend, "ok" if (y == 2 * x).all() else "WRONG")
'''


def _check(tmp_path, cache, backends=("numba",), cwd=None, expect_ok=True, extra_env=None):
    (tmp_path / "hostile_kernels.py").write_text(KERNELS)
    env = {"OPDSL_CACHE_DIR": str(cache), "OPDSL_NO_DISK_CACHE": None, **(extra_env or {})}
    out = run(CHECK.format(here=str(tmp_path), backends=tuple(backends)), env=env, cwd=cwd, expect_ok=expect_ok,
              timeout=300)
    for b in backends:
        assert f"{b} ok" in out.stdout or (b == "opencl" and "opencl: no device" in out.stdout), out.describe()
    return out


def _opencl_env():
    """Small OpenCL runs go to Oclgrind unless the caller chose a device."""
    return {"OPDSL_OPENCL_DEVICE": os.environ.get("OPDSL_OPENCL_DEVICE", "Oclgrind")}


class _Planted:
    """A pickle that creates ``sentinel`` when it is unpickled: proof that a file was loaded."""

    def __init__(self, sentinel: Path):
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return (open, (self.sentinel, "w"))


def _plant(folder: Path, sentinel: Path) -> int:
    """Replace every numba index/data file in ``folder`` by a booby-trapped pickle."""
    planted = 0
    for f in folder.iterdir():
        if f.suffix in (".nbi", ".nbc"):
            f.write_bytes(pickle.dumps(_Planted(sentinel)))
            planted += 1
    return planted


def test_planted_numba_pickles_in_a_world_writable_cache_are_never_loaded(tmp_path):
    cache, sentinel = tmp_path / "cache", tmp_path / "attacker-code-ran"
    _check(tmp_path, cache)
    assert _plant(cache / "numba", sentinel) >= 2
    os.chmod(cache, 0o777)  # anyone could have replaced the pickles
    out = _check(tmp_path, cache)
    assert not sentinel.exists()
    assert out.stderr.count("CacheWarning") == 1 and "writable by" in out.stderr and "memory" in out.stderr
    os.chmod(cache, 0o700)  # control: the same planted files in a private folder are what numba loads
    _check(tmp_path, cache, expect_ok=False)
    assert sentinel.exists(), "the planted pickles were never read: this test proves nothing"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_a_cache_owned_by_another_user_is_never_loaded(tmp_path):
    cache, sentinel = tmp_path / "cache", tmp_path / "attacker-code-ran"
    _check(tmp_path, cache)
    _plant(cache / "numba", sentinel)
    for p in [cache, *cache.rglob("*")]:
        os.chown(p, 12345, 12345, follow_symlinks=False)
    out = _check(tmp_path, cache)
    assert not sentinel.exists() and "owned by uid 12345" in out.stderr
    os.chown(cache, 0, 0)  # our folder, but the pickles inside still belong to someone else
    out = _check(tmp_path, cache)
    assert not sentinel.exists()


def test_cache_clear_on_a_home_folder_deletes_nothing(tmp_path):
    home = tmp_path / "home"
    files = {".ssh/id_ed25519": "key", "Documents/cv.pdf": "cv", "projects/app/main.py": "code",
             "numba/README": "a user's own folder that happens to share a name", ".bashrc": "rc"}
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    out = run("import sys\nfrom dsl.cli import main as cli\nsys.exit(cli.main(['cache', 'clear']))",
              env={"OPDSL_CACHE_DIR": str(home)}, expect_ok=False)
    assert out.returncode == 2, out.describe()  # a user error (docs: every CLI user error exits 2)
    assert str(home) in out.stderr and ".opdsl-cache" in out.stderr and "Nothing was deleted" in out.stderr
    assert {str(p.relative_to(home)): p.read_text() for p in home.rglob("*") if p.is_file()} == files


def test_cache_clear_leaves_symlinked_folders_and_foreign_files_alone(tmp_path):
    cache, victim = tmp_path / "cache", tmp_path / "victim"
    _check(tmp_path, cache)
    victim.mkdir()
    (victim / "important").write_text("keep")
    (cache / "opencl-probe").symlink_to(victim)
    (cache / "my-notes.txt").write_text("keep")
    out = run("import sys\nfrom dsl.cli import main as cli\nsys.exit(cli.main(['cache', 'clear']))",
              env={"OPDSL_CACHE_DIR": str(cache)})
    assert "left alone" in out.stderr and str(cache / "opencl-probe") in out.stderr
    assert (victim / "important").read_text() == "keep" and (cache / "my-notes.txt").read_text() == "keep"
    assert not [f for f in (cache / "numba").iterdir() if not f.name.endswith(".lock")]


@pytest.mark.parametrize("make", ["file", "under-a-file", "too-long", "symlinked-backend-folder"])
def test_unusable_roots_compile_in_memory_on_every_backend(tmp_path, make):
    cache = tmp_path / "cache"
    victim = tmp_path / "victim"
    victim.mkdir()
    if make == "file":
        cache.write_text("a file, not a folder")
    elif make == "under-a-file":
        (tmp_path / "f").write_text("x")
        cache = tmp_path / "f" / "cache"
    elif make == "too-long":
        cache = tmp_path / ("d" * 250) / ("e" * 250) / ("f" * 250) / ("g" * 300)
    else:
        cache.mkdir(mode=0o700)
        for name in ("numba", "opencl", "opencl-probe"):
            (cache / name).symlink_to(victim)
    out = _check(tmp_path, cache, backends=("numba", "opencl"), extra_env=_opencl_env())
    assert out.stderr.count("CacheWarning") == 1 and "compiled code stays in memory" in out.stderr, out.describe()
    assert list(victim.iterdir()) == []
    if make == "file":
        assert cache.read_text() == "a file, not a folder"


def test_a_relative_cache_dir_stays_where_it_was_first_used(tmp_path):
    (tmp_path / "hostile_kernels.py").write_text(KERNELS)
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    code = f'''
import os, sys
sys.path.insert(0, {str(tmp_path)!r})
import numpy as np
import hostile_kernels as K
from backends import cache
x = np.arange(8, dtype=np.float32); y = np.zeros_like(x)
K.twice(x, y, backend="numba")
os.chdir({str(tmp_path / "second")!r})
print("root", cache.cache_root())
print("stored", cache.store("opencl", "k.bin", b"1"))
'''
    out = run(code, env={"OPDSL_CACHE_DIR": "rel-cache"}, cwd=tmp_path / "first")
    assert f"root {tmp_path / 'first' / 'rel-cache'}" in out.stdout
    assert (tmp_path / "first" / "rel-cache" / "opencl" / "k.bin").exists()
    assert list((tmp_path / "first" / "rel-cache" / "numba").glob("*.nbi"))
    assert not (tmp_path / "second" / "rel-cache").exists()


# ----------------------------------------------------------------------------- real small and read-only disks

def _in_private_mount(tmp_path, mount_opts: str, remount_ro: bool, backends=("numba",)):
    """Run CHECK with the cache on a fresh tmpfs inside a private mount namespace (gone at exit);
    skip where unprivileged namespaces or tmpfs mounts are not allowed."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no unprivileged mount namespace here (unshare -rm)")
    (tmp_path / "hostile_kernels.py").write_text(KERNELS)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cache = mnt / "cache"
    check = CHECK.format(here=str(tmp_path), backends=tuple(backends)) + textwrap.dedent(f'''
        import os
        for d, _, names in os.walk({str(mnt)!r}):
            for n in names:
                print("left", os.path.join(d, n))
    ''')
    setup = f"mount -t tmpfs -o {mount_opts} tmpfs {mnt}" + (
        f" && mkdir -m 700 {cache} && mount -o remount,ro {mnt}" if remount_ro else "")
    script = f'{setup} || exit 77\nexec "$0" -c "$1"'
    env = dict(os.environ, OPDSL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **_opencl_env())
    env.pop("OPDSL_NO_DISK_CACHE", None)
    p = subprocess.run([unshare, "-rm", "sh", "-c", script, sys.executable, check], env=env,
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    if p.returncode == 77:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr
    for b in backends:
        assert f"{b} ok" in p.stdout or (b == "opencl" and "opencl: no device" in p.stdout), p.stdout + p.stderr
    return p


def test_a_full_disk_warns_once_and_leaves_no_partial_files(tmp_path):
    p = _in_private_mount(tmp_path, "size=48k", remount_ro=False)
    assert p.stderr.count("CacheWarning") == 1 and "No space left on device" in p.stderr, p.stderr
    left = [line for line in p.stdout.splitlines() if line.startswith("left ")]
    assert left and not [f for f in left if ".tmp" in f], left  # entries that fit stay; no partial file


def test_a_read_only_disk_compiles_in_memory_on_every_backend(tmp_path):
    p = _in_private_mount(tmp_path, "size=1m", remount_ro=True, backends=("numba", "opencl"))
    assert p.stderr.count("CacheWarning") == 1 and "Read-only file system" in p.stderr, p.stderr
    assert "left " not in p.stdout
