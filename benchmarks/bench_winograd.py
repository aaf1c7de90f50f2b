"""Winograd F(2×2, 3×3) (ops/conv_winograd.py) against the direct kernel (ops/conv_direct.py) on
squeezenet's and ResNet-50's 3×3 layers (NCHWc16 in and out, pad 1, bias + Relu), launched directly
and alternated in one process: CPU ms best of ``reps`` per side, the ratio winograd / direct, and
Winograd's max error relative to the largest output of a float64 reference.
Usage: NUMBA_NUM_THREADS=1 PYTHONPATH=. python -m benchmarks.bench_winograd [reps] [sq|rn|sqrn] [evict]
(evict: 64 MB streamed before every call, untimed, so weights and scratch come from L3 or memory as
in a model)
(OPDSL_CPU=zen4 / avx2 compile for another CPU kind, docs/ops.md).

``models [reps] [name] [new-first]``: light_squeezenet and light_resnet50 built twice in one process, with
Conv.select's Winograd rule off (old: the direct kernel) and on (new), old and new alternated, then
new and onnxruntime alternated, CPU time best and median of each (outputs checked within 1e-3 of onnxruntime's)."""
import sys
import time

import numpy as np

from ops import conv_direct as cd
from ops import conv_winograd as cw
from ops.gemm_packed import ACT_RELU

SQUEEZE = [(16, 55, 64), (32, 27, 128), (48, 13, 192), (64, 13, 256)]
RESNET = [(64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512)]


def layer_args(c, h, m, rng):
    """x, w, b, y (NCHWc16 x and y) for a c×h×h -> m 3×3 pad-1 convolution."""
    w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    for a in (w, b):
        a.setflags(write=False)
    x = np.zeros((1, -(-c // 16), h, h, 16), np.float32)
    x.reshape(1, -1, h * h, 16)[:] = rng.random((1, x.shape[1], h * h, 16))  # post-Relu-like
    if c % 16:
        x[:, -1, :, :, c % 16:] = 0
    y = np.empty((1, -(-m // 16), h, h, 16), np.float32)
    return x, w, b, y


def reference(x, w, b):
    """float64 conv + bias + Relu, NCHWc16."""
    n, cb, h, wd, _ = x.shape
    m, c = w.shape[:2]
    xp = np.pad(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * 16, h, wd)[:, :c].astype(np.float64),
                ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, m, h, wd))
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("nchw,mc->nmhw", xp[:, :, kh:kh + h, kw:kw + wd], w[:, :, kh, kw].astype(np.float64))
    out = np.maximum(out + b[None, :, None, None], 0)
    return out.reshape(n, m // 16, 16, h, wd).transpose(0, 1, 3, 4, 2)


def direct(x, w, b, y):
    cd.launch_conv_direct(cd.conv_direct, x, w, b, y, None, (1, 1), (1, 1), (1, 1), True, "numba", ACT_RELU, 0.0, 0.0)


def winograd(x, w, b, y):
    cw.launch_conv_winograd(cw.conv_winograd, x, w, b, y, None, (1, 1), "numba", ACT_RELU, 0.0, 0.0)


def build(path, winograd: bool):
    """The model planned and run once with Conv.select's Winograd rule on or off (the plan cache
    off: its key does not see the rule, so a second load would read the first one's plan); how
    many of its nodes run Winograd."""
    import os

    import onnx

    import dsl
    from benchmarks import models
    from ops import nn
    os.environ["OPDSL_PLAN_CACHE"] = "0"
    feeds = models.random_feeds(onnx.load(path))
    rule = nn.Conv._winograd
    if not winograd:
        nn.Conv._winograd = lambda self, x, w, backend: False
    try:
        model = dsl.load_onnx(path, backend="numba")
        out = model.run(feeds)
        chosen = sum(k == "winograd" for k in model.selected(feeds).values())
    finally:
        nn.Conv._winograd = rule
    return model, feeds, out, chosen


def run_models(reps: int, only: str, new_first: bool = False) -> None:
    import onnxruntime as ort
    from benchmarks import models
    for name in ("squeezenet", "resnet50"):
        if only and only != name:
            continue
        path = str(models.light_model_path(name))
        if new_first:  # the second model built may sit differently in memory: both orders are run
            new, feeds, out_new, n_wino = build(path, True)
            old, _, out_old, n_old = build(path, False)
        else:
            old, feeds, out_old, n_old = build(path, False)
            new, _, out_new, n_wino = build(path, True)
        assert n_old == 0 < n_wino, (n_old, n_wino)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = 1, 1  # one core a side, as bench_f32_cpu
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)
        for got in (out_old, out_new):
            got = list(got.values()) if isinstance(got, dict) else list(got)
            err = max(float(np.abs(g - r).max() / max(1e-30, np.abs(r).max())) for g, r in zip(got, ref))
            assert err < 1e-3, (name, err)
        sides = {"old": lambda: old.run(feeds), "new": lambda: new.run(feeds), "ort": lambda: sess.run(None, feeds)}
        # old and new strictly alternated (each always runs right after the other), then new and
        # onnxruntime the same way: a side never runs twice in a row (warm from itself) and never
        # more often than the other right after onnxruntime (whose arena evicts the caches)
        phases = []
        for pair in (("old", "new"), ("new", "ort")):
            times = {k: [] for k in pair}
            for r in range(reps):
                for k in pair:
                    t0 = time.process_time()
                    sides[k]()
                    times[k].append(time.process_time() - t0)
            phases.append(({k: min(v) * 1e3 for k, v in times.items()},
                           {k: float(np.median(v)) * 1e3 for k, v in times.items()}))
        (b, med), (b2, med2) = phases
        print(f"light_{name} ({'new' if new_first else 'old'} built first; {n_wino} Winograd convs, new output rel err "
              f"{err:.1e}): old best {b['old']:.2f} med {med['old']:.2f} ms | new best {b['new']:.2f} med "
              f"{med['new']:.2f} ms | new/old best {b['new'] / b['old']:.3f} med {med['new'] / med['old']:.3f} || "
              f"new best {b2['new']:.2f} med {med2['new']:.2f} ms | ort best {b2['ort']:.2f} med {med2['ort']:.2f} ms | "
              f"new/ort best {b2['new'] / b2['ort']:.3f} med {med2['new'] / med2['ort']:.3f}", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "models":
        run_models(int(sys.argv[2]) if len(sys.argv) > 2 else 25, sys.argv[3] if len(sys.argv) > 3 else "",
                   "new-first" in sys.argv[4:])
        return
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    which = sys.argv[2] if len(sys.argv) > 2 else "sqrn"
    layers = (SQUEEZE if "sq" in which else []) + (RESNET if "rn" in which else [])
    junk = np.ones(16 << 20, np.float32) if "evict" in sys.argv[3:] else None
    rng = np.random.default_rng(0)
    print(f"{'layer':>16} {'direct ms':>10} {'winograd ms':>12} {'wino/direct':>12} {'max rel err':>12}")
    for c, h, m in layers:
        x, w, b, y = layer_args(c, h, m, rng)
        ref = reference(x, w, b)
        sides = {"direct": direct, "winograd": winograd}
        best = {}
        for name, f in sides.items():
            f(x, w, b, y)
            best[name] = float("inf")
        winograd(x, w, b, y)
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        for r in range(reps):
            for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                if junk is not None:
                    junk += 1
                t0 = time.process_time()
                sides[name](x, w, b, y)
                best[name] = min(best[name], time.process_time() - t0)
        print(f"{f'{c}->{m} @{h}':>16} {best['direct'] * 1e3:10.3f} {best['winograd'] * 1e3:12.3f} "
              f"{best['winograd'] / best['direct']:12.3f} {err:12.2e}", flush=True)


if __name__ == "__main__":
    main()
