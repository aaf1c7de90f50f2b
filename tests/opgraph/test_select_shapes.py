"""``select`` sees run-time shapes: a graph with ``None`` dims chooses a node's kernel again for
each distinct input shape (dims filled in) and caches that choice, on every backend."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32

WIDE = 64  # rows at least this long are summed by the whole team, shorter ones one row per thread


@dsl.kernel
def row_sum_by_rows(x: In[f32, 2], y: Out[f32, 1]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        acc = f32(0)
        for c in range(x.shape[1]):
            acc += x[r, c]
        y[r] = acc


@dsl.kernel
def row_sum_by_team(x: In[f32, 2], y: Out[f32, 1]):
    part = dsl.scratch((4,), f32)
    t = dsl.thread_id()
    for r in range(x.shape[0]):
        lo, hi = dsl.split(x.shape[1])
        acc = f32(0)
        for c in range(lo, hi):
            acc += x[r, c]
        part[t] = acc
        dsl.sync()
        if t == 0:
            y[r] = part[0] + part[1] + part[2] + part[3]
        dsl.sync()


SEEN = []  # the input shapes select() was asked about, in order


@dsl.op("RowSumByShape", domain="test.select")
class RowSum(dsl.Op):
    kernels = {"rows": row_sum_by_rows, "team": row_sum_by_team}

    def infer(self, x):
        if x.ndim != 2 or x.dtype != dsl.f32:
            raise dsl.VerifyError(f"x must be a 2-D f32 tensor, got {x}")
        return dsl.TensorSpec((x.shape[0],), x.dtype)

    def select(self, x, *, backend):
        SEEN.append(tuple(x.shape))
        return "team" if x.shape[1] is not None and x.shape[1] >= WIDE else "rows"


def _graph():
    g = dsl.Graph("rowsum")
    x = g.input("x", (None, None), dsl.f32)
    g.output(RowSum()(x), "y")
    return g


def test_select_runs_again_per_runtime_shape_and_caches_it(backend):
    rng = np.random.default_rng(0)
    SEEN.clear()
    model = _graph().compile(backend=backend)
    assert SEEN == [(None, None)]  # at compile time the dims are unknown: the default choice
    short = rng.standard_normal((5, 8)).astype(np.float32)
    wide = rng.standard_normal((3, 100)).astype(np.float32)
    for x in (short, wide, short, wide):
        np.testing.assert_allclose(model.run({"x": x})["y"], x.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert SEEN == [(None, None), (5, 8), (3, 100)]  # once per distinct shape
    assert model.selected({"x": short}) == {next(iter(model.selected({"x": short}))): "rows"}
    assert list(model.selected({"x": wide}).values()) == ["team"]
    assert len(SEEN) == 3  # selected() reads the same cache


def test_static_shapes_select_once_at_compile_time(backend):
    SEEN.clear()
    g = dsl.Graph("static")
    x = g.input("x", (7, 100), dsl.f32)
    g.output(RowSum()(x), "y")
    model = g.compile(backend=backend)
    x = np.ones((7, 100), np.float32)
    for _ in range(2):
        np.testing.assert_allclose(model.run({"x": x})["y"], np.full(7, 100, np.float32))
    assert list(model.selected({"x": x}).values()) == ["team"]
    assert SEEN == [(7, 100)]


def test_select_error_at_run_time_names_the_node():
    class Broken(RowSum):
        def select(self, x, *, backend):
            return "team" if x.shape[1] is None else "nope"

    g = dsl.Graph("broken")
    x = g.input("x", (2, None), dsl.f32)
    g.output(Broken()(x), "y")
    model = g.compile(backend="interpreter")
    with pytest.raises(dsl.VerifyError, match=r"node '.*': .*select\(\) returned 'nope', which is not in "
                                              r"kernels \(known: 'rows', 'team'\)"):
        model.run({"x": np.ones((2, 3), np.float32)})


def test_profile_and_listing_name_the_per_shape_choice():
    model = _graph().compile(backend="interpreter")
    assert "impl=rows (chosen again per run-time shape)" in str(model)
    rows = {r.impl for r in model.profile({"x": np.ones((2, 80), np.float32)}, repeat=1, warmup=0).rows}
    assert rows == {"team"}


def test_dynamic_batch_fully_connected_gets_the_packed_gemm_when_large():
    """The built-in ops benefit: FullyConnected picks the packed GEMM on numba once the run-time
    product is large enough, and the SIMD matrix-vector kernel for batches under 8 rows."""
    import ops
    rng = np.random.default_rng(1)
    g = dsl.Graph("fc")
    x = g.input("x", (None, 256), dsl.f32)
    w = g.constant("w", rng.standard_normal((512, 256)).astype(np.float32))
    g.output(ops.FullyConnected(x, w), "y")
    model = g.compile(backend="numba")
    for rows, impl in ((2, "gemv"), (64, "packed")):
        xv = rng.standard_normal((rows, 256)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": xv})["y"], xv @ g.constants["w"].T, rtol=1e-4, atol=1e-3)
        assert list(model.selected({"x": xv}).values()) == [impl]
