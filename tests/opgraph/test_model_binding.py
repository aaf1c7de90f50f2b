"""Model.run without copies (dsl/opgraph/binding.py): the plan's steps are rebound to the caller's
feeds and to fresh output arrays.  Results equal the copying path on every backend; the plan's
own input buffers are not read (they are poisoned with NaN and the result does not change); the
caller's feeds are never written; each run returns new arrays; feeds that cannot stand in for a
buffer (non-contiguous, read-only outside frozen launches, misaligned) and outputs that cannot be
fresh (a graph input, listed twice) take the copy, with the same results."""
import gc
import threading
import weakref

import numpy as np
import pytest

import dsl
import ops
from dsl.opgraph import binding
from dsl.runtime.cache_lines import line_aligned

RNG = np.random.default_rng(10)


@pytest.fixture(autouse=True)
def bind_small(monkeypatch):
    """Rebind every buffer, however small, so that small test tensors take the new path."""
    monkeypatch.setattr(binding, "MIN_BYTES", 0)


def the_plan(model):
    return next(iter(model._plans.values())).first


def poison(model):
    for buf in the_plan(model).inputs:
        if buf.dtype.kind == "f":
            buf.fill(np.nan)
        else:
            buf.fill(-7)


def run_both(model, feeds, in_place=(), fresh=()):
    """The rebound run equals the copying run; inputs in ``in_place`` are read from the caller's
    array (the plan's buffer is poisoned), outputs in ``fresh`` are new arrays every run."""
    saved = {k: np.array(v, copy=True) for k, v in feeds.items()}
    model.rebind = False
    want = model.run(feeds)
    model.rebind = True
    plan = the_plan(model)
    assert plan.binding is not None
    names = [t.name for t in model.graph.inputs]
    live = {names[i] for i in plan.binding.live if i < len(names)}
    assert set(in_place) <= live, live
    if set(in_place) == set(names):
        poison(model)
    got = model.run(feeds)
    again = model.run(feeds)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert got[name] is not again[name] and not np.shares_memory(got[name], again[name])
        assert got[name].flags.c_contiguous and got[name].flags.writeable
        assert all(not np.shares_memory(got[name], b) for _, b in plan.outputs)
    out_names = [name for name, _ in plan.outputs]
    fresh_now = {out_names[k] for k, r in enumerate(plan.binding.out_roots) if r is not None}
    assert set(fresh) <= fresh_now, fresh_now
    for k, v in feeds.items():
        np.testing.assert_array_equal(v, saved[k], err_msg=f"feed {k} was written")
    return got


def test_conv(backend):
    g = dsl.Graph("conv")
    x = g.input("x", (1, 4, 6, 6), dsl.f32)
    w = g.constant("w", RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    g.output(ops.Relu(ops.Conv(x, w, pads=[1, 1, 1, 1])), "y")
    model = g.compile(backend=backend, formats="plain")
    xv = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    got = run_both(model, {"x": xv}, in_place=["x"], fresh=["y"])
    ref = np.zeros((1, 8, 6, 6), np.float32)
    pad = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)))
    wv = model.graph.constants.get("w")
    wv = w.value if wv is None else wv
    for i in range(3):
        for j in range(3):
            ref += np.einsum("nchw,oc->nohw", pad[:, :, i:i + 6, j:j + 6], wv[:, :, i, j])
    np.testing.assert_allclose(got["y"], np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


def test_batched_matmul(backend):
    g = dsl.Graph("bmm")
    a = g.input("a", (3, 8, 5), dsl.f32)
    b = g.input("b", (3, 5, 7), dsl.f32)
    g.output(ops.MatMul(a, b), "y")
    model = g.compile(backend=backend)
    av = RNG.standard_normal((3, 8, 5)).astype(np.float32)
    bv = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    got = run_both(model, {"a": av, "b": bv}, in_place=["a", "b"], fresh=["y"])
    np.testing.assert_allclose(got["y"], av @ bv, rtol=1e-5, atol=1e-5)


def reshape_graph(x_out=False):
    g = dsl.Graph("views")
    x = g.input("x", (4, 6), dsl.f32)
    r = ops.Reshape(x, g.constant("s", np.array([2, 12], np.int64)))
    y = ops.Neg(r)
    g.output(y, "y")
    g.output(ops.Exp(y), "z")
    if x_out:
        g.output(x, "x_out")
    return g


def test_reshape_of_an_input_and_an_output_read_later(backend):
    """A Reshape of a feed (a view of it in the launches) and an output that a later node reads."""
    model = reshape_graph().compile(backend=backend)
    xv = RNG.standard_normal((4, 6)).astype(np.float32)
    got = run_both(model, {"x": xv}, in_place=["x"], fresh=["y", "z"])
    np.testing.assert_array_equal(got["y"], -xv.reshape(2, 12))
    np.testing.assert_allclose(got["z"], np.exp(-xv.reshape(2, 12)), rtol=1e-6)


def test_an_output_that_is_an_input_keeps_the_copy(backend):
    """The graph input as an output runs as an Identity node calling op.run, which may do anything
    with its arrays: that input keeps its copy, the other outputs are still fresh arrays."""
    model = reshape_graph(x_out=True).compile(backend=backend)
    xv = RNG.standard_normal((4, 6)).astype(np.float32)
    got = run_both(model, {"x": xv}, fresh=["y", "z"])
    assert 0 in the_plan(model).binding.binding.pinned
    np.testing.assert_array_equal(got["y"], -xv.reshape(2, 12))
    np.testing.assert_array_equal(got["x_out"], xv)
    assert not np.shares_memory(got["x_out"], xv)


def test_tiled_node(backend):
    from tests.opgraph.test_tiling import ColDiff, TiledRMSNorm, rms_ref
    g = dsl.Graph("tiled")
    x = g.input("x", (3, 9, 5), dsl.f32)
    w = g.input("w", (5,), dsl.f32)
    y, inv = TiledRMSNorm()(x, w)
    g.output(y, "y")
    g.output(inv, "inv")
    m = g.input("m", (4, 9), dsl.f32)
    g.output(ColDiff()(m), "d")  # inner-axis tiles: copies into and out of tile buffers
    model = g.compile(backend=backend, tiling=3)
    assert the_plan(model).tiled
    xv = RNG.standard_normal((3, 9, 5)).astype(np.float32)
    wv = RNG.standard_normal(5).astype(np.float32)
    mv = RNG.standard_normal((4, 9)).astype(np.float32)
    got = run_both(model, {"x": xv, "w": wv, "m": mv}, in_place=["x", "w", "m"], fresh=["y", "inv", "d"])
    ref_y, ref_inv = rms_ref(xv, wv)
    np.testing.assert_allclose(got["y"], ref_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["inv"], ref_inv, rtol=1e-5)
    np.testing.assert_allclose(got["d"], np.diff(mv, axis=1), rtol=1e-6, atol=1e-6)


def test_concat_in_place_and_a_raw_input(backend):
    """Producers writing into a Concat's buffer, then a Concat of the feed itself into an output."""
    g = dsl.Graph("cat")
    x = g.input("x", (1, 3, 4, 5), dsl.f32)
    c = ops.Concat(ops.Tanh(x), ops.Exp(x), axis=1)
    g.output(ops.Neg(c), "y")
    g.output(ops.Concat(x, ops.Neg(c), axis=1), "z")
    model = g.compile(backend=backend)
    assert model.memory_plan().views
    xv = RNG.standard_normal((1, 3, 4, 5)).astype(np.float32)
    got = run_both(model, {"x": xv}, in_place=["x"], fresh=["y", "z"])
    want = -np.concatenate([np.tanh(xv), np.exp(xv)], axis=1)
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["z"], np.concatenate([xv, want], axis=1), rtol=1e-5, atol=1e-6)


def test_feeds_never_written_with_every_op_in_place(backend, monkeypatch):
    """OPDSL_INPLACE_ALL=1 runs Relu/Add in place where the plan allows: never on a caller's feed."""
    monkeypatch.setenv("OPDSL_INPLACE_ALL", "1")
    g = dsl.Graph("inplace")
    x = g.input("x", (64,), dsl.f32)
    a = ops.Relu(x)
    b = ops.Add(ops.Neg(a), x)
    g.output(ops.Sigmoid(ops.Relu(b)), "y")
    model = g.compile(backend=backend, fuse=False)
    assert model.inplace_all and model.memory_plan().inplace
    xv = RNG.standard_normal(64).astype(np.float32)
    got = run_both(model, {"x": xv}, in_place=["x"], fresh=["y"])
    want = 1 / (1 + np.exp(-np.maximum(xv - np.maximum(xv, 0), 0)))
    np.testing.assert_allclose(got["y"], want, rtol=1e-6)


def unary_model(backend, shape=(8, 16), dtype=dsl.f32):
    g = dsl.Graph("unary")
    x = g.input("x", shape, dtype)
    g.output(ops.Abs(ops.Neg(x)), "y")
    return g.compile(backend=backend)


class _Sub(np.ndarray):
    """An ndarray subclass: it could carry behaviour a kernel launch does not expect."""


def test_feeds_that_keep_the_copy(backend):
    """Non-contiguous, read-only (where a launch is not frozen), misaligned and subclassed feeds
    are copied into the plan: same result, and the plan's buffer holds the feed afterwards."""
    model = unary_model(backend)
    plan = the_plan(model)
    base = RNG.standard_normal((8, 32)).astype(np.float32)
    strided = base[:, ::2]
    raw = np.zeros(8 * 16 * 4 + 1, np.uint8)[1:]
    misaligned = raw.view(np.float32).reshape(8, 16)
    misaligned[...] = base[:, :16]
    assert not misaligned.flags.aligned
    for feed in (strided, misaligned, base[:, :16].copy().view(_Sub)):
        got = model.run({"x": feed})["y"]
        np.testing.assert_array_equal(got, np.abs(np.asarray(feed)))
        np.testing.assert_array_equal(plan.inputs[0], feed)  # went through the copy
    ro = base[:, :16].copy()
    ro.flags.writeable = False
    got = model.run({"x": ro})["y"]
    np.testing.assert_array_equal(got, np.abs(ro))
    frozen = plan.binding.binding.frozen_only[0]
    assert frozen == (backend == "numba")  # other backends' launches would type it again
    poison(model)
    got = model.run({"x": ro})["y"]
    if frozen:  # a frozen numba launch takes a read-only array in place
        np.testing.assert_array_equal(got, np.abs(ro))
        assert np.isnan(plan.inputs[0]).all()
    else:
        np.testing.assert_array_equal(plan.inputs[0], ro)


def test_f16_feed_in_place():
    """f16 tensors reach numba as uint16 views: the view is made of the caller's array too."""
    model = unary_model("numba", dtype=dsl.f16)
    xv = RNG.standard_normal((8, 16)).astype(np.float16)
    got = run_both(model, {"x": xv}, in_place=["x"], fresh=["y"])
    np.testing.assert_array_equal(got["y"], np.abs(xv))


def test_output_listed_twice_and_small_buffers(monkeypatch):
    g = dsl.Graph("twice")
    x = g.input("x", (8, 16), dsl.f32)
    y = ops.Neg(x)
    g.output(y, "y")
    g.output(y, "y2")
    model = g.compile(backend="numba")
    xv = RNG.standard_normal((8, 16)).astype(np.float32)
    out = model.run({"x": xv})
    np.testing.assert_array_equal(out["y"], -xv)
    np.testing.assert_array_equal(out["y2"], -xv)
    assert not np.shares_memory(out["y"], out["y2"])
    monkeypatch.setattr(binding, "MIN_BYTES", 8 * 16 * 4 + 1)  # one more byte than the tensors
    assert unary_model("numba")._plans and the_plan(unary_model("numba")).binding is None


def test_unknown_steps_keep_every_copy():
    """A step this module does not understand could hold a buffer out of sight: no rebinding."""
    buf = np.zeros(1024, np.float32)
    out = np.zeros(1024, np.float32)
    assert binding.build([(print, (buf,))], [buf], [("y", out)], [], (), lambda: None) is None
    assert binding.build([(lambda: None, ())], [buf], [("y", out)], [], (), lambda: None) is None
    noop = lambda: None  # noqa: E731
    b = binding.build([(noop, ())], [buf], [("y", out)], [], (), noop)
    assert b is not None and b.binding.patches == []


def test_dynamic_shapes_bind_per_signature(backend):
    g = dsl.Graph("dyn")
    x = g.input("x", (None, 16), dsl.f32)
    g.output(ops.Neg(x), "y")
    model = g.compile(backend=backend)
    for rows in (3, 5, 3):
        xv = RNG.standard_normal((rows, 16)).astype(np.float32)
        np.testing.assert_array_equal(model.run({"x": xv})["y"], -xv)
    assert all(p.first.binding is not None for p in model._plans.values())


def test_threads_share_one_model(compiled_backend):
    """Concurrent runs each bind their own feeds and outputs (plans are pooled per run)."""
    model = unary_model(compiled_backend, shape=(64, 64))
    feeds = [RNG.standard_normal((64, 64)).astype(np.float32) for _ in range(6)]
    errors = []
    start = threading.Barrier(4)

    def work(t):
        try:
            start.wait()
            for k in range(12):
                xv = feeds[(k + t) % len(feeds)]
                np.testing.assert_array_equal(model.run({"x": xv})["y"], np.abs(xv))
        except BaseException as e:  # handed to the test thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def test_profile_after_bound_runs():
    """The profiler times the plan's own steps on its own buffers: still right after bound runs."""
    model = unary_model("numba")
    xv = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_array_equal(model.run({"x": xv})["y"], np.abs(xv))
    prof = model.profile({"x": xv}, repeat=2)
    assert [r.name for r in prof.rows] == [n.name for n in model.graph.nodes]
    np.testing.assert_array_equal(model.run({"x": -xv})["y"], np.abs(xv))


def test_output_fed_back_as_the_next_feed(backend):
    """A loop feeding each run's output to the next: the feed is the previous run's array, the
    output a new one, so a run never reads what it writes."""
    model = unary_model(backend)
    model.rebind = False
    x0 = RNG.standard_normal((8, 16)).astype(np.float32)
    want = [x0]
    for _ in range(3):
        want.append(model.run({"x": want[-1]})["y"] * -1)
    model.rebind = True
    got = [x0]
    for _ in range(3):
        y = model.run({"x": got[-1]})["y"]
        assert not np.shares_memory(y, got[-1])
        got.append(y * -1)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_an_output_the_caller_let_go_is_written_again_one_it_holds_never(backend, monkeypatch):
    """A fresh output is written into the array the last run returned when the caller has let go
    of it (its pages are warm; a new one faults each page in), never while anything holds it: a
    name, a view, a weak reference.  An Identity at the graph's output included: the caller
    always owns a distinct, correct array."""
    g = dsl.Graph("relu_identity")
    x = g.input("x", (8, 16), dsl.f32)
    g.output(ops.Identity(ops.Relu(x)), "y")
    model = g.compile(backend=backend)
    feeds = [np.random.default_rng(k).standard_normal((8, 16)).astype(np.float32) for k in range(6)]
    held = model.run({"x": feeds[0]})["y"]
    assert the_plan(model).binding.out_roots == [1]  # y is a fresh output
    made = []

    def counting(*args, **kwargs):  # binding.py's allocator, counting the output arrays it makes
        made.append(1)
        return line_aligned(*args, **kwargs)
    monkeypatch.setattr(binding, "line_aligned", counting)
    second = model.run({"x": feeds[1]})["y"]
    assert not np.shares_memory(held, second) and len(made) == 1  # held: a new array
    address = second.ctypes.data
    del second
    gc.collect()  # the interpreter's launches leave cycles that hold their arrays until it runs
    third = model.run({"x": feeds[2]})["y"]
    assert third.ctypes.data == address and len(made) == 1  # let go of: written again
    view = third[2:]
    del third
    gc.collect()
    fourth = model.run({"x": feeds[3]})["y"]
    assert not np.shares_memory(fourth, view) and len(made) == 2  # a view holds its base
    watched = weakref.ref(fourth)
    del fourth
    gc.collect()
    fifth = model.run({"x": feeds[4]})["y"]
    assert watched() is None and len(made) == 3  # only weakly held: a new array, the old one freed
    for got, k in ((held, 0), (view, 2), (fifth, 4)):
        want = np.maximum(feeds[k], 0)
        np.testing.assert_array_equal(got, want[2:] if got is view else want)


def test_fresh_outputs_start_on_a_cache_line(backend):
    """Each fresh output (the caller holds the last ones) starts on a 64-byte line, whatever
    numpy's allocator gives, and holds the right values; a view the caller keeps of one keeps it
    from being written again."""
    g = dsl.Graph("relu_large")
    x = g.input("x", (64, 257), dsl.f32)  # 64 KB: rebound, not copied
    g.output(ops.Relu(x), "y")
    model = g.compile(backend=backend)
    feeds = [np.random.default_rng(k).standard_normal((64, 257)).astype(np.float32) for k in range(4)]
    outs = [model.run({"x": f})["y"] for f in feeds]
    assert the_plan(model).binding.out_roots == [1]
    for f, y in zip(feeds, outs):
        assert y.ctypes.data % 64 == 0 and y.flags.c_contiguous and y.flags.writeable
        np.testing.assert_array_equal(y, np.maximum(f, 0))
    kept = outs.pop()[1:]  # a view only
    again = model.run({"x": feeds[0]})["y"]
    assert not np.shares_memory(again, kept)
    np.testing.assert_array_equal(kept, np.maximum(feeds[3], 0)[1:])
