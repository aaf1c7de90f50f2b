"""Serial or parallel entry for a small numba launch, decided from the work it does.

backends/numba/backend.py runs launches below ``SERIAL_MAX_ELEMENTS`` on the serial entry:
waking the sleeping OpenMP workers (``OMP_WAIT_POLICY=PASSIVE``) costs more than a small
elementwise loop.  But element counts say nothing about work: squeezenet's 3x3 convolutions on
13x13 pixels (126K elements) take 285 us serial and 160 us parallel.  So for kernels that can
do much work per element (nested loops) the choice weighs the launch's work instead.

It used to be timed: serial runs, then parallel trials, the faster kept.  A launch timed while a
neighbour held the other core stayed serial (or a busy serial run went parallel), and five fresh
processes put light_squeezenet at 1.3x to 3.3x onnxruntime.  Now it is a pure function of static
facts: the operations the launch executes (backends/numba/launch_work.py: the kernel's loop nest
evaluated for the launch's shapes and scalars), its thread count and the cores the target has.
The same launch makes the same choice in every process, loaded machine or not.

Parallel pays when the time the other cores save clearly exceeds what waking them costs:
``work * SECONDS_PER_OP * (1 - 1/workers) > MIN_SAVING_S``.  Both constants were calibrated once
on a 2-core AMD EPYC (Zen 3, AVX2) with ``python -m benchmarks.bench_entry_choice --calibrate``
(benchmarks/RESULTS.md, "The entry choice from static facts"), which times every small
nested-loop launch of light_squeezenet, light_resnet50 and the BERT layer on both entries.  A
counted operation took 0.024-0.044 ns on one core in the compute-bound launches (convolutions,
LayerNorm: the ones where going parallel matters) and 0.07-0.34 ns in small memory-bound ones (a
zero border, a strided copy), which the constant therefore underestimates: they stay serial,
where two cores would gain little.  Waking PASSIVE workers costs 7-12 us after a gap under 1 ms
("Launch and wake overhead in whole models"); with the per-operation time known to within 2-3x,
a launch goes parallel when the saving it is estimated to make is ~3 wakes: 2M operations on 2
cores (squeezenet's 1x1 convolutions on 13x13 pixels, 2.8-6.9M, do; BERT's LayerNorm, 0.56M, not).
"""
from __future__ import annotations

from typing import Callable, Dict, Hashable

# Seconds one counted operation takes on one core (median), and the least estimated saving worth
# waking the sleeping workers of a parallel launch (see the module docstring: calibrated there).
SECONDS_PER_OP = 0.03e-9
MIN_SAVING_S = 30e-6
MAX_KEYS = 256  # launch signatures remembered per launcher; beyond, start over rather than grow


def parallel_pays(work: float, threads: int, workers: int) -> bool:
    """Whether a launch of ``work`` operations over ``threads`` team threads runs faster on the
    parallel entry, on a target with ``workers`` cores for numba's threads.  Pure: no timing."""
    if threads < 2 or workers < 2:
        return False
    return work * SECONDS_PER_OP * (1.0 - 1.0 / min(threads, workers)) > MIN_SAVING_S


def min_parallel_work(workers: int) -> float:
    """The least work (operations) a launch of many threads needs to go parallel on ``workers`` cores."""
    return float("inf") if workers < 2 else MIN_SAVING_S / (SECONDS_PER_OP * (1.0 - 1.0 / workers))


class EntryChoice:
    """The decision per launch signature, remembered (estimating the work walks the kernel once)."""

    __slots__ = ("decided",)

    def __init__(self) -> None:
        self.decided: Dict[Hashable, bool] = {}

    def parallel(self, key: Hashable, work: Callable[[], float], threads: int, workers: int) -> bool:
        """Whether the launch ``key`` names goes parallel; ``work()`` is asked the first time only."""
        got = self.decided.get(key)
        if got is None:
            if len(self.decided) >= MAX_KEYS:
                self.decided.clear()
            got = self.decided[key] = parallel_pays(work(), threads, workers)
        return got
