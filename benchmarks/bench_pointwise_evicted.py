"""ResNet-50's 1×1 convolutions as the model runs them, against onnxruntime's Conv node under the
same conditions: before every call (untimed) ``--evict`` MB are written, so the layer's weights
and output lines come from L3 as they do after the rest of a model run, then x is read (the
previous layer just wrote it).  One thread a side, CPU time, the sides alternated in one process.

    NUMBA_NUM_THREADS=1 python -m benchmarks.bench_pointwise_evicted [--evict 64] [--rounds 30] [--only 1024]
        [--base OLD/ops/conv_pointwise.py]

opdsl's side is ops/conv_pointwise.py's bound launch (NCHWc16 x and y, bias, the residual where
the model adds one, written over it as the model's memory plan does, Relu), as
benchmarks/bench_pointwise.py binds it; ``--base`` adds another copy of the module as a third side.
onnxruntime's is a one-node model (Conv [+ Add] + Relu), which it runs as ReorderInput → NCHWc
Conv (bias, Sum and Relu fused, y over the Sum input) → ReorderOutput; only the Conv node's time
from its own profile counts, so neither side pays a layout conversion.  Its reorders have just
written x and the residual, so opdsl's side reads both (untimed) after the eviction.  Columns: best
(median) µs, and opdsl / onnxruntime of the bests and of the per-round ratios' median.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import backends.numba.backend as numba_backend  # noqa: E402
from benchmarks import bench_pointwise as bp  # noqa: E402
from dsl.runtime.kernel import inplace_launches  # noqa: E402
from ops import conv_pointwise as pw  # noqa: E402

# light_resnet50's 1×1 layers (ResNet-50 v1.5: the stride on the 3×3), NCHWc16 in and out:
# name: (C, H = W, M, stride, residual added before the Relu, how many the model has)
LAYERS = {
    "64>64 56": (64, 56, 64, 1, False, 1),
    "64>256 56 res": (64, 56, 256, 1, True, 3),
    "256>64 56": (256, 56, 64, 1, False, 2),
    "256>128 56": (256, 56, 128, 1, False, 1),
    "256>512 s2": (256, 56, 512, 2, False, 1),
    "512>128 28": (512, 28, 128, 1, False, 3),
    "128>512 28 res": (128, 28, 512, 1, True, 4),
    "512>256 28": (512, 28, 256, 1, False, 1),
    "512>1024 s2": (512, 28, 1024, 2, False, 1),
    "1024>256 14": (1024, 14, 256, 1, False, 5),
    "256>1024 14 res": (256, 14, 1024, 1, True, 6),
    "1024>512 14": (1024, 14, 512, 1, False, 1),
    "1024>2048 s2": (1024, 14, 2048, 2, False, 1),
    "2048>512 7": (2048, 7, 512, 1, False, 2),
    "512>2048 7 res": (512, 7, 2048, 1, True, 3),
}


def ort_conv(c: int, hw: int, m: int, s: int, res: bool, w: np.ndarray, b: np.ndarray):
    """An onnxruntime session of Conv [+ Add] + Relu on one thread, profiling on: (session, the
    profile-file prefix)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    o = (hw - 1) // s + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1], strides=[s, s])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])]
    if res:
        nodes.append(helper.make_node("Add", ["c", "z"], ["a"]))
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, m, o, o]))
    nodes.append(helper.make_node("Relu", ["a" if res else "c"], ["y"]))
    graph = helper.make_graph(nodes, "pw", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, o, o])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ort")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def plain(a: np.ndarray, channels: int) -> np.ndarray:
    """An NCHWc16 array (N, C/16, H, W, 16) as plain (N, channels, H, W)."""
    return np.ascontiguousarray(a.transpose(0, 1, 4, 2, 3).reshape(a.shape[0], -1, *a.shape[2:4])[:, :channels])


def conv_times(profile_file: str) -> list:
    """The Conv node's µs per run, in run order, from onnxruntime's profile (the Conv node with the
    most time, should its graph hold another)."""
    runs = {}
    for e in json.load(open(profile_file)):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["args"].get("op_name") == "Conv":
            runs.setdefault(e["name"], []).append(e["dur"])
    return max(runs.values(), key=sum)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evict", type=int, default=64, help="MB written before every call (0: hot)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--only", default="")
    ap.add_argument("--base", help="another copy of ops/conv_pointwise.py, a third side")
    a = ap.parse_args()
    numba_backend.SERIAL_MAX_ELEMENTS = 0
    bp.SERIAL = True
    mods = [("opdsl", pw)] + ([("base", bp.load_module(a.base, "pw_base"))] if a.base else [])
    junk = np.zeros(max(1, (a.evict << 20) // 4), np.float32)
    print(f"evict {a.evict} MB, {a.rounds} rounds; µs best (median)", flush=True)
    for name, (c, hw, m, s, res, count) in LAYERS.items():
        if a.only not in name:
            continue
        bp.RES = res
        args = bp.setup((c, hw, hw, m, s, True, True))
        xb, wt, b, y, ref, _, _, z = args
        x = plain(xb, c)
        feeds = {"x": x}
        sides = []
        for k, mod in mods:
            y[...] = 0
            fn = bp.bound(mod, args)
            fn()
            if bp.check(args) > 1e-3:
                raise SystemExit(f"{name} ({k}): differs from numpy by {bp.check(args)}")
            if res:  # y over the residual, as the model's memory plan writes it (one stream of lines)
                z_in = z.copy()
                with inplace_launches():
                    fn = bp.bound(mod, (xb, wt, b, z_in, ref, True, (s, s), z_in))
            sides.append((k, fn))
        if res:  # onnxruntime's residual: the plain form of the one opdsl adds
            feeds["z"] = plain(z, m)
        sess = ort_conv(c, hw, m, s, res, wt, b)
        got = sess.run(None, feeds)[0]
        err = float(np.abs(got - ref).max())
        if err > 1e-3:
            raise SystemExit(f"{name} (onnxruntime): differs from numpy by {err}")
        times = {k: [] for k, _ in sides}
        order = sides + [("ort", lambda: sess.run(None, feeds))]
        for r in range(a.rounds):
            for k, fn in (order if r % 2 == 0 else order[::-1]):
                junk[::16] += 1
                for a_read in (feeds.values() if k == "ort" else (xb, z)):
                    if a_read is not None:
                        a_read.sum()
                t0 = time.process_time()
                fn()
                if k != "ort":
                    times[k].append((time.process_time() - t0) * 1e6)
        ort_us = conv_times(sess.end_profiling())[-a.rounds:]
        line = f"{name:16s} x{count}"
        for k in times:
            ours = np.array(times[k])
            line += (f"  {k} {ours.min():7.1f} ({np.median(ours):7.1f}) /ort {ours.min() / min(ort_us):.3f} "
                     f"paired {np.median(ours / np.array(ort_us)):.3f}")
        print(f"{line}  ort {min(ort_us):7.1f} ({np.median(ort_us):7.1f})", flush=True)


if __name__ == "__main__":
    main()
