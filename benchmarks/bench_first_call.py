"""Time to a new kernel's first result and the cost of a small launch (issue 28).

- ``elementwise`` and ``softmax``: opdsl's import + first call of a new kernel (an elementwise
  loop; a 3-loop row softmax) against numba's ``njit(parallel=True)`` of the same loops, import
  included, each in a fresh process with an empty compile cache.  The two sides alternate round by
  round and each keeps its best; CPU time (``time.process_time``) is printed beside wall time
  because it moves less when other processes share the cores.  Each side (and ``--baseline``)
  has its own bytecode cache, filled by one untimed round, as an installed package has its .pyc
  files (``--no-pyc``: none, as this script measured before; this machine sets
  ``PYTHONDONTWRITEBYTECODE``, so opdsl's sources were compiled in every process).
- ``launch``: a 64-element launch of a compiled elementwise kernel against a bare ``njit`` call
  of the same loop, in one fresh process per tree, the two sides alternating in ~1 ms samples
  (best and median per call).

    python -m benchmarks.bench_first_call --rounds 5
    python -m benchmarks.bench_first_call --only launch

Timing script, not a test; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional

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


SOFTMAX_OPDSL = '''
import time, json
w0, c0 = time.perf_counter(), time.process_time()
import numpy as np
import dsl
from dsl import In, Out, f32

@dsl.kernel(threads=4)
def softmax_rows(x: In[f32, 2], y: Out[f32, 2]):
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        base = r * n
        m = x.flat[base]
        for j in range(1, n):
            m = max(m, x.flat[base + j])
        s = f32(0)
        for j in range(n):
            e = dsl.exp(x.flat[base + j] - m)
            y.flat[base + j] = e
            s += e
        inv = 1.0 / s
        for j in range(n):
            y.flat[base + j] *= inv

x = np.ones((256, 256), np.float32); y = np.empty_like(x)
softmax_rows(x, y)
assert abs(y[0, 0] - 1 / 256) < 1e-6
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}))
'''

SOFTMAX_NUMBA = '''
import time, json
w0, c0 = time.perf_counter(), time.process_time()
import numpy as np
import numba

@numba.njit(parallel=True)
def softmax_rows(x, y):
    rows, n = x.shape
    for r in numba.prange(rows):
        m = x[r, 0]
        for j in range(1, n):
            m = max(m, x[r, j])
        s = np.float32(0)
        for j in range(n):
            e = np.exp(x[r, j] - m)
            y[r, j] = e
            s += e
        inv = np.float32(1.0) / s
        for j in range(n):
            y[r, j] *= inv

x = np.ones((256, 256), np.float32); y = np.empty_like(x)
softmax_rows(x, y)
assert abs(y[0, 0] - 1 / 256) < 1e-6
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}))
'''

CASES = {"elementwise": (OPDSL, NUMBA), "softmax": (SOFTMAX_OPDSL, SOFTMAX_NUMBA)}


def run(code: str, tree: Path = ROOT, pyc: Optional[Path] = None) -> dict:
    """One fresh process running ``code`` from a file (kernels need their source) with an empty cache,
    importing opdsl from ``tree``; ``pyc``: the folder of its bytecode cache (without it, and with
    ``PYTHONDONTWRITEBYTECODE`` set as on this machine, every process compiles opdsl's sources)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        script = Path(tmp) / "first_call.py"
        script.write_text(code)
        env = dict(os.environ, OPDSL_CACHE_DIR=str(Path(tmp) / "cache"), PYTHONPATH=str(tree))
        if pyc is not None:
            env.update(PYTHONPYCACHEPREFIX=str(pyc), PYTHONDONTWRITEBYTECODE="")
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_calls(case: str, rounds: int, baseline: Optional[Path] = None, pyc: Optional[Path] = None) -> None:
    """Best of ``rounds`` fresh processes per side, the sides alternating (with ``baseline``: also
    opdsl imported from that tree, e.g. an export of main, for a before/after in one run).  With
    ``pyc`` each side has its own bytecode cache there, filled by one untimed round first, as an
    installed package has its .pyc files."""
    opdsl_code, numba_code = CASES[case]
    sides = [("opdsl", opdsl_code, ROOT), ("numba", numba_code, ROOT)]
    if baseline is not None:
        sides.insert(1, ("baseline", opdsl_code, baseline))
    caches = {name: None if pyc is None else pyc / name for name, _, _ in sides}
    if pyc is not None:
        for name, code, tree in sides:
            run(code, tree, caches[name])
    best: Dict[str, dict] = {}
    for _ in range(rounds):
        for name, code, tree in sides:
            got = run(code, tree, caches[name])
            old = best.get(name)
            best[name] = got if old is None else {k: min(old[k], got[k]) for k in got}
    load = os.getloadavg()[0]
    print(f"{case}: best of {rounds} fresh processes, empty caches, {'bytecode cached' if pyc else 'no bytecode cache'} "
          f"(1-minute load average {load:.1f}):")
    for kind in ("wall", "cpu"):
        n = best["numba"][kind]
        line = f"  {kind:4}: numba njit(parallel=True) {n:.2f} s; opdsl {best['opdsl'][kind]:.2f} s, ratio " \
               f"{best['opdsl'][kind] / n:.2f}x"
        if baseline is not None:
            line += f"; baseline {best['baseline'][kind]:.2f} s, ratio {best['baseline'][kind] / n:.2f}x"
        print(line)


LAUNCH = '''
import json, sys, time
import numba
import numpy as np
import dsl
from dsl import In, Out, f32

@dsl.kernel
def scale_add(x: In[f32], y: Out[f32], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + 1.0

@numba.njit
def bare(x, y, a):
    for i in range(x.size):
        y[i] = a * x[i] + np.float32(1.0)

n, rounds = {n}, {rounds}
x = np.linspace(-1, 1, n, dtype=np.float32)
y = np.empty_like(x)
a = np.float32(2.0)
bare(x, y, a)
want = y.copy()
y[:] = 0
scale_add(x, y, 2.0)
assert np.array_equal(y, want), "the kernel and the njit loop disagree"
sides = {{"opdsl": lambda: scale_add(x, y, 2.0), "njit": lambda: bare(x, y, a)}}
inner = {{}}
for name, fn in sides.items():  # calls per sample: ~1 ms each side, so a preemption hits both alike
    t0 = time.perf_counter()
    for _ in range(200):
        fn()
    inner[name] = max(50, int(1e-3 / ((time.perf_counter() - t0) / 200)))
samples = {{k: [] for k in sides}}
for _ in range(rounds):
    for name, fn in sides.items():
        t0 = time.perf_counter()
        for _ in range(inner[name]):
            fn()
        samples[name].append((time.perf_counter() - t0) / inner[name])
print(json.dumps(samples))
'''


def launch_overhead(rounds: int, baseline: Optional[Path] = None, n: int = 64) -> None:
    """A steady-state launch of ``n`` elements: ``kernel(x, y, 2.0)`` against a bare njit call of the
    same loop, the two alternating in one fresh process per tree (``baseline``: also that tree)."""
    trees = [("opdsl", ROOT)] + ([("baseline", baseline)] if baseline is not None else [])
    load = os.getloadavg()[0]
    print(f"launch of {n} f32 elements ({rounds * 10} samples of ~1 ms per side, alternating in one "
          f"process; 1-minute load average {load:.1f}):")
    for label, tree in trees:
        samples = run(LAUNCH.format(n=n, rounds=rounds * 10), tree)
        med = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
        best = {k: min(v) for k, v in samples.items()}
        print(f"  {label:8}: kernel(x, y, 2.0) best {best['opdsl'] * 1e6:5.2f} us, median {med['opdsl'] * 1e6:5.2f} us; "
              f"bare njit best {best['njit'] * 1e6:5.2f} us, median {med['njit'] * 1e6:5.2f} us; "
              f"ratio best {best['opdsl'] / best['njit']:.2f}x, median {med['opdsl'] / med['njit']:.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=(*CASES, "launch"), default=None, help="one section")
    ap.add_argument("--no-pyc", action="store_true",
                    help="no bytecode cache: every process compiles opdsl's (and numba's) Python sources, as "
                         "bench_first_call measured before the seventeenth session")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="also time opdsl imported from this tree (e.g. `git archive main` unpacked)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as pyc:
        for case in ([args.only] if args.only else [*CASES, "launch"]):
            if case == "launch":
                launch_overhead(args.rounds, args.baseline)
            else:
                first_calls(case, args.rounds, args.baseline, None if args.no_pyc else Path(pyc) / case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
