"""A plan's steps as one flat list of prepared calls, so ``Model.run`` pays per node only the
machine code's own call.

A plan (model.py ``_build_plan``) already binds every launch once: its values are checked
(dsl/runtime/arg_check.py) and frozen for the compiled types, and its buffers never change.
Calling the launcher for each step still cost ~1 us a node of Python work (the entry choice,
the Ctrl-C arming and check, the hidden arguments) that a 100-node chain of small elementwise
nodes pays 100 times a run; onnxruntime pays ~0.3 us (issue 28).  Here each step a launcher can
run straight (``Launcher.prepared_entry``: frozen values, small enough for the serial entry,
nothing else to do) becomes ``(machine code, its complete argument tuple)``, made once; the
other steps (``op.run`` calls, tiles, launchers without such an entry) stay as they are.  A run
arms Ctrl-C once, calls the list, and checks the counter once at the end.  A run that reads a
feed in place or writes a fresh output (binding.py) prepares again only the steps holding them.

The Ctrl-C value a launch compares against (``start``) is the last argument of each prepared
tuple.  The counter only moves when SIGINT arrives, so the tuples are rebuilt only on the first
run after one.  An interrupted node's loops stop at their next poll, the nodes after it stop at
their first (the counter differs from ``start`` for them too), and CPython raises
KeyboardInterrupt between two calls; the check at the end covers a handler that does not raise.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from backends import interrupt
from backends.base import Launcher

_READ = memoryview(interrupt.COUNTER)


class FlatRun:
    """One plan instance's steps, prepared.  ``prepared``: how many steps run as machine code
    straight; ``run()``: every step once, in order."""

    __slots__ = ("prepared", "_steps", "_heads", "_calls", "_start")

    def __init__(self, steps: Sequence):
        self._steps = list(steps)
        # per step: (entry point, its values, the hidden arguments but the Ctrl-C start) or None
        # (called as it is)
        self._heads: List[Optional[tuple]] = [_head(fn, args) for fn, args in self._steps]
        self.prepared = sum(h is not None for h in self._heads)
        self._calls: list = []
        self._start: Optional[int] = None

    def run(self, rebound: Sequence = ()) -> None:
        """Every step once.  ``rebound``: [(step index, step)] replacing this run's steps that hold
        a caller's feed or a fresh output (binding.py); each is prepared again, the rest reused.
        A rebound launch keeps its step's entry point: binding.py rebinds only arrays of the very
        dtype, shape and layout, so the frozen types, and the entry they chose, are the same
        (asking the launcher again hashed numba types: ~5-10 us a rebound step per run)."""
        start = interrupt.arm()
        if start != self._start:
            self._calls = [step if head is None else (head[0], head[1] + head[2] + (start,))
                           for head, step in zip(self._heads, self._steps)]
            self._start = start
        calls = self._calls
        if rebound:
            calls = list(calls)
            heads, steps = self._heads, self._steps
            for k, (fn, args) in rebound:
                head = heads[k]
                if head is not None and fn is steps[k][0] and args[1] == steps[k][1][1]:
                    calls[k] = (head[0], (*args[0], *head[2], start))
                    continue
                head = _head(fn, args)
                calls[k] = (fn, args) if head is None else (head[0], head[1] + head[2] + (start,))
        for fn, args in calls:
            fn(*args)
        if _READ[0] != start:
            raise KeyboardInterrupt("opdsl launch interrupted")


def _head(fn, args) -> Optional[tuple]:
    """A launcher step ``(launcher, (values, grid))`` as (entry point, values, its hidden
    arguments but ``start``), or None when it is not a launcher step or the launcher offers no
    such entry."""
    if not isinstance(fn, Launcher) or type(args) is not tuple or len(args) != 2:
        return None
    values, grid = args
    entry = fn.prepared_entry(values, grid)
    if entry is None:
        return None
    return entry.fn, tuple(values), (entry.grid, entry.counter)
