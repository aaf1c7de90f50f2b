"""Per-node overhead of a compiled graph (issue 4 target: <= 5 us per node).

A chain of 100 small elementwise nodes (Tanh and Relu alternating on a 1x64 f32
tensor) spends almost all its time in per-node overhead.  The same chain runs as
an opdsl ``Model`` (built with ``dsl.Graph`` and loaded back from its own ONNX
export) and in onnxruntime on that exported model.

    python -m benchmarks.bench_graph [--nodes 100] [--size 64] [--backend numba] [--boost]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks import harness


def build_chain(nodes: int, size: int):
    import dsl
    import ops
    g = dsl.Graph("chain")
    h = g.input("x", (1, size), dsl.f32)
    for i in range(nodes):
        h = ops.Relu(h) if i % 2 else ops.Tanh(h)
    g.output(h, "y")
    return g


def reference(x: np.ndarray, nodes: int) -> np.ndarray:
    for i in range(nodes):
        x = np.maximum(x, 0) if i % 2 else np.tanh(x)
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--boost", action="store_true", help="run in a session of its own at nice -20 (shared machines)")
    args = ap.parse_args(argv)
    if args.boost:
        code = harness.run_boosted("benchmarks.bench_graph", [a for a in (argv or sys.argv[1:]) if a != "--boost"])
        if code is not None:
            return code
    boost = harness.apply_boost()

    import onnxruntime as ort

    import dsl
    g = build_chain(args.nodes, args.size)
    model = g.compile(backend=args.backend)
    proto = g.to_onnx()
    proto.ir_version = min(proto.ir_version, 9)  # the newest IR version onnxruntime accepts here
    loaded = dsl.load_onnx(proto, backend=args.backend)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])

    x = np.random.default_rng(0).standard_normal((1, args.size)).astype(np.float32)
    ref = reference(x, args.nodes)
    for name, run in (("graph", lambda: model.run({"x": x})["y"]), ("loaded", lambda: loaded.run({"x": x})["y"]),
                      ("onnxruntime", lambda: sess.run(None, {"x": x})[0])):
        np.testing.assert_allclose(run(), ref, rtol=1e-5, atol=1e-6, err_msg=name)

    cases = {
        f"opdsl Model ({args.backend}), built with dsl.Graph": lambda: model.run({"x": x}),
        f"opdsl Model ({args.backend}), dsl.load_onnx of the export": lambda: loaded.run({"x": x}),
        "onnxruntime (1 thread), same ONNX model": lambda: sess.run(None, {"x": x}),
    }
    timings = {name: harness.measure(fn, repeat=args.repeat) for name, fn in cases.items()}
    ort_t = timings["onnxruntime (1 thread), same ONNX model"].best

    print("## Graph per-node overhead (issue 4)\n")
    print(f"Command: `python -m benchmarks.bench_graph --nodes {args.nodes} --size {args.size} "
          f"--backend {args.backend}{' --boost' if args.boost else ''}`\n")
    for line in harness.machine_info():
        print(f"- {line}")
    if boost:
        print(f"- priority: {boost}")
    print(f"\nA chain of {args.nodes} elementwise nodes (Tanh/Relu) on a 1x{args.size} f32 tensor.\n")
    print("| case | per run | per node | vs onnxruntime |")
    print("|---|---|---|---|")
    for name, t in timings.items():
        print(f"| {name} | {harness.fmt_seconds(t.best)} (median {harness.fmt_seconds(t.median)}) | "
              f"{t.best / args.nodes * 1e6:.2f} us | {t.best / ort_t:.2f}x |")
    per_node = timings[f"opdsl Model ({args.backend}), built with dsl.Graph"].best / args.nodes * 1e6
    print(f"\nTarget <= 5 us per node: {'met' if per_node <= 5 else 'missed'} ({per_node:.2f} us).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
