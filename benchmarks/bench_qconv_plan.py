"""One packed QLinearConv node per model, from its declared launch plan vs run() at every call (replay=False):
alternating rounds, best of each.  PYTHONPATH=. python benchmarks/bench_qconv_plan.py"""
import time, sys, numpy as np, dsl, ops
rng = np.random.default_rng(0)
def graph(c, m, hw, k, stride, pad):
    g = dsl.Graph("q"); x = g.input("x", (1, c, hw, hw), dsl.u8)
    cst = lambda n, v: g.constant(n, np.asarray(v))
    g.output(ops.QLinearConv(x, cst("sx", np.float32(0.02)), cst("zx", np.uint8(100)), cst("w", rng.integers(-60, 60, (m, c, k, k)).astype(np.int8)),
        cst("sw", rng.uniform(0.01, 0.03, m).astype(np.float32)), cst("zw", np.zeros(m, np.int8)), cst("sy", np.float32(0.5)),
        cst("zy", np.uint8(128)), cst("b", rng.integers(-500, 500, m).astype(np.int32)), strides=[stride]*2, pads=[pad]*4), "y")
    return g
for shape in [(16, 64, 13, 1, 1, 0), (64, 64, 13, 3, 1, 1), (64, 64, 55, 3, 1, 1), (3, 64, 224, 3, 2, 0), (128, 128, 28, 3, 2, 1)]:
    g = graph(*shape)
    planned = g.compile(backend="numba")
    ops.QLinearConv.replay = False
    unplanned = g.compile(backend="numba")
    ops.QLinearConv.replay = True
    xv = {"x": rng.integers(0, 256, (1, shape[0], shape[2], shape[2])).astype(np.uint8)}
    assert np.array_equal(planned.run(xv)["y"], unplanned.run(xv)["y"])
    best = [1e9, 1e9]
    reps = 200 if shape[2] <= 13 else 20
    for _ in range(5):
        for i, m in enumerate((planned, unplanned)):
            t = time.perf_counter()
            for _ in range(reps):
                m.run(xv)
            best[i] = min(best[i], (time.perf_counter() - t) / reps)
    print(f"{shape}: planned {best[0]*1e6:.0f} us, run() {best[1]*1e6:.0f} us, saved {(best[1]-best[0])*1e6:.0f} us/call, ratio run()/planned {best[1]/best[0]:.2f}", flush=True)
