"""Run in a fresh process by bench_kernels: import, compile (or load) and launch leaky_relu once.

Prints one JSON line with the phases in seconds, measured from the first line
of this module (the parent adds interpreter start-up from the outside):
``import_numba``, ``import_dsl`` (dsl + backend module), ``define`` (importing
the kernel module), ``numba_init`` (numba's one-time per-process target set-up,
which its first compile or cache load would otherwise do: registries, typing
tables, and through numba's BLAS check an import of scipy), ``first_call`` (compile or disk-cache load, plus one launch
on 1024 elements), ``second_call`` (a plain launch, for scale) and whether the
output was right.  ``OPDSL_CACHE_DIR`` chooses cold (empty folder) or warm.
``--profile N`` adds the N most expensive functions of the first call (cProfile).
"""
import time

_T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    out = {}
    t = time.perf_counter()
    import numba  # noqa: F401
    out["import_numba"] = time.perf_counter() - t
    t = time.perf_counter()
    import numpy as np

    import dsl  # noqa: F401
    from backends import base
    base.get(args.backend)
    out["import_dsl"] = time.perf_counter() - t
    t = time.perf_counter()
    from benchmarks.kernels import leaky_relu
    out["define"] = time.perf_counter() - t
    t = time.perf_counter()
    if args.backend == "numba":
        from numba.core.registry import cpu_target
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    out["numba_init"] = time.perf_counter() - t
    out["scipy_imported_by_numba"] = "scipy.linalg" in sys.modules
    x = np.linspace(-1, 1, 1024, dtype=np.float32)
    y = np.zeros_like(x)
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t = time.perf_counter()
    leaky_relu(x, y, alpha=0.1, backend=args.backend)
    out["first_call"] = time.perf_counter() - t
    if prof is not None:
        prof.disable()
    t = time.perf_counter()
    leaky_relu(x, y, alpha=0.1, backend=args.backend)
    out["second_call"] = time.perf_counter() - t
    out["correct"] = bool(np.allclose(y, np.where(x > 0, x, np.float32(0.1) * x)))
    out["since_start"] = time.perf_counter() - _T0
    if prof is not None:
        import io
        import pstats
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(args.profile)
        out["profile"] = buf.getvalue()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
