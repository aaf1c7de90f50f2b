"""backends/compile_batch.py: batches collect launchers and finish them on leaving the block
(not after an exception), nested batches join the outer one, and waiting shows a tqdm bar on a
terminal (a stand-in tqdm here: the package is optional)."""
import sys
import types

import pytest

from backends import compile_batch


class Item:
    def __init__(self, log, name, jobs=1):
        self.log, self.name, self.jobs = log, name, jobs

    def outstanding(self):
        return self.jobs

    def finish_compile(self):
        self.log.append(self.name)
        self.jobs = 0


def test_finishes_in_order_once_and_nested_batches_join():
    log = []
    with compile_batch.batch() as outer:
        a = Item(log, "a")
        outer.add(a)
        with compile_batch.batch() as inner:
            assert inner is outer and compile_batch.current() is outer
            inner.add(Item(log, "b"))
            inner.add(a)  # registered once
        assert log == []  # the inner block does not finish anything
    assert log == ["a", "b"] and compile_batch.current() is None


def test_no_finish_after_an_exception():
    log = []
    with pytest.raises(RuntimeError):
        with compile_batch.batch() as b:
            b.add(Item(log, "a"))
            raise RuntimeError("planning failed")
    assert log == [] and compile_batch.current() is None


def test_progress_bar_on_a_terminal(monkeypatch):
    bars = []

    class FakeBar:
        def __init__(self, total, desc, unit, delay, leave):
            self.total, self.desc, self.delay, self.done, self.closed = total, desc, delay, 0, False
            bars.append(self)

        def update(self, n):
            self.done += n

        def close(self):
            self.closed = True

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeBar))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with compile_batch.batch() as b:
        for name, jobs in (("a", 2), ("b", 1)):
            b.add(Item([], name, jobs))
    (bar,) = bars
    assert (bar.total, bar.done, bar.closed, bar.desc) == (3, 3, True, "compiling kernels")
    assert bar.delay == compile_batch.PROGRESS_AFTER_SECONDS
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with compile_batch.batch() as b:
        b.add(Item([], "c", 5))
    assert len(bars) == 1  # not a terminal: quiet
