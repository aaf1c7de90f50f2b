"""opdsl and onnxruntime on one model, calls alternating in one process (``python
benchmarks/alternate_runs.py model.onnx [repeat]``): on a shared machine both see the same
load, so the ratio of their best (and median) times is fairer than two separate runs'."""
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

import dsl
from benchmarks import models


def main(path: str, repeat: int = 40) -> None:
    proto = onnx.load(path)
    feeds = models.random_feeds(proto)
    model = dsl.load_onnx(path, backend="numba")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    model.run(feeds), sess.run(None, feeds)  # compiles, warms
    ours, theirs = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        model.run(feeds)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        sess.run(None, feeds)
        theirs.append(time.perf_counter() - t)
    a, b = np.array(ours) * 1e3, np.array(theirs) * 1e3
    print(f"opdsl best {a.min():.2f} median {np.median(a):.2f} ms | onnxruntime best {b.min():.2f} "
          f"median {np.median(b):.2f} ms | ratio best {a.min() / b.min():.2f}x median {np.median(a) / np.median(b):.2f}x")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
