"""Declarative tiling (issue 11): an RMSNorm op, y = w * x / sqrt(mean(x^2) + 1e-5) over rows,
run by a compiled model tiled (one tile per core, ``compile(tiling=True)``) and untiled
(``tiling=False``), on 1 and on 2 cores; and the same for the RMSNorm of the example op package
(examples/qaic_package, tiles declared by its functions.py: the guide's setTileConfig/mapTiles).

Each core count runs in a child process pinned to that many CPUs (``sched_setaffinity``) with
``NUMBA_NUM_THREADS`` set to match, so untiled parallel launches and the tiles see the same
cores.  The op's kernel is timed twice: with a team of 4 threads (the ``@dsl.kernel`` default:
the untiled launch is already a parallel loop over the team) and with a team of 1 (a kernel
written for one core, like a Cloud AI 100 custom op for one NSP: only tiling spreads it).
On 1 core, "tiled" runs 2 tiles one after the other (the cost of tiling where it cannot help).

    python -m benchmarks.bench_tiling [--rows 1024] [--cols 1024] [--repeat 15] [--backend numba] [--boost]
    python -m benchmarks.bench_tiling --quick

Times are whole ``model.run`` calls (best and median; they include copying the input in and
the output out) and the RMSNorm node alone (``model.profile``, mean).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness  # noqa: E402
import dsl  # noqa: E402
from dsl import In, Out, f32  # noqa: E402


def rms_rows(x: In[f32, 2], w: In[f32, 1], y: Out[f32, 2], eps: f32):
    """The team's threads share the rows (``dsl.split``); each row: mean square, then scale."""
    n = x.shape[1]
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        s = f32(0)
        for j in range(n):
            v = x[r, j]
            s += v * v
        inv = f32(1) / dsl.sqrt(s / n + eps)
        for j in range(n):
            y[r, j] = x[r, j] * inv * w[j]


KERNELS = {team: dsl.kernel(threads=team)(rms_rows) for team in (4, 1)}


PACKAGE = Path(__file__).resolve().parent.parent / "examples" / "qaic_package"
TEAMS = (4, 1, "package")


def build(cols: int, team, tiling, backend: str):
    """The RMSNorm op as an ordinary dsl.Op whose kernel has a team of ``team`` threads, or
    (``team="package"``) the example op package's RMSNorm, whose functions.py declares the tiles;
    in a one-node graph compiled with ``tiling``."""
    if team == "package":
        op = {cls.op_type: cls for cls in dsl.register_package(PACKAGE).ops}["RMSNorm"]
        g = dsl.Graph("rmsnorm_package")
        x = g.input("x", (None, cols), dsl.f32)
        w = g.input("w", (cols,), dsl.f32)
        g.output(op(epsilon=1e-5)(x, w), "y")
        return g.compile(backend=backend, tiling=tiling)
    kernel = KERNELS[team]

    class RMSNorm(dsl.Op):
        """Rows are independent: tiles cut axis 0 (any alignment) and read their own rows."""
        epsilon: float = 1e-5
        kernels = {"default": kernel}

        def infer(self, x, w):
            return x.spec

        def tiling(self, x, w):
            return {0: 1}

        def map_tiles(self, out_tile, x, w):
            return [out_tile[0], None]

        plan = dsl.recorded_plan  # one launch from shapes and params: a model binds it once

        def run(self, impl, inputs, outputs, backend):
            impl(*inputs, *outputs, eps=self.epsilon, backend=backend)

    g = dsl.Graph("rmsnorm")
    x = g.input("x", (None, cols), dsl.f32)
    w = g.input("w", (cols,), dsl.f32)
    g.output(RMSNorm()(x, w), "y")
    return g.compile(backend=backend, tiling=tiling)


def ways(tiled, untiled, feeds, repeat: int) -> dict:
    """The node alone, its tiles run four ways on the same buffers: how tiles should run.
    Reads the plans' steps (dsl/opgraph/model.py) -- a measurement aid, not an API."""
    from dsl.opgraph import tiling as tiles
    tiled.run(feeds)
    untiled.run(feeds)
    work = next(args[0] for fn, args in next(iter(tiled._plans.values())).first.steps if fn is tiles.run_tiles)
    parallel = tuple((before, tuple((fn.__self__.run_parallel, a) for fn, a in steps), after)
                     for before, steps, after in work)
    launch, launch_args = next(iter(untiled._plans.values())).first.steps[0]
    cases = {"untiled: one launch (serial or parallel entry by size)": lambda: launch(*launch_args),
             "tiles on threads, serial entry (what the model does)": lambda: tiles.run_tiles(work),
             "tiles on threads, parallel entry (OpenMP team per thread)": lambda: tiles.run_tiles(parallel),
             "tiles in order, parallel entry": lambda: tiles.run_tiles_in_order(parallel)}
    return {k: t.best for k, t in harness.measure_interleaved(cases, repeat=repeat).items()}


def child(args) -> int:
    """Time every case on the cores this process was started with; print JSON."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    w = rng.standard_normal(args.cols).astype(np.float32)
    feeds = {"x": x, "w": w}
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * w
    cores = harness.usable_cores()
    results, how = [], {}
    for team in TEAMS:
        models = {"untiled": build(args.cols, team, False, args.backend),
                  "tiled": build(args.cols, team, True if cores > 1 else 2, args.backend)}
        for name, m in models.items():
            np.testing.assert_allclose(m.run(feeds)["y"], ref, rtol=1e-4, atol=1e-5, err_msg=name)
        tiles = {name: next(iter(m._plans.values())).first.tiled for name, m in models.items()}
        timings = harness.measure_interleaved({k: (lambda m=m: m.run(feeds)) for k, m in models.items()},
                                              repeat=args.repeat)
        for name, m in models.items():
            node = m.profile(feeds, repeat=args.repeat).rows[0].mean_s
            t = timings[name]
            results.append({"team": team, "case": name, "cores": cores, "best": t.best, "median": t.median,
                            "node": node, "tiles": sum(tiles[name].values()) or 1})
        if cores > 1 and args.backend == "numba":
            how[team] = ways(models["tiled"], models["untiled"], feeds, args.repeat)
    print(json.dumps({"results": results, "ways": how, "load": harness.load_text()}))
    return 0


def run_child(cores: int, args, argv) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(cores), OMP_NUM_THREADS=str(cores))
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_tiling", "--child", *argv],
                         env=env, capture_output=True, text=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    if out.returncode:
        raise SystemExit(f"the {cores}-core run failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--quick", action="store_true", help="small sizes, few samples (a smoke run)")
    ap.add_argument("--boost", action="store_true", help="run in a session of its own at nice -20 (shared machines)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    argv = [a for a in (sys.argv[1:] if argv is None else argv) if a not in ("--boost", "--child")]
    if args.quick:
        args.rows, args.cols, args.repeat = 512, 256, 5
    if args.child:
        return child(args)
    if args.boost:
        code = harness.run_boosted("benchmarks.bench_tiling", argv)
        if code is not None:
            return code
    boost = harness.apply_boost()
    counts = [c for c in (1, 2) if c <= harness.usable_cores()]
    runs = {c: run_child(c, args, argv) for c in counts}

    print("## Declarative tiling: RMSNorm tiled vs untiled (issue 11)\n")
    print(f"Command: `python -m benchmarks.bench_tiling --rows {args.rows} --cols {args.cols} "
          f"--repeat {args.repeat} --backend {args.backend}{' --boost' if args.boost else ''}`\n")
    for line in harness.machine_info():
        print(f"- {line}")
    if boost:
        print(f"- priority: {boost}")
    for c, r in runs.items():
        print(f"- load during the {c}-core run: {r['load']}")
    print(f"\nx: f32[{args.rows},{args.cols}], one RMSNorm node; the model's run also copies x in and y out.\n")
    print("| kernel team | cores | case | tiles | run best | run median | node (mean) | vs untiled | vs 1 core |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    rows = [r for c in counts for r in runs[c]["results"]]
    for team in TEAMS:
        for c in counts:
            for case in ("untiled", "tiled"):
                r = next(x for x in rows if x["team"] == team and x["cores"] == c and x["case"] == case)
                base = next(x for x in rows if x["team"] == team and x["cores"] == c and x["case"] == "untiled")
                one = next((x for x in rows if x["team"] == team and x["cores"] == 1 and x["case"] == case), None)
                vs_one = "" if one is None else f"{one['best'] / r['best']:.2f}x"
                print(f"| {team} | {c} | {case} | {r['tiles']} | {harness.fmt_seconds(r['best'])} | "
                      f"{harness.fmt_seconds(r['median'])} | {harness.fmt_seconds(r['node'])} | "
                      f"{base['best'] / r['best']:.2f}x | "
                      f"{vs_one} |")
    print("\nvs untiled / vs 1 core: speed-up of the run's best time (higher is faster).")
    for c, r in runs.items():
        for team, cases in r.get("ways", {}).items():
            print(f"\nHow to run the tiles ({c} cores, kernel team {team}; the node alone, best of "
                  f"{args.repeat}):\n")
            print("| way | best | vs untiled |")
            print("|---|---:|---:|")
            base = next(iter(cases.values()))
            for name, best in cases.items():
                print(f"| {name} | {harness.fmt_seconds(best)} | {base / best:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
