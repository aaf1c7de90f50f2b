"""Batch scoring on Dask (issue 12): the BERT encoder layer of benchmarks/models.py over 256
inputs, in one process and on a Dask LocalCluster of 2 worker processes, plus the cost Dask
adds per chunk.

* single process: ``model.run`` on the whole batch, and on the same chunks in a loop;
* Dask's local threaded scheduler (``model.run_dask(...).compute()`` without a cluster);
* a LocalCluster of 2 worker processes, 1 Dask thread each, for several chunk sizes;
* per-chunk overhead: a one-node model (Relu on 16 floats a row) split into many chunks on
  the cluster, whose time is almost all Dask (scheduling, moving rows and results).

The model is loaded with a symbolic batch dimension (the layer's Reshapes copy dims with 0),
so one compiled model scores any chunk.  Every result is checked against the single-process
output.  Each Dask case is timed after a warm-up compute that sends the model to the workers
and compiles it there (nothing compiled travels: docs/dask.md).

    python -m benchmarks.bench_dask [--inputs 256] [--seq 128] [--chunks 8,32,128] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from benchmarks import harness


def bert_model(seq: int, backend: str):
    """The BERT layer with a symbolic batch dimension, compiled for ``backend``."""
    import dsl
    from benchmarks.models import bert_layer_model
    proto = bert_layer_model(batch=1, seq=seq)
    for v in (proto.graph.input[0], proto.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    return dsl.load_onnx(proto, backend=backend)


def relu_model(backend: str):
    import dsl
    import ops
    g = dsl.Graph("relu")
    x = g.input("x", ("batch", 16), dsl.f32)
    g.output(ops.Relu(x), "y")
    return g.compile(backend=backend)


def best_of(fn, repeat: int) -> float:
    """Seconds of the fastest of ``repeat`` single calls (after untimed warm-up calls)."""
    return harness.measure(fn, repeat=repeat, warmup=1, min_sample_s=0.0).best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--chunks", default="8,32,128", help="rows per chunk, comma-separated")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="numba")
    ap.add_argument("--overhead-chunks", type=int, default=256)
    args = ap.parse_args(argv)
    chunk_sizes = [int(c) for c in args.chunks.split(",")]

    import dask
    import dask.array as da
    from dask.distributed import Client, LocalCluster

    print("\n".join(f"- {line}" for line in harness.machine_info()))
    model = bert_model(args.seq, args.backend)
    x = np.random.default_rng(0).standard_normal((args.inputs, args.seq, 256)).astype(np.float32)
    want = model.run({"x": x})["y"]
    n = args.inputs
    rows = []

    def row(case, seconds, chunks, note=""):
        rows.append((case, seconds, chunks, note))
        print(f"{case}: {seconds * 1e3:.1f} ms, {n / seconds:.0f} inputs/s {note}", flush=True)

    row("single process, one run of the whole batch", best_of(lambda: model.run({"x": x}), args.repeat), 1)
    single_chunked = {}
    for c in chunk_sizes:
        def loop(c=c):
            return [model.run({"x": x[i:i + c]}) for i in range(0, n, c)]
        single_chunked[c] = best_of(loop, args.repeat)
        row(f"single process, a loop over chunks of {c}", single_chunked[c], -(-n // c))

    for c in chunk_sizes:
        lazy = model.run_dask({"x": x}, chunks=c)["y"]
        with dask.config.set(scheduler="threads"):
            np.testing.assert_allclose(lazy.compute(), want, rtol=1e-4, atol=1e-5)
            row(f"Dask local threaded scheduler, chunks of {c}", best_of(lazy.compute, args.repeat), -(-n // c))

    overhead = []
    for threads_env in ("1", None):
        env = {"NUMBA_NUM_THREADS": threads_env} if threads_env else {}
        label = "1 numba thread per worker" if threads_env else f"{harness.usable_cores()} numba threads per worker"
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                          env=env) as cluster, Client(cluster) as client:
            for c in chunk_sizes:
                lazy = model.run_dask({"x": x}, chunks=c)["y"]
                np.testing.assert_allclose(lazy.compute(), want, rtol=1e-4, atol=1e-5)  # also the warm-up
                t = best_of(lazy.compute, args.repeat)
                extra = (t - single_chunked[c]) / -(-n // c)
                row(f"LocalCluster 2 processes ({label}), numpy feed, chunks of {c}", t, -(-n // c),
                    f"(rows shipped from this process each time; vs the single-process loop: {extra * 1e3:+.2f} ms "
                    "per chunk)")
                on_workers = client.persist(da.from_array(x, chunks=(c, -1, -1)))  # data already on the cluster
                lazy = model.run_dask({"x": on_workers})["y"]
                np.testing.assert_allclose(lazy.compute(), want, rtol=1e-4, atol=1e-5)
                t = best_of(lazy.compute, args.repeat)
                extra = (t - single_chunked[c]) / -(-n // c)
                row(f"LocalCluster 2 processes ({label}), feed on the workers, chunks of {c}", t, -(-n // c),
                    f"(vs the single-process loop: {extra * 1e3:+.2f} ms per chunk)")
                del on_workers
            tiny = relu_model(args.backend)
            xs = np.random.default_rng(1).standard_normal((args.overhead_chunks * 64, 16)).astype(np.float32)
            lazy = tiny.run_dask({"x": xs}, chunks=64)["y"]
            np.testing.assert_array_equal(lazy.compute(), np.maximum(xs, 0))
            t = best_of(lazy.compute, args.repeat)
            overhead.append((label, t / args.overhead_chunks, client.dashboard_link))
            print(f"per-chunk overhead ({label}): {t / args.overhead_chunks * 1e3:.2f} ms", flush=True)

    print("\n| case | chunks | best | inputs/s | note |\n|---|---:|---:|---:|---|")
    for case, seconds, chunks, note in rows:
        print(f"| {case} | {chunks} | {seconds * 1e3:.0f} ms | {n / seconds:.0f} | {note.strip('()')} |")
    print("\n| per-chunk overhead (one-node model, 64 rows a chunk, "
          f"{args.overhead_chunks} chunks on the cluster) | ms per chunk |\n|---|---:|")
    for label, per_chunk, _ in overhead:
        print(f"| {label} | {per_chunk * 1e3:.2f} |")
    print(f"\nload average at the end (1/5/15 min): {harness.load_text()}; pid {os.getpid()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
