"""A compile batch: the kernels one piece of work (planning a model) needs, compiled together.

Inside ``with compile_batch.batch():`` a backend may hand out launchers whose machine code is
still being built elsewhere (the numba backend's worker processes,
backends/numba/parallel_compile.py) and register them here; ``Kernel.prepare`` tells each
launcher the arguments and grid of the launch it was prepared for, so the entry point that
launch will use can start compiling too.  Leaving the block waits for all of them, so the
launchers are ready when the first run starts.  A launcher used before that simply waits for
its own code.  Batches do not nest: an inner ``batch()`` joins the outer one.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
from typing import Any, Iterator, List, Optional

_CURRENT: contextvars.ContextVar = contextvars.ContextVar("opdsl_compile_batch", default=None)

# A progress bar appears when finishing takes longer than this (and stderr is a terminal).
PROGRESS_AFTER_SECONDS = 1.0


class Batch:
    """Launchers with outstanding work; each has ``finish_compile()`` and ``outstanding() -> int``."""

    def __init__(self):
        self.items: List[Any] = []
        self.state: dict = {}  # per-backend bookkeeping (e.g. jobs not yet sent to workers)
        self._ids: set = set()
        self.finishers: List[Any] = []  # callables run first at finish (e.g. send queued jobs)

    def add(self, item) -> None:
        if id(item) not in self._ids:
            self._ids.add(id(item))
            self.items.append(item)

    def note(self, launcher, values, grid) -> None:
        """A launch was prepared with these bound values and grid: its entry point may start compiling."""
        note = getattr(launcher, "note_launch", None)
        if note is not None:
            note(values, grid, self)

    def finish(self) -> None:
        """Wait for every registered launcher (in registration order), with a progress bar when slow.
        A compile that failed elsewhere is done again here, so its CompileError is raised as usual."""
        for f in self.finishers:
            f(self)
        items, self.items, self._ids = self.items, [], set()
        bar = _progress(sum(i.outstanding() for i in items))
        try:
            for item in items:
                n = item.outstanding()
                item.finish_compile()
                if bar is not None:
                    bar.update(n)
        finally:
            if bar is not None:
                bar.close()


def current() -> Optional[Batch]:
    """The batch of this thread/context, or None."""
    return _CURRENT.get()


@contextlib.contextmanager
def batch() -> Iterator[Batch]:
    """Collect the compiles started inside; wait for them on a normal exit (see the module doc)."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    b = Batch()
    token = _CURRENT.set(b)
    try:
        yield b
    finally:
        _CURRENT.reset(token)
    b.finish()  # not on an exception: the launchers stay usable and finish when first called


def _progress(total: int):
    """A tqdm bar over ``total`` compiles, shown after PROGRESS_AFTER_SECONDS on a terminal; None
    when tqdm is missing, stderr is not a terminal, or there is nothing to wait for."""
    if total < 2 or not getattr(sys.stderr, "isatty", lambda: False)():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="compiling kernels", unit="kernel", delay=PROGRESS_AFTER_SECONDS, leave=False)
