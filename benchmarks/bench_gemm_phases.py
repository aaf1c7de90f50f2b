"""Where a batched or small packed GEMM's time goes (issue 9: batched attention shapes vs numpy).

    python -m benchmarks.bench_gemm_phases                  # attention shapes + the launch cost
    python -m benchmarks.bench_gemm_phases --repeat 500 --only launch --boost

Sections:
- ``phases``: per shape, numpy (clean child, benchmarks/blas_child.py) against opdsl's
  ``Model.run`` of a one-node MatMul, its single plan step (as planned, forced serial, forced
  parallel), the step with B's packing skipped (``b_ready=1`` on a dummy packed B: the time
  packing B costs; that result is not the product and is not checked), what ``Model.run`` adds
  to its step (best minus best: feed checks, binding the feeds and a new output, entry choice;
  it copies no large feed) and the eager ``ops.MatMul``.  The steps run on the feeds' values.
- ``launch``: the fixed cost of one packed-GEMM launch (an 8x8x32 product): the launcher on a
  plan's frozen values and on plain ones, numba's dispatcher on the same values, an empty
  ``njit`` function taking the same 30 arguments, and the launcher's own Python (scalar
  adaption, interrupt arm/check).

Best and median of single calls in µs; the machine's other load moves medians most, so read
the serial columns (one core) as the stable ones.  Timing scripts, not tests; results go to
benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, List

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import op_models  # noqa: E402
from benchmarks.bench_ops import ATTENTION_SHAPES  # noqa: E402
from benchmarks.blas_child import numpy_matmul_times  # noqa: E402
from benchmarks.harness import load_text, machine_info, start  # noqa: E402

SECTIONS = ("phases", "launch")
SHAPES = ATTENTION_SHAPES + (((1, 128, 64), (1, 64, 128)),)  # and one small product


def best_median(fn: Callable[[], object], repeat: int):
    """(best, median) µs of ``repeat`` single calls after two untimed ones."""
    fn()
    fn()
    ts: List[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e6, statistics.median(ts) * 1e6


def cell(pair) -> str:
    return f"{pair[0]:.1f} ({pair[1]:.1f})"


def _name(sa, sb) -> str:
    return f"{'x'.join(map(str, sa))} @ {'x'.join(map(str, sb))}"


def phases(repeat: int, shapes=SHAPES) -> str:
    import dsl
    import ops
    numpy_times = numpy_matmul_times([{"name": _name(sa, sb), "a": list(sa), "b": list(sb)} for sa, sb in shapes],
                                     repeat)["results"]
    rows = ["| A @ B | numpy | Model.run | plan step (entry) | step serial | step parallel | "
            "step, B not packed (serial) | Model.run over its step (best) | ops.MatMul eager |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for sa, sb in shapes:
        a, b = op_models.random_inputs([sa, sb], seed=sum(sa))
        model = dsl.load_onnx(op_models.matmul_model(sa, sb), backend="numba")
        feeds = {"a": a, "b": b}
        np.testing.assert_allclose(model.run(feeds)["y"], a @ b, rtol=1e-4, atol=1e-3)
        plan = next(iter(model._plans.values())).first
        (launcher, (values, grid)), = plan.steps
        names = [p.name for p in launcher.kernel_ir.params]
        # Model.run binds the feeds in place of the plan's own input buffers, which are never
        # written: timed as they are, the steps would multiply uninitialized memory (NaNs,
        # subnormals: 1.6 ms at 4x128x64 @ 4x64x128).  Give the steps the feeds' values.
        np.copyto(values[names.index("a")], a)
        np.copyto(values[names.index("b")], b)
        unpacked = list(values)  # b_ready = 1: B taken as already packed (a dummy of the packed size)
        unpacked[names.index("b_ready")] = np.int32(1)
        npan = -(-sb[-1] // (2 * int(values[names.index("V")])))
        unpacked[names.index("bp")] = np.zeros((1, sb[-2] * npan * 2 * int(values[names.index("V")])), np.float32)
        launcher.run_serial(values, grid)
        np.testing.assert_allclose(values[names.index("y")], a @ b, rtol=1e-4, atol=1e-3)
        elements = sum(values[i].size for i in launcher._tensors)
        entry = "parallel" if launcher.goes_parallel(grid, elements, values) else "serial"
        ns = numpy_times[_name(sa, sb)]
        run = best_median(lambda: model.run(feeds), repeat)
        step = best_median(lambda: launcher(values, grid), repeat)
        rows.append(f"| {_name(sa, sb)} | {ns['best'] * 1e6:.1f} ({ns['median'] * 1e6:.1f}) | {cell(run)} | "
                    f"{cell(step)} ({entry}) | "
                    f"{cell(best_median(lambda: launcher.run_serial(values, grid), repeat))} | "
                    f"{cell(best_median(lambda: launcher.run_parallel(values, grid), repeat))} | "
                    f"{cell(best_median(lambda: launcher.run_serial(unpacked, grid), repeat))} | "
                    f"{run[0] - step[0]:.1f} | "
                    f"{cell(best_median(lambda: ops.MatMul(a, b, backend='numba'), repeat))} |")
    return "\n".join(["### Batched and small packed GEMMs, phases (µs, best (median))", ""] + rows)


def launch_cost(repeat: int) -> str:
    import numba

    from backends import interrupt
    from ops.gemm_packed import gemm_packed, packed_gemm

    a, b = np.ones((1, 8, 8), np.float32), np.ones((1, 8, 32), np.float32)
    c, y = np.zeros((1, 1), np.float32), np.zeros((1, 8, 32), np.float32)
    calls = []
    packed_gemm(a, b, c, y, backend="numba", kernel=lambda *args, **kw: calls.append((args, kw)))
    args, kwargs = calls[0]
    kwargs = dict(kwargs)
    kwargs.pop("backend")
    launcher, values, grid = gemm_packed.prepare(args, kwargs, backend="numba", grid=kwargs.pop("grid"))
    serial = launcher._serial
    hidden = launcher.hidden_args(grid)

    @numba.njit(nogil=True)
    def empty(*args):
        return None

    arrays = [v for v in values if isinstance(v, np.ndarray)]
    scalars = [v for v in values if not isinstance(v, np.ndarray)]
    frozen = launcher.freeze(values)  # what a model's plan keeps (backends/numba/frozen.py)
    rows = [("launcher(frozen values, grid): a model's step", lambda: launcher(frozen, grid)),
            ("launcher(values, grid): values from Kernel.prepare", lambda: launcher(values, grid)),
            ("packed_gemm(...) eager (fast path)", lambda: packed_gemm(a, b, c, y, backend="numba")),
            ("numba dispatcher launch_serial(*values)", lambda: serial(*values, *hidden)),
            (f"empty njit, same {len(values) + 3} arguments", lambda: empty(*values, *hidden)),
            (f"empty njit, the {len(arrays)} arrays", lambda: empty(*arrays)),
            (f"empty njit, the {len(scalars)} scalars", lambda: empty(*scalars)),
            ("launcher._adapt(values)", lambda: launcher._adapt(values)),
            ("interrupt arm + check", lambda: interrupt.check(interrupt.arm()))]
    out = ["### Fixed cost of one packed-GEMM launch, 8x8 @ 8x32 (µs, best (median))", "",
           "| what | µs |", "|---|---:|"]
    out += [f"| {name} | {cell(best_median(fn, repeat))} |" for name, fn in rows]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_gemm_phases", description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated, from {','.join(SECTIONS)}")
    ap.add_argument("--repeat", type=int, default=200, help="timed calls per cell (x10 in the launch section)")
    ap.add_argument("--boost", action="store_true",
                    help="run in a new session at nice -20 (Linux, root); see benchmarks/README.md")
    args, wanted, argv, boosted, code = start(ap, argv, "benchmarks.bench_gemm_phases", SECTIONS)
    if code is not None:  # the boosted child ran the benchmarks
        return code
    print(f"Command: `python -m benchmarks.bench_gemm_phases {' '.join(argv)}`" + (f"; priority: {boosted}" if boosted
                                                                                    else ""))
    for line in machine_info():
        print(f"- {line}")
    if "phases" in wanted:
        print("\n" + phases(args.repeat))
    if "launch" in wanted:
        print("\n" + launch_cost(args.repeat * 10))
    print(f"\nload average at end: {load_text()}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
