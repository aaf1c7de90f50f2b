"""How many teams (the launch ``grid``) a team kernel's items are spread over.

Every worker -- one (team, thread) pair, one call of the kernel's body -- pays a fixed start:
its geometry read from the arguments, its first item decoded with integer divisions, the
call itself.  On the AVX-512 Xeon that was ~190 ns (~1000 FMA slots) per worker: squeezenet's
16→128 1×1 on 27×27, 212 items of 16 input channels × 28 accumulators, ran in 65 µs on 212
workers and in 26 µs on 4 (benchmarks/RESULTS.md, issue 29, nineteenth session, slice f32net).
So workers should carry many items, yet the cores must get even shares: numba's parallel entry
hands each core a contiguous run of ⌈workers / cores⌉ workers, each worker ⌈items / workers⌉
items (``dsl.split``).  ``worker_grid`` picks the grid whose busiest core finishes first.  It is
numba's rule: PoCL hands work-groups to its threads as they free up, which many small teams
suit on a shared machine (the 1×1 kernel on few teams there: 0.34x to 1.56x the time), so
OpenCL launches keep their many teams.
"""
from __future__ import annotations

import functools

import dsl

# a worker's fixed start in FMA instructions' time (190 ns at ~2.6 GHz, two FMAs a cycle)
WORKER_START_FMAS = 1000


def worker_grid(items: int, item_fmas: int, team: int, backend: str = "numba", most: int = 64) -> int:
    """Teams for ``items`` work items of about ``item_fmas`` vector FMAs each, ``team`` threads a
    team, on ``backend``'s cores: the grid (1..``most``) whose busiest core has the least work,
    its workers' starts included; the smaller grid on ties."""
    return _best_grid(max(1, int(items)), max(1, int(item_fmas)), team,
                      max(1, dsl.target(backend).compute_units or 1), most)


def rows_per_core(rows: int, images: int, backend: str = "numba") -> int:
    """Rows of an image per work item so that each of ``backend``'s cores gets one item: an image
    is split into ⌈cores / images⌉ bands (one band an image where images cover the cores).  The
    stems' banding (ops/conv_stem.py, ops/conv_stem_pool.py ``stem_band``) starts from this."""
    cores = max(1, dsl.target(backend).compute_units or 1)
    return -(-rows // -(-cores // max(1, images)))


@functools.lru_cache(maxsize=4096)
def _best_grid(items: int, item_fmas: int, team: int, cores: int, most: int) -> int:
    """``worker_grid`` for known cores (memoized: a model launches the same shapes every run)."""
    best_cost, best = None, 1
    for grid in range(1, most + 1):
        workers = grid * team
        chunk = -(-items // workers)
        core_workers = -(-workers // cores)
        cost = min(items, core_workers * chunk) * item_fmas + core_workers * WORKER_START_FMAS
        if best_cost is None or cost < best_cost:
            best_cost, best = cost, grid
        if chunk == 1:  # more teams only add empty workers
            break
    return best
