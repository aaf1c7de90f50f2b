"""``opdsl demo``: a few built-in kernels, run on every available backend and
checked against numpy, so a fresh install shows in one command that the
compilers and the team model (scratch, sync, tiles) work on this machine.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, TextIO

import numpy as np

import dsl
from dsl import In, Out, f32


@dsl.kernel
def leaky_relu(x: In[f32], y: Out[f32], alpha: f32 = 0.01):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = v if v > 0 else alpha * v


@dsl.kernel(threads=4)
def softmax_rows(x: In[f32, 2], y: Out[f32, 2]):
    """One team per row (grid = rows): max and sum are tree reductions in scratch."""
    part = dsl.scratch((4,), f32)
    row = dsl.tile_id()
    t = dsl.thread_id()
    lo, hi = dsl.split(x.shape[1])
    m = f32(-3.0e38)
    for j in range(lo, hi):
        m = max(m, x[row, j])
    part[t] = m
    dsl.sync()
    s = 2
    while s > 0:
        if t < s:
            part[t] = max(part[t], part[t + s])
        dsl.sync()
        s //= 2
    m = part[0]
    dsl.sync()
    acc = f32(0.0)
    for j in range(lo, hi):
        e = dsl.exp(x[row, j] - m)
        y[row, j] = e
        acc += e
    part[t] = acc
    dsl.sync()
    s = 2
    while s > 0:
        if t < s:
            part[t] = part[t] + part[t + s]
        dsl.sync()
        s //= 2
    total = part[0]
    for j in range(lo, hi):
        y[row, j] = y[row, j] / total


@dsl.kernel(threads=4)
def matmul(a: In[f32, 2], b: In[f32, 2], c: Out[f32, 2]):
    """c = a @ b; each tile computes one row of c, its threads share the columns."""
    i = dsl.tile_id()
    lo, hi = dsl.split(c.shape[1])
    for j in range(lo, hi):
        acc = f32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@dataclass
class Case:
    name: str
    run: Callable[[str], np.ndarray]  # backend -> result
    reference: np.ndarray
    tolerance: float


def cases() -> List[Case]:
    """The demo kernels with inputs and numpy references (small: the interpreter runs them too)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1 << 14).astype(np.float32)
    rows = rng.standard_normal((32, 256)).astype(np.float32)
    a = rng.standard_normal((48, 64)).astype(np.float32)
    b = rng.standard_normal((64, 48)).astype(np.float32)

    def run_leaky(backend):
        y = np.empty_like(x)
        leaky_relu(x, y, alpha=0.1, backend=backend)
        return y

    def run_softmax(backend):
        y = np.empty_like(rows)
        softmax_rows(rows, y, backend=backend, grid=rows.shape[0])
        return y

    def run_matmul(backend):
        c = np.empty((a.shape[0], b.shape[1]), np.float32)
        matmul(a, b, c, backend=backend, grid=a.shape[0])
        return c

    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    return [
        Case("leaky_relu", run_leaky, np.where(x > 0, x, np.float32(0.1) * x), 0.0),
        Case("softmax_rows", run_softmax, e / e.sum(axis=1, keepdims=True), 1e-5),
        Case("matmul", run_matmul, a @ b, 1e-4),
    ]


def _unavailable(name: str) -> str:
    from backends import base
    try:
        return base.get(name).available()
    except ImportError as e:
        return f"cannot be imported ({e})"


def _where(name: str) -> str:
    """What a backend runs on, for the table: the OpenCL device by name."""
    if name != "opencl":
        return ""
    from backends import base
    return base.get("opencl").device()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.2f} ms"


def register(sub) -> None:
    from backends import base
    d = sub.add_parser("demo", help="run built-in kernels on every available backend and check them against numpy",
                       description="Run three built-in kernels (elementwise, a team reduction, a tiled matmul) on "
                                   "every available backend, time them and check them against numpy: a health "
                                   "check of the install.",
                       epilog="example: opdsl demo --backend numba --backend opencl")
    d.add_argument("--backend", action="append", choices=base.names(),
                   help="only this backend (repeatable; default: all)")
    d.set_defaults(func=run)


def run(args=None, repeat: int = 3, out: Optional[TextIO] = None) -> int:
    """The ``demo`` subcommand -> exit code (1 if any kernel failed or nothing could run).

    ``args`` is the parsed command line, or, from Python, a list of backend names (None: all)."""
    backends = getattr(args, "backend", args)
    return 1 if check(backends, repeat, out) else 0


def check(backends: Optional[Sequence[str]] = None, repeat: int = 3, out: Optional[TextIO] = None) -> int:
    """Run every case on every backend; print a table; return the number of failures."""
    import sys

    from backends import base
    out = out or sys.stdout
    backends = list(backends or base.names())
    print(f"opdsl {dsl.__version__} demo: {len(cases())} kernels on {', '.join(backends)}, checked against numpy",
          file=out)
    print(f"{'kernel':<14}{'backend':<13}{'first call':>12}{'run (best)':>13}{'max error':>12}  result", file=out)
    failures = 0
    ran = 0
    for name in backends:
        reason = _unavailable(name)
        if reason:
            print(f"{'-':<14}{name:<13}skipped: " + reason.replace("\n", "\n" + " " * 27), file=out)
            continue
        where = _where(name)
        if where:
            print(f"{'':<14}{name:<13}runs on {where}", file=out)
        for case in cases():
            t0 = time.perf_counter()
            try:
                got = case.run(name)
            except Exception as e:  # report and go on: the demo is a health check
                failures += 1
                on = f" (on {where})" if where else ""
                print(f"{case.name:<14}{name:<13}FAILED{on}: {type(e).__name__}: {e}", file=out)
                continue
            first = time.perf_counter() - t0
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                case.run(name)
                best = min(best, time.perf_counter() - t0)
            err = float(np.max(np.abs(got.astype(np.float64) - case.reference)))
            ok = np.allclose(got, case.reference, rtol=case.tolerance, atol=case.tolerance)
            failures += not ok
            ran += 1
            print(f"{case.name:<14}{name:<13}{_ms(first):>12}{_ms(best):>13}{err:>12.2e}  "
                  f"{'ok' if ok else 'MISMATCH'}", file=out)
    if not ran:
        print("no backend could run the demo", file=out)
        return max(failures, 1)
    print("all results match numpy" if not failures else f"{failures} failure(s)", file=out)
    return failures
