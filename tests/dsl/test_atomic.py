"""``old = dsl.atomic_add(t, i, v)``: the fetch-and-add form on every backend.

A team that takes work from a shared counter (whoever runs claims the next chunk) must see
every chunk exactly once, and every thread must get a distinct old value; the errors name
the file, line and column of the call."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, Zeroed, f16, f32, i32, i64

T = dsl.TypeVar("T")
SRC = inspect.getsource(inspect.getmodule(inspect.currentframe())).splitlines()


@dsl.kernel(threads=4, grid=3)
def claim_chunks(counter: Zeroed[i64], hits: InOut[i32], owner: Out[i32], n: i64, chunk: i64):
    start = dsl.atomic_add(counter, 0, chunk)
    while start < n:
        for i in range(start, min(start + chunk, n)):
            dsl.atomic_add(hits, i, 1)
            owner[i] = i32(dsl.tile_id() * dsl.num_threads() + dsl.thread_id())
        start = dsl.atomic_add(counter, 0, chunk)


@pytest.mark.parametrize("n,chunk", [(100, 3), (7, 16), (0, 4)])
def test_counter_hands_out_every_chunk_exactly_once(backend, n, chunk):
    counter = np.full(1, 12345, np.int64)            # Zeroed: what is there before does not matter
    for _ in range(2):                               # nor what the previous launch left
        hits = np.zeros(max(n, 1), np.int32)
        owner = np.full(max(n, 1), -1, np.int32)
        claim_chunks(counter, hits, owner, n, chunk, backend=backend)
        assert hits[:n].tolist() == [1] * n          # every index once: none lost, none twice
        assert ((owner[:n] >= 0) & (owner[:n] < 12)).all()
        # each of the 12 threads overshoots exactly once: the claim that saw start >= n
        n_claims = -(-n // chunk)
        assert counter[0] == (n_claims + 12) * chunk


def test_zeroed_counter_restarts_in_replayed_launches(backend):
    """A model's plan binds a launch once and replays it (numba: frozen values straight to the
    entry point); the Zeroed counter must still start at zero each time, serial or parallel."""
    assert repr(Zeroed[i64, 1]) == "Zeroed[dsl.i64, 1]" and Zeroed[i64].writable
    n, chunk = 50, 4
    counter, hits, owner = np.full(1, 7, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int32)
    launcher, values, grid = claim_chunks.prepare((counter, hits, owner, n, chunk), {}, backend=backend, grid=3)
    runs = [lambda: launcher(values, grid)]
    if backend == "numba":
        frozen = launcher.freeze(values)
        runs += [lambda: launcher(frozen, grid), lambda: launcher.run_serial(values, grid),
                 lambda: launcher.run_parallel(values, grid)]
    for k, run in enumerate(runs * 2):
        run()
        assert hits.tolist() == [k + 1] * n, k       # each replay covers every index once more
        assert counter[0] == (-(-n // chunk) + 12) * chunk


@dsl.kernel(threads=4, grid=2)
def fetch_olds(t: InOut[T], got: Out[T, 2], step: T):
    row = dsl.tile_id() * dsl.num_threads() + dsl.thread_id()
    for k in range(8):
        got[row, k] = dsl.atomic_add(t, 0, step)


@pytest.mark.parametrize("dtype,start,step", [(np.int32, -5, 3), (np.int64, 2**40, -7), (np.uint32, 2**32 - 20, 1),
                                              (np.float32, 0.0, 0.5), (np.float64, 1.0, 0.25)])
def test_returns_the_value_before_each_add(backend, dtype, start, step):
    t = np.array([start], dtype)
    got = np.zeros((8, 8), dtype)
    fetch_olds(t, got, dtype(step), backend=backend)
    # the 64 adds happened in some order: the old values are the 64 partial sums, each once
    partial = np.array([start], dtype) + np.arange(65, dtype=dtype) * np.array([step], dtype)  # arrays wrap
    np.testing.assert_array_equal(np.sort(got.ravel()), np.sort(partial[:64]))
    assert t[0] == partial[64]  # u32 wrapped past 2**32 like numpy


@dsl.kernel(threads=4, grid=2)
def scratch_slots(out: Out[i32, 2], halves: Out[f32, 2]):
    slot = dsl.scratch((1,), i32)
    total = dsl.scratch((1,), f32)
    if dsl.thread_id() == 0:
        slot[0] = 0
        total[0] = 0.0
    dsl.sync()
    mine = dsl.atomic_add(slot, 0, 1)
    out[dsl.tile_id(), mine] = i32(dsl.thread_id() + 1)
    halves[dsl.tile_id(), dsl.thread_id()] = dsl.atomic_add(total, 0, 0.5)  # OpenCL: CAS on __local


@pytest.mark.parametrize("debug", [False, True])
def test_scratch_counter_is_shared_by_the_team(backend, debug):
    kernel = dsl.kernel(threads=4, grid=2, debug=True)(scratch_slots.fn) if debug else scratch_slots
    out, halves = np.zeros((2, 4), np.int32), np.zeros((2, 4), np.float32)
    kernel(out, halves, backend=backend)
    assert [sorted(r) for r in out.tolist()] == [[1, 2, 3, 4]] * 2
    assert [sorted(r) for r in halves.tolist()] == [[0.0, 0.5, 1.0, 1.5]] * 2


@dsl.kernel(threads=4, debug=True)
def fetch_at(y: InOut[i32], at: i64, old: Out[i32]):
    old[dsl.thread_id()] = dsl.atomic_add(y, at, i32(2))


def test_fetch_index_is_checked_in_debug_mode(backend):
    y, old = np.zeros(4, np.int32), np.zeros(4, np.int32)
    with pytest.raises((IndexError, dsl.LaunchError)) as info:
        fetch_at(y, 4, old, backend=backend)
    assert "'y'" in str(info.value) and "index 4" in str(info.value)
    assert y.tolist() == [0, 0, 0, 0]                # nothing added anywhere (element 0 included)
    fetch_at(y, 1, old, backend=backend)
    assert y.tolist() == [0, 8, 0, 0] and sorted(old.tolist()) == [0, 2, 4, 6]


# --------------------------------------------------------------------------- errors

@dsl.kernel
def fetch_in_expression(t: InOut[i32], y: Out[i32]):
    y[0] = dsl.atomic_add(t, 0, 1) + 1  # E-expr


@dsl.kernel
def fetch_f16(t: InOut[f16], y: Out[f32]):
    y[0] = dsl.atomic_add(t, 0, 1.0)  # E-f16


@dsl.kernel
def fetch_local(y: Out[i32]):
    acc = dsl.local((4,), i32)
    y[0] = dsl.atomic_add(acc, 0, 1)  # E-local


@dsl.kernel
def fetch_input(t: In[i32], y: Out[i32]):
    y[0] = dsl.atomic_add(t, 0, 1)  # E-input


@dsl.kernel
def fetch_simd(t: InOut[f32], x: In[f32], y: Out[f32]):
    y[0] = dsl.atomic_add(t, 0, x.vload(0, 16))  # E-simd


@dsl.kernel(threads=4)
def sync_after_fetch(t: InOut[i32], y: Out[i32]):
    c = dsl.atomic_add(t, 0, 1)
    if c < 2:  # E-cond
        dsl.sync()  # E-sync
    y[0] = c


def _line(marker: str) -> int:
    return next(k + 1 for k, text in enumerate(SRC) if text.rstrip().endswith(marker))


@pytest.mark.parametrize("kernel,marker,col_text,words", [
    (fetch_in_expression, "# E-expr", "dsl.atomic_add", ["returns the old value only as the whole right side",
                                                          "old = dsl.atomic_add(t, i, v)"]),
    (fetch_f16, "# E-f16", "dsl.atomic_add", ["'t' of f16", "i32, i64, u32, u64, f32 and f64"]),
    (fetch_local, "# E-local", "dsl.atomic_add", ["'acc', a dsl.local array", "acc[i] += v"]),
    (fetch_input, "# E-input", "t,", ["writing to 't'", "only Out and InOut"]),
    (fetch_simd, "# E-simd", "dsl.atomic_add", ["adds a scalar", "dsl.reduce_add(v)"]),
    (sync_after_fetch, "# E-sync", "dsl.sync", ["sync()", f"line {_line('# E-cond')}"]),
])
def test_errors_name_file_line_and_column(kernel, marker, col_text, words):
    with pytest.raises(dsl.CompileError) as info:
        kernel.source("ir")
    text = str(info.value)
    line = _line(marker)
    col = SRC[line - 1].index(col_text) + 1
    assert f"test_atomic.py:{line}:{col}: error:" in text, text
    for w in words:
        assert w in text, (w, text)
