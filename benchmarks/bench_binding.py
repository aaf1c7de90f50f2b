"""Model.run with and without its feed/output copies (dsl/opgraph/binding.py), against onnxruntime,
interleaved in one process so that the machine's load hits all three alike.

    python -m benchmarks.bench_binding [--repeat 60]

Each case is a one-node ONNX model loaded twice: ``copy`` has ``model.rebind = False`` (the feeds
copied into the plan's buffers, the output copied out), ``in place`` is the default.  The
difference is the copies' cost; the kernels are the same compiled code.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import op_models  # noqa: E402
from benchmarks.harness import fmt_seconds, load_text, measure_interleaved  # noqa: E402

CONVS = ((64, 56, 64, 1, 1), (64, 56, 256, 1, 1), (1024, 14, 256, 1, 1), (64, 56, 64, 3, 1))
MATMULS = (((12, 128, 64), (12, 64, 128)), ((12, 128, 128), (12, 128, 64)),
           ((4, 128, 64), (4, 64, 128)), ((4, 128, 128), (4, 128, 64)))


def cases():
    rng = np.random.default_rng(0)
    for c_in, hw, c_out, k, s in CONVS:
        w = (rng.standard_normal((c_out, c_in, k, k)) / np.sqrt(c_in * k * k)).astype(np.float32)
        b = rng.standard_normal(c_out).astype(np.float32)
        yield (f"conv {c_in},{hw}->{c_out} {k}x{k}", op_models.conv_model(c_in, hw, c_out, k, s, w, b),
               {"x": rng.standard_normal((1, c_in, hw, hw)).astype(np.float32)})
    for a, b in MATMULS:
        yield (f"matmul {'x'.join(map(str, a))} @ {'x'.join(map(str, b))}", op_models.matmul_model(a, b),
               {"a": rng.standard_normal(a).astype(np.float32), "b": rng.standard_normal(b).astype(np.float32)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=60)
    args = ap.parse_args(argv)
    import dsl
    print(f"load before: {load_text()}")
    print("| case | copy best (median) | in place best (median) | onnxruntime best (median) | copy / ORT | in place / ORT |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, model, feeds in cases():
        copying, bound = dsl.load_onnx(model), dsl.load_onnx(model)
        copying.rebind = False
        want = copying.run(feeds)["y"]
        np.testing.assert_array_equal(bound.run(feeds)["y"], want)
        ort = op_models.ort_runner(model, feeds)
        t = measure_interleaved({"copy": lambda: copying.run(feeds), "bound": lambda: bound.run(feeds),
                                 "ort": ort}, repeat=args.repeat)
        c, b, o = t["copy"], t["bound"], t["ort"]
        print(f"| {name} | {fmt_seconds(c.best)} ({fmt_seconds(c.median)}) | {fmt_seconds(b.best)} "
              f"({fmt_seconds(b.median)}) | {fmt_seconds(o.best)} ({fmt_seconds(o.median)}) | "
              f"{c.best / o.best:.2f}x | {b.best / o.best:.2f}x |", flush=True)
    print(f"load after: {load_text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
