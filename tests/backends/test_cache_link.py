"""Loading cached machine code links it without numba's full target refresh
(backends/numba/cache.py, ``ready_to_link``): a warm process's first launches import none of
numba's lowering registries (numba.np.arraymath pulls scipy.linalg: seconds of a model's first
run), yet serial and parallel entries, math calls included, give numpy's results, and a kernel
compiled afterwards in the same process still compiles (numba's compiler refreshes itself)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]

KERNELS = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def soft(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.exp(x.flat[i]) / (1.0 + dsl.sqrt(dsl.abs(x.flat[i])))
'''

NEW_KERNEL = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def fresh_{tag}(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 3.0 - {tag}.0
'''

# a fresh process: the kernel's serial then parallel entry (two big launches), then a new kernel
CHILD = '''
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from backends.numba import backend as nb
import link_kernels
x = np.linspace(-3, 3, nb.SERIAL_MAX_ELEMENTS * 2, dtype=np.float32)
ys = []
for _ in range(2):  # the first big launch runs serially, the second on the parallel entry
    y = np.zeros_like(x)
    link_kernels.soft(x, y)
    ys.append(y)
(launcher,) = [v for (b, _), v in link_kernels.soft._variants.items() if b == "numba"]
refreshed = "numba.np.arraymath" in sys.modules
import fresh_kernel
z = np.zeros(8, np.float32)
fresh_kernel.__dict__["fresh_" + sys.argv[2]](np.arange(8, dtype=np.float32), z)
print(json.dumps({"ready": sorted(launcher._ready), "refreshed": refreshed, "y": [y.tolist() for y in ys],
                  "z": z.tolist()}))
'''


def _run(folder: Path, cache_dir: Path, tag: int) -> dict:
    (folder / "fresh_kernel.py").write_text(NEW_KERNEL.format(tag=tag))
    env = {k: v for k, v in os.environ.items() if k != "OPDSL_NO_DISK_CACHE"}
    env.update(OPDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), OPDSL_COMPILE_WORKERS="0")
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(tag)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_warm_process_links_cached_entries_without_refreshing_numba(tmp_path):
    src, cache_dir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    (src / "link_kernels.py").write_text(KERNELS)
    from backends.numba import backend as nb
    x = np.linspace(-3, 3, nb.SERIAL_MAX_ELEMENTS * 2, dtype=np.float32)
    want = np.exp(x) / (1 + np.sqrt(np.abs(x)))
    cold = _run(src, cache_dir, 1)
    assert cold["refreshed"]  # compiling refreshes numba's registries, as it always did
    warm = _run(src, cache_dir, 2)
    assert not warm["refreshed"], "loading cached machine code imported numba's lowering registries"
    for run in (cold, warm):
        assert "launch_parallel" in run["ready"]  # both entries ran: serial first, then parallel
        for y in run["y"]:
            np.testing.assert_allclose(np.array(y, np.float32), want, rtol=2e-6, atol=1e-6)
    # a kernel compiled after the light link still compiles (and runs) in that process
    np.testing.assert_array_equal(warm["z"], np.arange(8, dtype=np.float32) * 3 - 2)
    np.testing.assert_array_equal(cold["z"], np.arange(8, dtype=np.float32) * 3 - 1)
