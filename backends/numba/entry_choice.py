"""Serial or parallel entry for a small numba launch, chosen by timing both.

backends/numba/backend.py runs launches below ``SERIAL_MAX_ELEMENTS`` on the serial entry:
waking the sleeping OpenMP workers (``OMP_WAIT_POLICY=PASSIVE``) costs more than a small
elementwise loop.  But element counts say nothing about work: squeezenet's 3x3 convolutions on
13x13 pixels (126K elements) take 285 us serial and 160 us parallel.  So for kernels that can
do much work per element (nested loops), each launch signature (grid, elements) goes through:

1. ``TIMING``: serial runs are timed; ``HEAVY_AFTER`` runs in a row slower than
   ``SERIAL_HEAVY_S`` (a fast one in between restarts the count: the OS preempting a tiny
   launch now and then proves nothing) lead to
2. ``TRYING``: ``TRIALS`` parallel runs are timed; the parallel entry is kept if its best run
   beats ``PARALLEL_GAIN`` times the best serial run, else the serial one.  On a machine
   whose other cores are busy the parallel runs are no faster, and the launch stays serial.
3. ``SERIAL`` or ``PARALLEL``: settled for ``RECHECK_AFTER`` launches, untimed.  Then the
   signature is forgotten and goes through 1-2 again: a choice made while a neighbour held the
   other core (trials no faster, so serial; or a busy serial run) does not stick for the life of
   the process.  A recheck costs ``HEAVY_AFTER + TRIALS`` timed runs, under 1 % of the launches.

Best times, not means: a run slowed by other processes does not decide.  Results are the same
on either entry (the team split does not depend on it).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

# Serial runs slower than this are worth a parallel trial.  The trials decide, so the threshold
# only sets how many launch signatures pay three timed runs: at 100 us squeezenet's 13x13 1x1
# convolutions (49-84 us serial, 2-core Xeon) never tried and its run took 4.2-4.4 ms; at 30 us
# they go parallel and it takes 3.9-4.1 ms (workers still spinning between launches wake in ~3 us).
SERIAL_HEAVY_S = 30e-6
HEAVY_AFTER = 3
TRIALS = 3
PARALLEL_GAIN = 0.8
MAX_KEYS = 256  # launch signatures remembered per launcher; beyond, start over rather than grow
RECHECK_AFTER = 1024  # settled launches of one signature before its choice is timed again

TIMING, TRYING, SERIAL, PARALLEL = range(4)


class EntryChoice:
    """Per launch signature (grid, elements): [phase, count, best serial s, best parallel s]."""

    __slots__ = ("states",)

    def __init__(self) -> None:
        self.states: Dict[Tuple[int, int], List] = {}

    def phase(self, key: Tuple[int, int]) -> int:
        """The phase of the launch about to run; counts settled launches (``RECHECK_AFTER``)."""
        st = self.states.get(key)
        if st is None:
            return TIMING
        if st[0] >= SERIAL:
            st[1] += 1
            if st[1] > RECHECK_AFTER:
                self.states.pop(key, None)  # time it again, from the start
                return TIMING
        return st[0]

    def settled(self, key: Tuple[int, int]) -> int:
        """The phase of ``key`` without counting a launch (tests, ``goes_parallel``)."""
        st = self.states.get(key)
        return TIMING if st is None else st[0]

    def serial_took(self, key: Tuple[int, int], seconds: float) -> None:
        st = self.states.get(key)
        if st is None:
            if seconds <= SERIAL_HEAVY_S:
                return  # the common case: a light launch, nothing to remember
            if len(self.states) >= MAX_KEYS:
                self.states.clear()
            st = self.states[key] = [TIMING, 0, seconds, float("inf")]
        if seconds <= SERIAL_HEAVY_S:
            st[1] = 0
            st[2] = min(st[2], seconds)
            return
        st[1] += 1
        st[2] = min(st[2], seconds)
        if st[1] >= HEAVY_AFTER:
            st[0], st[1] = TRYING, 0

    def parallel_took(self, key: Tuple[int, int], seconds: float) -> None:
        st = self.states.get(key)
        if st is None or st[0] != TRYING:  # forgotten (MAX_KEYS) or decided by another thread meanwhile
            return
        st[1] += 1
        st[3] = min(st[3], seconds)
        if st[1] >= TRIALS:
            st[0], st[1] = (PARALLEL if st[3] < PARALLEL_GAIN * st[2] else SERIAL), 0
