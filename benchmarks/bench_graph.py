"""Per-node overhead of a compiled graph (issue 4: <= 5 us per node; issue 28: <= 1.5x onnxruntime).

A chain of 100 small elementwise nodes (Tanh and Relu alternating on a 1x64 f32
tensor) spends almost all its time in per-node overhead.  The same chain runs as
an opdsl ``Model`` (built with ``dsl.Graph`` and loaded back from its own ONNX
export) and in onnxruntime on that exported model.  Graph rewrites are off unless
``--fuse``: fused, the chain is one kernel and per-node cost is not what is measured.

    python -m benchmarks.bench_graph [--nodes 100] [--size 64] [--backend numba] [--fuse] [--boost]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from benchmarks import harness


_NUMPY = {"Tanh": np.tanh, "Relu": lambda x: np.maximum(x, 0)}


def build_chain(nodes: int, size: int, cycle=("Tanh", "Relu")):
    """``nodes`` nodes applying the ops named in ``cycle`` in turn to a 1 x ``size`` f32 tensor."""
    import dsl
    import ops
    g = dsl.Graph("chain")
    h = g.input("x", (1, size), dsl.f32)
    for i in range(nodes):
        h = getattr(ops, cycle[i % len(cycle)])(h)
    g.output(h, "y")
    return g


def reference(x: np.ndarray, nodes: int, cycle=("Tanh", "Relu")) -> np.ndarray:
    for i in range(nodes):
        x = _NUMPY[cycle[i % len(cycle)]](x)
    return x


def _alternating(cases, repeat: int, sample_s: float = 0.002):
    """name -> Timing: each case's samples (~2 ms of calls each) taken in turn, round by round,
    so a busy neighbour slows every case alike (shared machines)."""
    inner = {}
    for name, fn in cases.items():
        for _ in range(3):
            fn()
        t0 = time.perf_counter()
        fn()
        inner[name] = max(1, int(sample_s / max(time.perf_counter() - t0, 1e-9)))
    samples = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            n = inner[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {name: harness.Timing(min(v), statistics.median(v), len(v), inner[name]) for name, v in samples.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--ops", default="Tanh,Relu", help="the ops the chain cycles through (Tanh, Relu)")
    ap.add_argument("--fuse", action="store_true", help="apply the graph rewrites (the chain becomes one kernel)")
    ap.add_argument("--boost", action="store_true", help="run in a session of its own at nice -20 (shared machines)")
    args = ap.parse_args(argv)
    if args.boost:
        code = harness.run_boosted("benchmarks.bench_graph", [a for a in (argv or sys.argv[1:]) if a != "--boost"])
        if code is not None:
            return code
    boost = harness.apply_boost()

    import onnxruntime as ort

    import dsl
    cycle = tuple(args.ops.split(","))
    g = build_chain(args.nodes, args.size, cycle)
    model = g.compile(backend=args.backend, fuse=args.fuse)
    proto = g.to_onnx()
    proto.ir_version = min(proto.ir_version, 9)  # the newest IR version onnxruntime accepts here
    loaded = dsl.load_onnx(proto, backend=args.backend, fuse=args.fuse)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])

    x = np.random.default_rng(0).standard_normal((1, args.size)).astype(np.float32)
    ref = reference(x, args.nodes, cycle)
    for name, run in (("graph", lambda: model.run({"x": x})["y"]), ("loaded", lambda: loaded.run({"x": x})["y"]),
                      ("onnxruntime", lambda: sess.run(None, {"x": x})[0])):
        np.testing.assert_allclose(run(), ref, rtol=1e-5, atol=1e-6, err_msg=name)

    cases = {
        f"opdsl Model ({args.backend}), built with dsl.Graph": lambda: model.run({"x": x}),
        f"opdsl Model ({args.backend}), dsl.load_onnx of the export": lambda: loaded.run({"x": x}),
        "onnxruntime (1 thread), same ONNX model": lambda: sess.run(None, {"x": x}),
    }
    timings = _alternating(cases, args.repeat)
    ort_t = timings["onnxruntime (1 thread), same ONNX model"].best

    print("## Graph per-node overhead (issue 4)\n")
    print(f"Command: `python -m benchmarks.bench_graph --nodes {args.nodes} --size {args.size} "
          f"--backend {args.backend}{'' if args.ops == 'Tanh,Relu' else ' --ops ' + args.ops}{' --fuse' if args.fuse else ''}{' --boost' if args.boost else ''}`\n")
    for line in harness.machine_info():
        print(f"- {line}")
    if boost:
        print(f"- priority: {boost}")
    print(f"\nA chain of {args.nodes} elementwise nodes ({'/'.join(cycle)}) on a 1x{args.size} f32 tensor, graph rewrites "
          f"{'on' if args.fuse else 'off'} ({model.stats['fused']} nodes fused).\n")
    print("| case | per run | per node | vs onnxruntime |")
    print("|---|---|---|---|")
    for name, t in timings.items():
        print(f"| {name} | {harness.fmt_seconds(t.best)} (median {harness.fmt_seconds(t.median)}) | "
              f"{t.best / args.nodes * 1e6:.2f} us | {t.best / ort_t:.2f}x |")
    best = timings[f"opdsl Model ({args.backend}), built with dsl.Graph"].best
    per_node, ratio = best / args.nodes * 1e6, best / ort_t
    print(f"\nTarget <= 5 us per node: {'met' if per_node <= 5 else 'missed'} ({per_node:.2f} us); "
          f"target <= 1.5x onnxruntime: {'met' if ratio <= 1.5 else 'missed'} ({ratio:.2f}x).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
