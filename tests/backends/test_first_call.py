"""What a new kernel's first call compiles on numba (backends/numba/backend.py, issue 28), and the
generated code that keeps cold compiles short (min/max as intrinsics, inline loop counts)."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i8, i64

nb = pytest.importorskip("backends.numba.backend")


@dsl.kernel
def shift(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + 1.0


@dsl.kernel
def row_sums(x: In[f32, 2], y: Out[f32]):
    rows, n = x.shape
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        s = f32(0)
        for j in range(n):
            s += x[r, j]
        y[r] = s


def _launcher(kernel):
    (launcher,) = [v for (b, _), v in kernel._variants.items() if b == "numba"]
    return launcher


def _fresh(kernel):
    return dsl.kernel(threads=kernel.threads)(kernel.fn)


def test_a_light_kernels_first_big_launch_runs_serially_and_the_next_compiles_parallel(monkeypatch):
    monkeypatch.setattr(nb.machine_cache, "cached", lambda fn, sig: False)  # as with an empty disk cache
    k = _fresh(shift)
    x = np.linspace(-1, 1, nb.SERIAL_MAX_ELEMENTS, dtype=np.float32)  # x and y: twice the serial limit
    y = np.zeros_like(x)
    k(x, y, backend="numba")
    np.testing.assert_array_equal(y, x + 1)
    launcher = _launcher(k)
    assert "launch_parallel" not in launcher._ready  # nothing but the serial entry compiled
    y.fill(0)
    k(x, y, backend="numba")
    np.testing.assert_array_equal(y, x + 1)
    assert "launch_parallel" in launcher._ready


@dsl.kernel
def double(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * 2.0


def test_launches_while_a_model_is_built_stay_serial_and_compile_no_parallel_entry(monkeypatch):
    """Inside a compile batch (a model being built: folded constants, packed weights) every light
    big launch is one-shot and runs serially; after it, big launches follow the usual rule."""
    from backends import compile_batch
    monkeypatch.setattr(nb.machine_cache, "cached", lambda fn, sig: False)  # as with an empty disk cache
    k = double
    x = np.linspace(-1, 1, nb.SERIAL_MAX_ELEMENTS, dtype=np.float32)
    with compile_batch.batch():
        for _ in range(3):
            y = np.zeros_like(x)
            k(x, y, backend="numba")
            np.testing.assert_array_equal(y, x * 2)
        assert "launch_parallel" not in _launcher(k)._ready
    for _ in range(2):  # then the usual rule: the first big launch serial, the next one parallel
        y = np.zeros_like(x)
        k(x, y, backend="numba")
        np.testing.assert_array_equal(y, x * 2)
    assert "launch_parallel" in _launcher(k)._ready


def test_graph_compile_folds_and_plans_inside_one_compile_batch(monkeypatch):
    from backends import compile_batch
    from dsl.opgraph import passes
    seen = []
    fold = passes.infer_and_fold

    def spy(*args, **kwargs):
        seen.append(compile_batch.current())
        return fold(*args, **kwargs)

    monkeypatch.setattr(passes, "infer_and_fold", spy)
    import ops
    g = dsl.Graph("folded")
    x = g.input("x", (4,), dsl.f32)
    g.output(ops.Add(x, g.constant("one", np.ones(4, np.float32))), "y")
    model = g.compile(backend="interpreter")
    assert seen and seen[0] is not None and compile_batch.current() is None
    np.testing.assert_array_equal(model.run({"x": np.arange(4, dtype=np.float32)})["y"], np.arange(4) + 1.0)


def test_a_very_big_first_launch_compiles_the_parallel_entry(monkeypatch):
    monkeypatch.setattr(nb, "SERIAL_FIRST_MAX_ELEMENTS", nb.SERIAL_MAX_ELEMENTS * 2)
    k = _fresh(shift)
    x = np.ones(nb.SERIAL_MAX_ELEMENTS, np.float32)
    y = np.zeros_like(x)
    k(x, y, backend="numba")
    np.testing.assert_array_equal(y, 2.0)
    assert "launch_parallel" in _launcher(k)._ready


def test_a_nested_loop_kernels_light_first_big_launch_runs_serially(monkeypatch):
    """Its estimated work (512 rows of 512: ~1M operations) is far below SERIAL_FIRST_MAX_WORK."""
    monkeypatch.setattr(nb.machine_cache, "cached", lambda fn, sig: False)  # as with an empty disk cache
    k = _fresh(row_sums)
    x = np.ones((512, 512), np.float32)
    y = np.zeros(512, np.float32)
    k(x, y, backend="numba")
    np.testing.assert_array_equal(y, 512.0)
    launcher = _launcher(k)
    assert launcher.work(launcher._adapt([x, y]), 1) < nb.SERIAL_FIRST_MAX_WORK
    assert "launch_parallel" not in launcher._ready
    y.fill(0)
    k(x, y, backend="numba")
    np.testing.assert_array_equal(y, 512.0)
    assert "launch_parallel" in launcher._ready


def test_a_nested_loop_kernels_heavy_first_big_launch_compiles_the_parallel_entry(monkeypatch):
    monkeypatch.setattr(nb, "SERIAL_FIRST_MAX_WORK", 1000.0)
    k = _fresh(row_sums)
    x = np.ones((512, 512), np.float32)
    y = np.zeros(512, np.float32)
    k(x, y, backend="numba")
    np.testing.assert_array_equal(y, 512.0)
    assert "launch_parallel" in _launcher(k)._ready


@dsl.kernel(threads=1)
def picks(a: In[f32], b: In[f32], c: In[f32], lo: Out[f32], hi: Out[f32], m: In[i64], n: In[i64],
          ilo: Out[i64], ihi: Out[i64]):
    for i in range(a.size):
        lo[i] = min(a[i], b[i])
        hi[i] = max(a[i], b[i], c[i])
    for i in range(m.size):
        ilo[i] = min(m[i], n[i])
        ihi[i] = max(m[i], n[i])


def test_min_and_max_keep_pythons_order_with_nan_and_signed_zeros(backend):
    if backend == "opencl":
        pytest.skip("OpenCL's fmin/fmax return the number beside a NaN (docs/language.md)")
    vals = np.array([np.nan, -0.0, 0.0, 1.5, -np.inf, np.inf], np.float32)
    a, b = (g.ravel() for g in np.meshgrid(vals, vals))
    c = np.roll(a, 1)
    ints = np.array([-2**63, -1, 0, 5, 2**63 - 1], np.int64)
    m, n = (g.ravel() for g in np.meshgrid(ints, ints))
    lo, hi = np.empty_like(a), np.empty_like(a)
    ilo, ihi = np.empty_like(m), np.empty_like(m)
    picks(a, b, c, lo, hi, m, n, ilo, ihi, backend=backend)
    want_lo = np.array([min(p, q) for p, q in zip(a, b)], np.float32)
    want_hi = np.array([max(p, q, r) for p, q, r in zip(a, b, c)], np.float32)
    assert want_lo.tobytes() == lo.tobytes() and want_hi.tobytes() == hi.tobytes()  # NaN and -0.0 bit for bit
    np.testing.assert_array_equal(ilo, np.minimum(m, n))
    np.testing.assert_array_equal(ihi, np.maximum(m, n))


def test_generated_code_calls_no_numba_min_and_counts_step_1_loops_inline():
    x = np.ones(8, np.float32)
    src = shift.source("numba", x, np.empty_like(x))
    assert "ar.min2(" in src and "min(" not in src.replace("ar.min2(", "")
    assert "rt.trip_count" not in src and "ar.floordiv_i64" not in src  # split divides by the team size
    assert "ar.count_up(" in src and " else " not in src  # step-1 counts are selects, not branches


@dsl.kernel(threads=2)
def abs_sums(x: In[i8, 3], y: Out[i8, 2]):
    """i8 sums that wrap around; ``v`` and ``s`` are reassigned in a branch and a loop."""
    a, b, c = x.shape
    lo, hi = dsl.split(a)
    for i in range(lo, hi):
        for j in range(b):
            s = i8(0)
            for k in range(c):
                v = x[i, j, k]
                if v < 0:
                    v = -v
                s += v
            y[i, j] = s


def test_reassigned_narrow_ints_keep_their_type_and_wrap_around(backend):
    """numba compiles the thread body without its SSA pass (backends/numba/pipeline.py): each
    variable keeps one type, so i8 arithmetic still wraps as numpy's does (-(-128) included)."""
    x = np.random.default_rng(28).integers(-128, 128, (5, 3, 7), dtype=np.int8)
    x[0, 0, 0] = -128
    y = np.zeros((5, 3), np.int8)
    abs_sums(x, y, backend=backend)
    np.testing.assert_array_equal(y, np.abs(x).sum(axis=2, dtype=np.int8))


def test_body_functions_skip_numbas_ssa_pass_and_entries_flatten_without_reshape():
    x = np.zeros((2, 3, 4), np.int8)
    y = np.zeros((2, 3), np.int8)
    src = abs_sums.source("numba", x, y)
    assert "pipeline_class=pl.Lean" in src and "BODY = dict(JIT," in src
    assert ".reshape(" not in src and "x = vw.flat(x_nd)" in src
    k = _fresh(abs_sums)
    k(x, y, backend="numba")  # the machine code may come from the disk cache: the pipeline is checked below
    from backends.numba import pipeline
    assert _launcher(k)._module.thread._compiler.pipeline_class is pipeline.Lean

    from numba import njit

    @njit(pipeline_class=pipeline.Lean, cache=False)
    def count_negatives(a):
        n = 0
        for v in a:
            if v < 0:
                n = n + 1
        return n

    assert count_negatives(np.array([-1.0, 2.0, -3.0])) == 2
    (cres,) = count_negatives.overloads.values()
    passes = {name for times in cres.metadata["pipeline_times"].values() for name in times}
    assert any(p.endswith("nopython_type_inference") for p in passes)
    assert not any(p.endswith(("reconstruct_ssa", "inline_closure_likes")) for p in passes)
