"""What the run-time dsl.log threshold costs (issue 25, "Runtime log level"), numba backend.

    python -m benchmarks.bench_log_level [--repeat 41]

- ``launch``: launches of a 4-element kernel without dsl.log calls, the same kernel with a
  ``dsl.log.warn`` the threshold filters (it takes the hidden argument and reads the threshold at
  each launch), and one whose call the compile-time floor removed (no hidden argument).
- ``loop``: a 1M-element loop with a ``dsl.log.warn`` in its body, kept but filtered at run time
  vs removed at compile time: the per-iteration compare.

The variants run alternately in one process (a shared machine loads them alike); best and median
times per launch and their ratios to the kernel without calls are printed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import dsl  # noqa: E402
from dsl import In, Out, f32  # noqa: E402
from benchmarks.harness import load_text  # noqa: E402


@dsl.kernel(threads=1)
def no_calls(x: In[f32], y: Out[f32]):
    y[0] = x[0]


@dsl.kernel(threads=1, log_floor="warn")
def filtered_call(x: In[f32], y: Out[f32]):
    dsl.log.warn("x[0] = %f", x[0])
    y[0] = x[0]


@dsl.kernel(threads=1, log_level="error")
def removed_call(x: In[f32], y: Out[f32]):
    dsl.log.warn("x[0] = %f", x[0])
    y[0] = x[0]


@dsl.kernel(threads=1, log_floor="warn")
def loop_filtered(x: In[f32], y: Out[f32]):
    for i in range(x.size):
        if x[i] < 0.0:
            dsl.log.warn("negative at %d", i)
        y[i] = x[i] * 2.0


@dsl.kernel(threads=1, log_level="error")
def loop_removed(x: In[f32], y: Out[f32]):
    for i in range(x.size):
        if x[i] < 0.0:
            dsl.log.warn("negative at %d", i)
        y[i] = x[i] * 2.0


def alternate(cases, x, y, repeat: int, inner: int) -> dict:
    """name -> seconds per launch of each round, the cases taking turns."""
    for k in cases.values():
        k(x, y)  # compile and warm
    times = {name: [] for name in cases}
    for _ in range(repeat):
        for name, k in cases.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                k(x, y)
            times[name].append((time.perf_counter() - t0) / inner)
    return times


def report(times: dict, base: str, unit: float, label: str) -> None:
    b_best, b_med = min(times[base]), statistics.median(times[base])
    for name, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        print(f"  {name:14s} best {best / unit:8.3f} {label}  median {statistics.median(ts) / unit:8.3f} {label}"
              f"  ratio to {base}: best {best / b_best:.3f} median {med / b_med:.3f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=41)
    args = ap.parse_args(argv)
    print(f"load: {load_text()}")
    filtered_call.log_level = loop_filtered.log_level = "error"  # kept in the code, never printed
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    print("launch (4 elements, serial entry), per launch:")
    report(alternate({"no_calls": no_calls, "filtered_call": filtered_call, "removed_call": removed_call},
                     x, y, args.repeat, 2000), "no_calls", 1e-6, "us")
    x, y = np.ones(1 << 20, np.float32), np.zeros(1 << 20, np.float32)
    print("loop (1M elements, one thread), per launch:")
    report(alternate({"loop_removed": loop_removed, "loop_filtered": loop_filtered}, x, y, args.repeat, 5),
           "loop_removed", 1e-3, "ms")


if __name__ == "__main__":
    main()
