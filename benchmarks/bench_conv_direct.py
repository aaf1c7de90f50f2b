"""conv_direct's register-tile configs on given 3×3 layers (squeezenet's expands on NCHWc16 input,
resnet50's on plain or NCHWc16), launched directly and alternated in one process: wall µs best /
median per config, the split over the cores (grid, items, items per thread).
Usage: PYTHONPATH=. python benchmarks/bench_conv_direct.py [reps] [layer-filter] [P,NV,TG[,V] ...]
(V: lanes per vector, default 16; 8 is the AVX2 tile's width)."""
import sys, time
import numpy as np
from ops import conv_direct as cd

SQUEEZE = [(16, 55, 64), (32, 27, 128), (48, 13, 192), (64, 13, 256)]
RESNET = [(64, 56, 64), (128, 28, 128), (256, 14, 256)]


def layer_args(c, h, m, blocked, rng):
    """x, w, b, y for a c×h×h -> m 3×3 pad-1 convolution (NCHWc16 arrays when ``blocked``)."""
    w = (rng.standard_normal((m, c, 3, 3)) * 0.1).astype(np.float32)
    w.setflags(write=False)
    b = rng.standard_normal(m).astype(np.float32)
    b.setflags(write=False)
    if blocked:
        x = rng.standard_normal((1, -(-c // 16), h, h, 16)).astype(np.float32)
        y = np.empty((1, -(-m // 16), h, h, 16), np.float32)
    else:
        x = rng.standard_normal((1, c, h, h)).astype(np.float32)
        y = np.empty((1, m, h, h), np.float32)
    return x, w, b, y


def run(cfg, x, w, b, y):
    cd.launch_conv_direct(cd.conv_direct, x, w, b, y, None, (1, 1), (1, 1), (1, 1), x.ndim == 5, "numba",
                          1, 0.0, 0.0, cfg)


def reference(x, w, b, blocked):
    """numpy conv + bias + relu, in x's layout."""
    if blocked:
        n, cb, h, wd, _ = x.shape
        xp = x.transpose(0, 1, 4, 2, 3).reshape(n, cb * 16, h, wd)[:, :w.shape[1]]
    else:
        xp = x
    n, c, h, wd = xp.shape
    pad = np.pad(xp, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.float64)
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("nchw,mc->nmhw", pad[:, :, kh:kh + h, kw:kw + wd], w[:, :, kh, kw])
    out = np.maximum(out + b[None, :, None, None], 0).astype(np.float32)
    if blocked:
        m = w.shape[0]
        out = out.reshape(n, m // 16, 16, h, wd).transpose(0, 1, 3, 4, 2)
    return out


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    which = sys.argv[2] if len(sys.argv) > 2 else "sq"
    cfgs = []
    for s in sys.argv[3:] or ["7,2,8"]:
        p, nv, tg, *v = map(int, s.split(","))
        cfgs.append(cd.DirectConfig(V=v[0] if v else 16, NV=nv, P=p, TG=tg))
    layers = []
    if "sq" in which:
        layers += [(l, True) for l in SQUEEZE]
    if "rb" in which:
        layers += [(l, True) for l in RESNET]
    if "rp" in which:
        layers += [(l, False) for l in RESNET]
    rng = np.random.default_rng(0)
    for (c, h, m), blocked in layers:
        x, w, b, y = layer_args(c, h, m, blocked, rng)
        ref = reference(x, w, b, blocked)
        t = {}
        for cfg in cfgs:
            run(cfg, x, w, b, y)
            err = np.abs(y - ref).max()
            assert err < 1e-3 * max(1, np.abs(ref).max()), (cfg, err)
            t[cfg] = []
        for r in range(reps):
            for cfg in (cfgs if r % 2 == 0 else cfgs[::-1]):
                t0 = time.perf_counter()
                for _ in range(3):
                    run(cfg, x, w, b, y)
                t[cfg].append((time.perf_counter() - t0) / 3)
        gfl = 2 * c * 9 * m * h * h / 1e9
        for cfg, v in t.items():
            ocg = cd.oc_groups(m, cfg.OCT, blocked)
            items = -(-(h * h) // (cfg.P * cfg.TG)) * ocg
            grid = cd.balanced_grid(items)
            print(f"{c:3d},{h:2d}->{m:3d} {'c16' if blocked else 'nchw'} V={cfg.V:2d} P={cfg.P:2d} NV={cfg.NV} TG={cfg.TG:2d}: "
                  f"items {items:4d} grid {grid:2d}  best {min(v)*1e6:7.1f} us  med {np.median(v)*1e6:7.1f} us  "
                  f"{gfl / min(v):6.1f} GF/s")


if __name__ == "__main__":
    main()
