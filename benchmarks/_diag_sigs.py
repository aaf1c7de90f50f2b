import sys, numpy as np, dsl
from backends.numba import backend as nb
m = dsl.load_onnx(sys.argv[1])
feeds = {n: np.random.default_rng(0).standard_normal([d or 1 for d in s.shape]).astype(s.dtype.np) for n, s in m.inputs.items()}
m.run(feeds)
for stem, (mod, path) in nb._modules.items():
    for name in ("launch_serial", "launch_parallel", "launch_team", "launch_serial_nd", "launch_parallel_nd"):
        d = getattr(mod, name, None)
        if d is not None and len(d.signatures) > 1:
            print(stem, name)
            for s in d.signatures:
                print("   ", s)
