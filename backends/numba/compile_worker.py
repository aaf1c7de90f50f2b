"""A compile worker process: ``python -m backends.numba.compile_worker`` (started by
backends/numba/parallel_compile.py).

It reads jobs from stdin and answers each on stdout (length-prefixed pickles): execute the
generated module the way the calling process does (backends/numba/backend.py), give its
dispatchers opdsl's private disk cache, compile the entry points asked for, in order (numba saves
the machine code) and answer ``("ok", seconds, CPU seconds)`` or ``("error", text)``.  Anything the compiled
code or numba prints goes to stderr, never into the answers.  EOF on stdin ends the process.
"""
from __future__ import annotations

import os
import sys
import time


def run_job(job: dict) -> tuple:
    from backends import cache
    from backends.numba import backend as nb
    from backends.numba import cache as machine_cache
    from backends.numba import link_once
    if os.environ.get("OPDSL_CACHE_DIR") != job["cache_dir"]:
        os.environ["OPDSL_CACHE_DIR"] = job["cache_dir"]
        cache.reset()
    stem, source = job["stem"], job["source"]
    start, cpu = time.perf_counter(), time.process_time()
    path = nb._save_source(stem, source)
    if path is None:
        return ("error", f"the disk cache is not usable in the compile worker: {cache.unusable_reason()}")
    try:
        mod = nb._exec_source(source, stem, path)
        try:
            machine_cache.attach(mod, path.parent, machine_cache.source_stamp(source), stem)
            for which, sig in job["entries"]:
                with cache.lock(nb.CACHE_TAG, f"{stem}.{which}"), link_once.compiling():
                    getattr(mod, which).compile(sig)
        finally:
            sys.modules.pop(nb._module_name(stem), None)  # keep a long-lived worker's memory flat
    except Exception as e:
        return ("error", f"{type(e).__name__}: {e}")
    return ("ok", time.perf_counter() - start, time.process_time() - cpu)


def warm_up() -> None:
    """What every process pays at its first compile (numba's typing and lowering registries, LLVM,
    the parallel back end), paid while the model is still planning: a tiny parallel function."""
    import importlib

    from numba import njit, prange, types

    importlib.import_module("backends.numba.backend")  # what every job uses

    @njit(parallel=True, cache=False)
    def tiny(x):
        for i in prange(x.size):
            x[i] += 1.0

    tiny.compile((types.Array(types.float64, 1, "C"),))  # compiled, never run: no thread pool here


def main() -> None:
    from backends.numba import parallel_compile
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # print() from anything below lands on stderr
    sys.stdout = sys.stderr
    warm_up()
    jobs = sys.stdin.buffer
    while True:
        job = parallel_compile.receive(jobs)
        if job is None:
            return
        parallel_compile.send(answers, run_job(job))


if __name__ == "__main__":
    main()
