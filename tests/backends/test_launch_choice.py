"""The numba launcher's choice between its serial and parallel entries for small launches
(backends/numba/entry_choice.py): a kernel with nested loops goes parallel when the work its loop
nest does for the launch's shapes and scalars (backends/numba/launch_work.py) pays for waking the
workers.  No timing anywhere: the same launch makes the same choice, whatever the machine's load;
results are the same on either entry."""
import json

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i32, i64

nb = pytest.importorskip("backends.numba.backend")
ec = pytest.importorskip("backends.numba.entry_choice")
lw = pytest.importorskip("backends.numba.launch_work")


@dsl.kernel(threads=4)
def polish(x: In[f32], y: Out[f32], rounds: i32):
    """A few sin rounds per element: much work on few elements."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        for _ in range(rounds):
            v = dsl.sin(v) + 0.5 * v
        y.flat[i] = v


def reference(x, rounds):
    v = x.astype(np.float32)
    for _ in range(rounds):
        v = (np.sin(v) + np.float32(0.5) * v).astype(np.float32)
    return v


def bound(x, y, rounds):
    """The launch bound, with a launcher that has not decided anything yet (and past its first
    launch, which may run serially while no parallel entry is compiled: tests/backends/test_first_call.py)."""
    launcher, values, grid = polish.prepare((x, y, rounds), {}, backend="numba")
    launcher._choice = ec.EntryChoice()
    launcher._serial_first = False
    return launcher, values, grid


def entries(monkeypatch, launcher):
    """The names of the compiled entries the launcher runs, in order."""
    seen = []
    real = launcher._run
    lazy = launcher._serial_when_ready

    def run(fn, *a):
        seen.append("launch_serial" if fn == lazy else fn.__name__)
        return real(fn, *a)
    monkeypatch.setattr(launcher, "_run", run)
    return seen


# --------------------------------------------------------------------------- the decision alone

def test_the_decision_is_a_pure_function_of_work_threads_and_workers():
    least = ec.min_parallel_work(2)
    assert least == pytest.approx(ec.MIN_SAVING_S / (ec.SECONDS_PER_OP * 0.5))
    for work in (0.0, least * 0.99, least * 1.01, least * 100):
        answers = {ec.parallel_pays(work, 8, 2) for _ in range(5)}
        assert answers == {work > least}
    assert not ec.parallel_pays(1e15, 1, 8)  # one thread: nothing to share
    assert not ec.parallel_pays(1e15, 8, 1)  # one core: nothing to share it with
    assert ec.min_parallel_work(1) == float("inf")
    # more cores save more of the same work: the threshold falls, never rises
    assert ec.min_parallel_work(8) < ec.min_parallel_work(2)
    assert ec.parallel_pays(least * 0.8, 8, 8) and not ec.parallel_pays(least * 0.8, 8, 2)


def test_a_decision_is_remembered_per_signature_and_the_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(ec, "MAX_KEYS", 4)
    choice = ec.EntryChoice()
    asked = []

    def work(w):
        return lambda: asked.append(w) or w
    big = ec.min_parallel_work(2) * 10
    assert choice.parallel("a", work(big), 8, 2) and choice.parallel("a", work(0.0), 8, 2)  # remembered
    assert not choice.parallel("b", work(0.0), 8, 2)
    assert asked == [big, 0.0]
    for k in range(10):
        choice.parallel(k, work(0.0), 8, 2)
    assert 0 < len(choice.decided) <= 4


# --------------------------------------------------------------------------- the work estimate

@dsl.kernel(threads=4)
def rows_of(x: In[f32, 2], y: Out[f32, 2]):
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        for j in range(n):
            y[r, j] = x[r, j] * 2.0


@dsl.kernel(threads=1)
def triangle(x: In[f32], y: Out[f32]):
    for i in range(x.size):
        acc = 0.0
        for j in range(i + 1):
            acc += x.flat[j]
        y.flat[i] = acc


@dsl.kernel(threads=2)
def by_data(x: In[f32], counts: In[i64], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        for j in range(counts.flat[i]):  # a bound read from a tensor: unknown before the launch
            y.flat[i] = x.flat[i] + 1.0


@dsl.kernel(threads=2)
def phased(x: In[f32], y: Out[f32], geom: dsl.Vec[i64, 2], phase: i32):
    """Phase 0 copies geom[0] rows; another phase does geom[1] passes over them, then returns early."""
    if phase == 0:
        for i in range(geom[0]):
            y.flat[i] = x.flat[i]
        return
    lo, hi = dsl.split(geom[0])
    for p in range(geom[1]):
        for i in range(lo, hi):
            y.flat[i] = y.flat[i] + x.flat[i]


@dsl.kernel(threads=2)
def stepping(x: In[f32], y: Out[f32], chunk: i64):
    lo, hi = dsl.split(x.size)
    i = lo
    while i < hi:
        for j in range(i, min(i + chunk, hi)):
            y.flat[j] = -x.flat[j]
        i += chunk


@dsl.kernel(threads=1)
def nested_whiles(x: In[f32], y: Out[f32], n: i64):
    i = 0
    while i < n:
        j = 0
        while j < n:
            y.flat[(i * n + j) % y.size] = x.flat[j % x.size]
            j += 1
        i += 1


def test_nested_while_loops_are_followed_within_a_budget():
    """n² iterations followed one by one would take minutes at n = 4096: past the budget, the default."""
    x = np.ones(8, np.float32)
    small = work_of(nested_whiles, x, np.empty_like(x), np.int64(10))
    assert small == pytest.approx(10 * 10 * 3, rel=0.5)
    big = work_of(nested_whiles, x, np.empty_like(x), np.int64(4096))  # returns (fast)
    assert 0 < big <= lw.WHILE_STEPS * lw.WHILE_STEPS * 4


def work_of(kernel, *args, grid=1):
    values, _ = kernel.bind(args, {})
    k = kernel.specialize(values)
    program = json.loads(json.dumps(lw.summarize(k)))  # what a warm-start record keeps
    shapes = {p.name: np.shape(v) for p, v in zip(k.params, values) if hasattr(v, "shape")}
    scalars = {p.name: (tuple(v.tolist()) if isinstance(v, np.ndarray) else v)
               for p, v in zip(k.params, values) if p.name in program["reads"]}
    return lw.estimate(program, shapes, scalars, grid, k.threads)


def test_work_follows_the_loop_nest_shapes_and_grid():
    x = np.ones((64, 32), np.float32)
    one = work_of(rows_of, x, np.empty_like(x))
    assert one > 64 * 32  # a load, a multiply and a store per element, and the loops
    assert work_of(rows_of, np.ones((128, 32), np.float32), np.empty((128, 32), np.float32)) == pytest.approx(2 * one, rel=0.02)
    assert work_of(rows_of, np.ones((64, 64), np.float32), np.empty((64, 64), np.float32)) == pytest.approx(2 * one, rel=0.05)
    assert work_of(rows_of, x, np.empty_like(x), grid=3) == pytest.approx(3 * one)  # every team splits all rows


def test_a_triangular_nest_is_averaged_and_data_bounds_count_a_default():
    n = 200
    tri = work_of(triangle, np.ones(n, np.float32), np.empty(n, np.float32))
    assert n * n / 2 * 0.9 < tri < n * n * 3  # ~n²/2 inner iterations, not n² nor n
    x = np.ones(100, np.float32)
    unknown = work_of(by_data, x, np.full(100, 10**6, np.int64), np.empty_like(x))
    assert unknown == work_of(by_data, x, np.zeros(100, np.int64), np.empty_like(x))  # values are not read
    assert 100 * lw.UNKNOWN_TRIPS <= unknown < 100 * lw.UNKNOWN_TRIPS * 10


def test_vec_arguments_branches_returns_and_while_loops_are_followed():
    x = np.ones(1000, np.float32)
    y = np.empty_like(x)
    copy = work_of(phased, x, y, np.array([1000, 50], np.int64), np.int32(0))
    passes = work_of(phased, x, y, np.array([1000, 50], np.int64), np.int32(1))
    # per iteration: the loop, a load, a store (and an add in the passes); phase 0 is not split,
    # so both threads copy everything, and it returns: the passes below it are not counted
    assert copy == 2 * 1000 * 3
    assert passes == pytest.approx(50 * 1000 * 5, rel=0.01)
    assert work_of(phased, x, y, np.array([500, 50], np.int64), np.int32(1)) == pytest.approx(passes / 2, rel=0.05)
    small, big = (work_of(stepping, x, y, np.int64(c)) for c in (10, 1000))
    assert 1000 <= small < 8000 and 1000 <= big < 8000  # the chunks add up to the elements either way


@dsl.kernel(threads=2)
def lanes_of(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size // 8)
    for i in range(lo, hi):
        y.vstore(i * 8, x.vload(i * 8, 8) * 2.0)


@dsl.kernel(threads=2)
def scalars_of(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size // 8)
    for i in range(lo, hi):
        for k in range(8):
            y.flat[i * 8 + k] = x.flat[i * 8 + k] * 2.0


def test_simd_values_count_their_lanes():
    """8 lanes at once are 8 operations' work: the same as the scalar loop over them (bar its loop)."""
    x = np.ones(800, np.float32)
    vec, scalar = work_of(lanes_of, x, np.empty_like(x)), work_of(scalars_of, x, np.empty_like(x))
    assert vec == 100 * (1 + 3 * 8)  # per vector: its loop, a load, a multiply and a store of 8 lanes
    assert scalar == 100 * (1 + 8 * (1 + 3))


# --------------------------------------------------------------------------- launches

@pytest.mark.parametrize("frozen", [False, True], ids=["values", "frozen"])
def test_small_launches_go_parallel_exactly_when_their_work_pays(monkeypatch, frozen):
    """Also with a plan's frozen values (backends/numba/frozen.py), which run the same entries."""
    monkeypatch.setattr(nb, "_WORKERS", [2])
    x = np.linspace(-2, 2, 1000, dtype=np.float32)
    y = np.empty_like(x)
    for rounds, want in ((1, "launch_serial"), (2000, "launch_parallel")):
        launcher, values, grid = bound(x, y, rounds)
        work = launcher.work(values, grid)
        assert (work > ec.min_parallel_work(2)) == (want == "launch_parallel")
        if frozen:
            values = launcher.freeze(values)
            assert type(values).__name__ == "Frozen"
        assert launcher.which(values, grid) == want  # what a compile batch compiles ahead
        seen = entries(monkeypatch, launcher)
        for _ in range(3):
            y.fill(np.nan)
            launcher(values, grid)
            np.testing.assert_allclose(y, reference(x, rounds), rtol=1e-4, atol=1e-5)
        assert seen == [want] * 3
        assert launcher.goes_parallel(grid, 2 * x.size, values) == (want == "launch_parallel")
        if frozen:  # a plan's launch keeps its decision: later runs do not weigh it again
            assert values.entry_choice == (grid, want == "launch_parallel")
        monkeypatch.undo()
        monkeypatch.setattr(nb, "_WORKERS", [2])


def test_one_core_keeps_every_small_launch_serial(monkeypatch):
    monkeypatch.setattr(nb, "_WORKERS", [1])
    x = np.linspace(-2, 2, 1000, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y, 2000)
    seen = entries(monkeypatch, launcher)
    launcher(values, grid)
    assert seen == ["launch_serial"]
    np.testing.assert_allclose(y, reference(x, 2000), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("workers,want", [(1, "launch_serial"), (2, "launch_parallel")])
def test_big_launches_go_parallel_only_with_a_second_core(monkeypatch, workers, want):
    """Past SERIAL_MAX_ELEMENTS a launch goes parallel without weighing, unless numba has one
    thread (NUMBA_NUM_THREADS=1, one core): the parallel entry would only add its own cost
    (~3 % of a BERT linear layer on one core, benchmarks/RESULTS.md issue 29)."""
    monkeypatch.setattr(nb, "_WORKERS", [workers])
    x = np.linspace(-2, 2, nb.SERIAL_MAX_ELEMENTS, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = bound(x, y, 1)
    frozen = launcher.freeze(values)
    assert launcher.goes_parallel(grid, 2 * x.size, values) == (want == "launch_parallel")
    assert launcher.which(values, grid) == want  # what a model's compile batch compiles ahead
    seen = entries(monkeypatch, launcher)
    for v in (values, frozen):
        y.fill(np.nan)
        launcher(v, grid)
        np.testing.assert_allclose(y, reference(x, 1), rtol=1e-4, atol=1e-5)
    assert seen == [want] * 2
    # a plan's flat run calls a one-loop kernel's serial machine code directly only where it stays serial
    neg, nvalues, ngrid = negate.prepare((x, y), {}, backend="numba")
    neg.run_serial(nvalues, ngrid)
    np.testing.assert_array_equal(y, -x)
    assert (neg.prepared_entry(neg.freeze(nvalues), ngrid) is None) == (want == "launch_parallel")


@dsl.kernel(threads=4)
def negate(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = -x.flat[i]


@pytest.mark.parametrize("kernel", [negate, triangle], ids=["one loop", "one thread"])
def test_launches_that_cannot_gain_stay_serial(monkeypatch, kernel):
    """One loop over the elements (little work each: not even weighed) or a single thread."""
    monkeypatch.setattr(ec, "MIN_SAVING_S", 0.0)  # any work at all would pay
    x = np.arange(8, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = kernel.prepare((x, y), {}, backend="numba")
    launcher._choice = ec.EntryChoice()
    assert launcher._weighed == (kernel is triangle)
    seen = entries(monkeypatch, launcher)
    launcher(values, grid)
    assert seen == ["launch_serial"] and not launcher.goes_parallel(grid, 16, values)
    np.testing.assert_array_equal(y, -x if kernel is negate else np.cumsum(x))


def test_the_choice_depends_on_shapes_not_only_on_element_counts(monkeypatch):
    """Two launches with as many elements but different loop nests (rows x columns) are weighed apart."""
    monkeypatch.setattr(nb, "_WORKERS", [2])
    launcher, values, grid = rows_of.prepare((np.ones((4, 8), np.float32), np.empty((4, 8), np.float32)), {},
                                             backend="numba")
    launcher._choice = ec.EntryChoice()
    seen = []
    monkeypatch.setattr(ec, "parallel_pays", lambda work, threads, workers: seen.append(work) or False)
    for shape in ((4, 8), (8, 4), (4, 8)):
        x = np.ones(shape, np.float32)
        y = np.empty_like(x)
        launcher(launcher._adapt([x, y]), 1)
        np.testing.assert_array_equal(y, 2 * x)
    assert len(seen) == 2  # (4, 8) weighed once, (8, 4) on its own


def test_a_warm_record_keeps_the_work_program(tmp_path, monkeypatch):
    """A warm launcher has no IR: it weighs launches with the program its record kept."""
    from backends.numba import warm
    x = np.ones(1000, np.float32)
    launcher, values, grid = bound(x, np.empty_like(x), 50)
    rec = json.loads(json.dumps(warm.record(launcher._request, launcher)))
    request, source, facts = warm.restore(rec, polish.fn, None)
    assert facts["work"] == json.loads(json.dumps(launcher._work))
    again = nb.NumbaLauncher(launcher._module, request, launcher.source_path, None, source, facts=facts)
    assert again.work(values, grid) == launcher.work(values, grid)
    rec["facts"]["work"]["version"] = "another"
    assert nb.BACKEND.warm_launcher(rec, polish.fn, None) is None  # another launch_work.py: compiled again


def test_only_launches_that_could_go_parallel_lose_the_one_hop_entry():
    """A one-thread team on a grid of 1 never weighs anything: its kernel's binder may call the
    serial entry directly (dsl/runtime/hop.py), nested loops or not."""
    x = np.arange(8, dtype=np.float32)
    y = np.empty_like(x)
    launcher, values, grid = triangle.prepare((x, y), {}, backend="numba")
    launcher(values, grid)  # compiled
    np.testing.assert_array_equal(y, np.cumsum(x))
    assert launcher._weighed and launcher.direct_entry(values, 1) is not None
    assert launcher.direct_entry(values, 2) is None  # two teams may go parallel: weighed per launch
