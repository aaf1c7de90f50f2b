"""NRT's runtime library from opdsl's disk cache (backends/numba/cache.py, ``_nrt_functions``):
the first process generates it with LLVM and stores it, later ones load it without generating
it, and a damaged entry is generated (and stored) again; the kernels' results stay right."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

KERNEL = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def affine(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 3.0 - 2.0
'''

# a fresh process: the kernel's first call, counting how often numba's NRT module is generated
CHILD = '''
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
from numba.core.runtime import nrtdynmod
made = []
original = nrtdynmod.create_nrt_module
def counted(ctx):
    made.append(1)
    return original(ctx)
nrtdynmod.create_nrt_module = counted
import nrt_kernels
x = np.arange(5, dtype=np.float32)
y = np.zeros_like(x)
nrt_kernels.affine(x, y, backend="numba")
print(len(made), " ".join(map(repr, y.tolist())))
'''


def _run(folder: Path, cache_dir: Path):
    env = {k: v for k, v in os.environ.items() if k != "OPDSL_NO_DISK_CACHE"}
    env.update(OPDSL_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT), OPDSL_COMPILE_WORKERS="0")
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    made, *ys = out.stdout.split()
    return int(made), [float(v) for v in ys]


def test_nrt_is_generated_once_per_cache_and_a_damaged_entry_is_rebuilt(tmp_path):
    src, cache_dir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    (src / "nrt_kernels.py").write_text(KERNEL)
    want = (np.arange(5, dtype=np.float32) * 3 - 2).tolist()
    made, y = _run(src, cache_dir)
    assert (made, y) == (1, want)
    [entry] = list((cache_dir / "numba").glob("nrt-*.bin"))
    assert entry.stat().st_mode & 0o777 == 0o600
    made, y = _run(src, cache_dir)
    assert (made, y) == (0, want), "a warm process generated NRT's module again"
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0x10  # damage inside the object code
    entry.write_bytes(bytes(raw))
    made, y = _run(src, cache_dir)
    assert (made, y) == (1, want)  # the damaged entry is not linked: generated again
    assert entry.read_bytes() != bytes(raw)  # and stored again
    assert _run(src, cache_dir) == (0, want)
