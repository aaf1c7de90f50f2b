"""The team model: thread_id, sync, scratch, split, grid, atomics — on every backend."""
import threading

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, f64, i32, i64

TEAM_SIZES = (1, 2, 3, 4, 8)


def _neighbour_kernel(threads):
    @dsl.kernel(threads=threads)
    def neighbour(out: Out[i64]):
        buf = dsl.scratch((8,), i64)
        t = dsl.thread_id()
        n = dsl.num_threads()
        buf[t] = (t + 1) * 100           # every thread writes its own slot ...
        dsl.sync()                        # ... and after the barrier reads its neighbour's
        out[t] = buf[(t + 1) % n]
    return neighbour


NEIGHBOUR = {t: _neighbour_kernel(t) for t in TEAM_SIZES}


@pytest.mark.parametrize("threads", TEAM_SIZES)
def test_thread_reads_what_next_thread_wrote_before_barrier(backend, threads):
    out = np.zeros(threads, np.int64)
    NEIGHBOUR[threads](out, backend=backend)
    np.testing.assert_array_equal(out, [((t + 1) % threads + 1) * 100 for t in range(threads)])


def _tree_kernel(threads):
    @dsl.kernel(threads=threads)
    def tree_sum(x: In[f32], out: Out[f64]):
        part = dsl.scratch((8,), f64)
        t = dsl.thread_id()
        acc = f64(0)
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            acc += x.flat[i]
        part[t] = acc
        dsl.sync()
        # pairwise tree reduction; the barrier sits inside a uniform while loop
        n = dsl.num_threads()
        stride = 1
        while stride < n:
            if t % (2 * stride) == 0 and t + stride < n:
                part[t] += part[t + stride]
            dsl.sync()
            stride *= 2
        if t == 0:
            out[0] = part[0]
    return tree_sum


TREE = {t: _tree_kernel(t) for t in TEAM_SIZES}


@pytest.mark.parametrize("threads", TEAM_SIZES)
def test_tree_reduction_with_sync_in_while_loop(backend, threads):
    x = np.random.default_rng(threads).standard_normal(1001).astype(np.float32)
    out = np.zeros(1)
    TREE[threads](x, out, backend=backend)
    np.testing.assert_allclose(out[0], x.astype(np.float64).sum(), rtol=1e-10)


@dsl.kernel(threads=4)
def row_softmax(x: In[f32, 2], y: Out[f32, 2]):
    """One team per row: max and sum reduced through scratch with barriers in a for loop."""
    red = dsl.scratch((4,), f32)
    row = dsl.tile_id()
    t = dsl.thread_id()
    cols = x.shape[1]
    lo, hi = dsl.split(cols)
    m = -3.0e38
    for j in range(lo, hi):
        m = max(m, x[row, j])
    red[t] = m
    dsl.sync()
    for k in range(dsl.num_threads()):
        m = max(m, red[k])
    dsl.sync()
    s = f32(0)
    for j in range(lo, hi):
        e = dsl.exp(x[row, j] - m)
        y[row, j] = e
        s += e
    red[t] = s
    dsl.sync()
    total = f32(0)
    for k in range(dsl.num_threads()):
        total += red[k]
    for j in range(lo, hi):
        y[row, j] = y[row, j] / total


def test_grid_of_teams_row_softmax(backend):
    x = np.random.default_rng(3).standard_normal((6, 37)).astype(np.float32)
    y = np.zeros_like(x)
    row_softmax(x, y, grid=x.shape[0], backend=backend)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@dsl.kernel(threads=3, grid=lambda a: a["out"].shape[0])
def ids(out: Out[i32, 2]):
    out[dsl.tile_id(), dsl.thread_id()] = dsl.tile_id() * 10 + dsl.thread_id() + dsl.num_tiles() * 1000


def test_grid_callable_and_subscript_launch(backend):
    out = np.zeros((5, 3), np.int32)
    ids(out, backend=backend)
    ref = np.arange(5)[:, None] * 10 + np.arange(3)[None, :] + 5000
    np.testing.assert_array_equal(out, ref)
    out2 = np.zeros((2, 3), np.int32)
    ids[2](out2, backend=backend)
    np.testing.assert_array_equal(out2, ref[:2] - 3000)


@dsl.kernel(threads=4, grid=3)
def histogram(x: In[i32], bins: Out[i32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        if dsl.tile_id() == i % dsl.num_tiles():
            dsl.atomic_add(bins, x.flat[i], 1)


@dsl.kernel(threads=4, grid=2)
def float_total(x: In[f32], total: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        if dsl.tile_id() == 0:
            dsl.atomic_add(total, 0, x.flat[i])


def test_atomic_add_across_threads_and_tiles(backend):
    x = np.random.default_rng(5).integers(0, 10, 5000).astype(np.int32)
    bins = np.zeros(10, np.int32)
    histogram(x, bins, backend=backend)
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=10))
    v = np.full(4096, 0.25, np.float32)  # exactly representable partial sums
    total = np.zeros(1, np.float32)
    float_total(v, total, backend=backend)
    assert total[0] == 1024.0


@dsl.kernel(threads=4)
def split_aligned(out: Out[i64, 2], n: i64, align: i64):
    lo, hi = dsl.split(n, align)
    out[dsl.thread_id(), 0] = lo
    out[dsl.thread_id(), 1] = hi


@pytest.mark.parametrize("n,align", [(10, 1), (3, 1), (0, 1), (37, 8)])
def test_split_shares(backend, n, align):
    out = np.zeros((4, 2), np.int64)
    split_aligned(out, n, align, backend=backend)
    covered = [i for lo, hi in out for i in range(lo, hi)]
    assert covered == list(range(n))
    chunk = -(-(-(-n // 4)) // align) * align
    assert all(lo % max(chunk, 1) == 0 or lo == n for lo, _ in out)


@dsl.kernel
def scale(x: In[f32], y: Out[f32], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * a


def test_concurrent_launches_from_python_threads(backend):
    xs = [np.random.default_rng(k).standard_normal(2000).astype(np.float32) for k in range(4)]
    ys = [np.zeros_like(x) for x in xs]
    errors = []

    def work(k):
        try:
            for _ in range(5):
                scale(xs[k], ys[k], float(k + 1), backend=backend)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for k in range(4):
        np.testing.assert_array_equal(ys[k], xs[k] * np.float32(k + 1))


def test_zero_grid_runs_nothing(backend):
    out = np.full((1, 3), -1, np.int32)
    ids[0](out, backend=backend)
    assert (out == -1).all()


@dsl.kernel(threads=3, grid=2)
def grid_shares(out: Out[i64, 3], n: i64):
    lo, hi = dsl.split(n, grid=True)
    out[dsl.tile_id(), dsl.thread_id(), 0] = lo
    out[dsl.tile_id(), dsl.thread_id(), 1] = hi


@pytest.mark.parametrize("n", [0, 5, 6, 100])
def test_split_across_the_grid(backend, n):
    out = np.zeros((2, 3, 2), np.int64)
    grid_shares(out, n, backend=backend)
    covered = [i for lo, hi in out.reshape(6, 2) for i in range(lo, hi)]
    assert covered == list(range(n))  # in worker order tile * threads + thread
