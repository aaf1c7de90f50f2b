"""One batched MatMul's two-thread launch against its serial entry, alternated in one process.

    GOMP_SPINCOUNT=<n> OPENBLAS_NUM_THREADS=1 python -m benchmarks.bench_batched_entries [--rounds 2]

Times, in rounds, numpy's matmul in this process (one thread with ``OPENBLAS_NUM_THREADS=1``:
OpenBLAS's own spinning workers would take the core numba's worker needs), ``Model.run`` of a
one-node MatMul, and its plan step forced onto the parallel and onto the serial entry, on the
feeds' values.  The spin count of numba's OpenMP workers is read when libgomp loads, so compare
spin counts by alternating processes (benchmarks/RESULTS.md, issue 29, nineteenth session, round
2, slice attn2).  Best (median) µs of single calls; timing script, not a test.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import op_models  # noqa: E402
from benchmarks.bench_gemm_phases import best_median, cell  # noqa: E402
from benchmarks.harness import load_text  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_batched_entries", description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="4,128,128", help="A's shape")
    ap.add_argument("--b", default="4,128,64", help="B's shape")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=300, help="timed calls per cell")
    args = ap.parse_args(argv)
    import dsl
    sa, sb = (tuple(int(d) for d in s.split(",")) for s in (args.a, args.b))
    a, b = op_models.random_inputs([sa, sb], seed=1)
    model = dsl.load_onnx(op_models.matmul_model(sa, sb), backend="numba")
    feeds = {"a": a, "b": b}
    np.testing.assert_allclose(model.run(feeds)["y"], a @ b, rtol=1e-4, atol=1e-3)
    (launcher, (values, grid)), = next(iter(model._plans.values())).first.steps
    names = [p.name for p in launcher.kernel_ir.params]
    values = list(values)  # the plan's input buffers are never written (Model.run binds the feeds)
    values[names.index("a")], values[names.index("b")] = a.copy(), b.copy()
    sides = [("numpy", lambda: np.matmul(a, b)), ("Model.run", lambda: model.run(feeds)),
             ("parallel entry", lambda: launcher.run_parallel(values, grid)),
             ("serial entry", lambda: launcher.run_serial(values, grid))]
    print(f"{args.a} @ {args.b}, load {load_text()}")
    print("| round | " + " | ".join(name for name, _ in sides) + " |")
    print("|---|" + "---:|" * len(sides))
    for r in range(args.rounds):
        print(f"| {r} | " + " | ".join(cell(best_median(fn, args.repeat)) for _, fn in sides) + " |", flush=True)
    print(f"load at end {load_text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
