"""Time to a new kernel's first result (issue 28): opdsl's import + first call of a new elementwise
kernel against numba's ``njit(parallel=True)`` of the same loop, import included, each in a fresh
process with an empty compile cache.

    python -m benchmarks.bench_first_call --rounds 5

The two sides alternate round by round and each keeps its best; CPU time (``time.process_time``)
is printed beside wall time because it moves less when other processes share the cores.  Timing
script, not a test; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OPDSL = '''
import time, json
w0, c0 = time.perf_counter(), time.process_time()
import numpy as np
import dsl
from dsl import In, Out, f32

@dsl.kernel
def scale_add(x: In[f32], y: Out[f32], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + 1.0

x = np.ones(1 << 16, np.float32); y = np.empty_like(x)
scale_add(x, y, 2.0)
assert y[0] == 3.0
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}))
'''

NUMBA = '''
import time, json
w0, c0 = time.perf_counter(), time.process_time()
import numpy as np
import numba

@numba.njit(parallel=True)
def scale_add(x, y, a):
    for i in numba.prange(x.size):
        y[i] = a * x[i] + 1.0

x = np.ones(1 << 16, np.float32); y = np.empty_like(x)
scale_add(x, y, np.float32(2.0))
assert y[0] == 3.0
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}))
'''


def run(code: str) -> dict:
    """One fresh process running ``code`` from a file (kernels need their source) with an empty cache."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        script = Path(tmp) / "first_call.py"
        script.write_text(code)
        env = dict(os.environ, OPDSL_CACHE_DIR=str(Path(tmp) / "cache"), PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    best = {"opdsl": None, "numba": None}
    for _ in range(args.rounds):
        for name, code in (("opdsl", OPDSL), ("numba", NUMBA)):
            got = run(code)
            old = best[name]
            best[name] = got if old is None else {k: min(old[k], got[k]) for k in got}
    load = os.getloadavg()[0]
    print(f"best of {args.rounds} fresh processes, empty caches (1-minute load average {load:.1f}):")
    for kind in ("wall", "cpu"):
        o, n = best["opdsl"][kind], best["numba"][kind]
        print(f"  {kind:4}: opdsl {o:.2f} s, numba njit(parallel=True) {n:.2f} s, ratio {o / n:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
