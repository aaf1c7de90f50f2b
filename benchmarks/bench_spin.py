"""Two-thread model runs against libgomp's spin count, without onnxruntime in the process (its
spinning pool would take the cores): one or two numba threads, back to back and with a pause
before each run (workers asleep, as after an idle spell).  The spin count is read when libgomp
loads, so each setting needs its own process:

    for s in 3000 300000 3000000; do GOMP_SPINCOUNT=$s python -m benchmarks.bench_spin bert; done

Timing script, not a test; results go to benchmarks/RESULTS.md by hand.
"""
from __future__ import annotations

import os
import sys
import time

import numba
import onnx

import dsl
from benchmarks import models


def main(name: str = "bert", runs: int = 20) -> None:
    path = str(models.bert_layer() if name == "bert" else models.light_model_path(name))
    feeds = models.random_feeds(onnx.load(path))
    model = dsl.load_onnx(path)
    model.run(feeds)
    rows = []
    for threads in (1, 2):
        numba.set_num_threads(threads)
        for pause in (0.0, 0.02):
            times = []
            for _ in range(runs):
                time.sleep(pause)
                t = time.perf_counter()
                model.run(feeds)
                times.append(time.perf_counter() - t)
            times.sort()
            rows.append(f"{threads} thread(s), pause {pause * 1e3:.0f} ms: best {times[0] * 1e3:.2f} "
                        f"median {times[runs // 2] * 1e3:.2f} ms")
    print(f"{name}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '-')}: " + " | ".join(rows))


if __name__ == "__main__":
    main(*(sys.argv[1:2] or ["bert"]))
