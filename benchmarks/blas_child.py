"""numpy's matmul (OpenBLAS) timed in a child process whose environment is clean.

The machine may export ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE``; they pin
OpenBLAS to a slower kernel and must stay set for the tests and for the process
that runs opdsl.  OpenBLAS reads them once, when numpy is imported, so a fair
BLAS baseline needs a fresh process without them: ``numpy_matmul_times`` starts
one (``python -m benchmarks.blas_child``), sends it the cases as JSON on stdin
and reads the timings back as JSON from stdout.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def clean_blas_env() -> Dict[str, str]:
    """This process's environment without the OpenBLAS overrides, able to import this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in SLOW_BLAS_VARS}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    return env


def numpy_matmul_times(cases: Sequence[Dict], repeat: int, timeout_s: float = 900) -> Dict:
    """Time ``a @ b`` for each case ({"name", "a": shape, "b": shape, "dtype"}) in a clean child.

    Returns {"results": {name: {"best", "median", "samples", "inner"}}, "openblas_core",
    "threads", "env"}: ``env`` is what the child saw of ``SLOW_BLAS_VARS`` (all None)."""
    request = json.dumps({"cases": list(cases), "repeat": repeat})
    done = subprocess.run([sys.executable, "-m", "benchmarks.blas_child"], input=request, cwd=ROOT,
                          env=clean_blas_env(), capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"numpy BLAS child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _openblas_facts() -> Dict[str, Optional[object]]:
    """The OpenBLAS core kernel and thread count numpy's BLAS chose (None when not OpenBLAS)."""
    facts: Dict[str, Optional[object]] = {"openblas_core": None, "threads": None}
    try:
        with open("/proc/self/maps") as f:
            libs = [line.split()[-1] for line in f if "openblas" in line.lower() and line.rstrip().endswith(".so")]
    except OSError:
        return facts
    if not libs:
        return facts
    lib = ctypes.CDLL(libs[0])
    for prefix in ("scipy_openblas_", "openblas_"):
        for suffix in ("64_", ""):
            core = getattr(lib, f"{prefix}get_corename{suffix}", None)
            threads = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
            if core is not None:
                core.restype = ctypes.c_char_p
                facts["openblas_core"] = core().decode()
                facts["threads"] = threads() if threads is not None else None
                return facts
    return facts


def _child() -> None:
    """Read the request from stdin, time every case, print one JSON line."""
    import numpy as np
    from benchmarks.harness import measure

    request = json.loads(sys.stdin.read())
    rng = np.random.default_rng(0)
    results = {}
    for case in request["cases"]:
        dtype = np.dtype(case.get("dtype", "float32"))
        a = rng.standard_normal(case["a"], dtype=np.float32).astype(dtype)
        b = rng.standard_normal(case["b"], dtype=np.float32).astype(dtype)
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), dtype)
        t = measure(lambda: np.matmul(a, b, out=out), repeat=request["repeat"], warmup=2)
        results[case["name"]] = {"best": t.best, "median": t.median, "samples": t.samples, "inner": t.inner}
    report = {"results": results, "env": {k: os.environ.get(k) for k in SLOW_BLAS_VARS}}
    report.update(_openblas_facts())
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    _child()
