"""Where a cold model compile spends its time: every numba entry point compiled, with its seconds
split into numba's front end (typing, lowering) and LLVM (optimization, machine code).

    rm -rf /tmp/cache-cp && OPDSL_CACHE_DIR=/tmp/cache-cp python -m benchmarks.compile_profile MODEL.onnx

LLVM's share is numba's ``llvm_lock`` timer of each compile (the time spent holding LLVM's
lock); the rest of ``compiler_lock`` is typing and lowering to LLVM IR.
"""
from __future__ import annotations

import argparse
import collections
import time

import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)

    import dsl
    from backends.numba import backend as nb
    rows = []
    phase = ["load"]
    original = nb._compile_entry

    def timed(dispatcher, sig, kernel, which):
        before = set(dispatcher.overloads)
        hits = sum(dispatcher.stats.cache_hits.values())
        t0 = time.perf_counter()
        original(dispatcher, sig, kernel, which)
        wall = time.perf_counter() - t0
        new = [k for k in dispatcher.overloads if k not in before]
        compiled = bool(new) and sum(dispatcher.stats.cache_hits.values()) == hits
        timers = dispatcher.overloads[new[0]].metadata.get("timers", {}) if compiled else {}
        rows.append((phase[0], kernel.name, which, _describe(kernel), wall, timers.get("llvm_lock", 0.0), compiled))

    nb._compile_entry = timed
    t0 = t_start = time.perf_counter()
    model = dsl.load_onnx(args.model)
    t_load = time.perf_counter() - t0
    phase[0] = "run"
    feeds = {name: np.random.default_rng(0).standard_normal([d or 1 for d in spec.shape]).astype(spec.dtype.np)
             for name, spec in model.inputs.items()}
    t0 = time.perf_counter()
    model.run(feeds)
    t_run = time.perf_counter() - t0
    print(f"load + plan {t_load:.1f} s, first run {t_run:.1f} s, total {t_load + t_run:.1f} s; "
          f"this process's CPU {time.process_time():.1f} s")
    compiled = [r for r in rows if r[6]]
    total = sum(r[4] for r in compiled)
    llvm = sum(r[5] for r in compiled)
    loaded = [r for r in rows if not r[6]]
    print(f"{len(loaded)} entry points loaded from the disk cache in {sum(r[4] for r in loaded):.1f} s")
    print(f"{len(compiled)} entry points compiled in this process, "
          f"{total:.1f} s: numba typing/lowering {total - llvm:.1f} s, LLVM {llvm:.1f} s")
    per_kernel = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in compiled:
        e = per_kernel[r[1]]
        e[0] += 1
        e[1] += r[4]
        e[2] += r[5]
    print("\n| kernel | entry points | seconds | typing+lowering | LLVM |\n|---|---:|---:|---:|---:|")
    for name, (n, s, l) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {s:.1f} | {s - l:.1f} | {l:.1f} |")
    _print_jobs(t_start)
    print("\n| phase | kernel | entry | specialization | seconds | typing+lowering | LLVM |\n"
          "|---|---|---|---|---:|---:|---:|")
    for r in sorted(compiled, key=lambda r: -r[4])[:args.top]:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.2f} | {r[4] - r[5]:.2f} | {r[5]:.2f} |")


def _print_jobs(t_start: float) -> None:
    """What the compile workers did, in start order, seconds since the load began."""
    try:
        from backends.numba import parallel_compile
    except ImportError:  # a checkout from before compile workers (measuring the old code)
        return
    jobs = sorted(parallel_compile.history, key=lambda j: j[3])
    if not jobs:
        return
    print("\n| worker job | entry points | status | start s | end s | seconds | CPU s |\n|---|---|---|---:|---:|---:|---:|")
    for kernel, entries, status, start, end, *cpu in jobs:  # CPU: absent in checkouts from before it was recorded
        print(f"| {kernel} | {', '.join(entries)} | {status} | {start - t_start:.1f} | {end - t_start:.1f} | "
              f"{end - start:.1f} | {cpu[0] if cpu else 0.0:.1f} |")
    print(f"compile workers' CPU: {sum(j[5] for j in jobs if len(j) > 5):.1f} s in {len(jobs)} jobs")


def _describe(kernel) -> str:
    """Dtypes/ranks of the tensor params and the compile-time constants of one specialization."""
    from dsl.lang import ir
    parts = []
    for p in kernel.params:
        if isinstance(p, ir.TensorParam):
            parts.append(f"{p.dtype}x{p.ndim}")
        elif isinstance(p, ir.ScalarParam) and p.const_value is not None:
            parts.append(f"{p.name}={p.const_value}")
    return " ".join(parts)


if __name__ == "__main__":
    main()
