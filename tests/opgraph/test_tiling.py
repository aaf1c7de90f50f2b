"""Declarative tiling (dsl/opgraph/tiling.py): an op that declares tiling()/map_tiles() runs as
independent tiles in a compiled model, with the same result as untiled, on every backend --
row tiles (contiguous views), inner-axis tiles with a halo (copied in and out), two outputs,
odd sizes and alignments, run-time shapes -- and bad hook results are clear errors."""
import re

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32
from dsl.opgraph import tiling as tiles

RNG = np.random.default_rng(7)


@dsl.kernel
def rms_rows(x: In[f32, 3], w: In[f32, 1], y: Out[f32, 3], inv: Out[f32, 2], eps: f32):
    n = x.shape[2]
    lo, hi = dsl.split(x.shape[0] * x.shape[1])
    for r in range(lo, hi):
        s = f32(0)
        for j in range(n):
            v = x.flat[r * n + j]
            s += v * v
        iv = f32(1) / dsl.sqrt(s / n + eps)
        inv.flat[r] = iv
        for j in range(n):
            y.flat[r * n + j] = x.flat[r * n + j] * iv * w[j]


class TiledRMSNorm(dsl.Op):
    """y = w * x / sqrt(mean(x^2) + eps) over the last axis, and the per-row 1/rms: tiles may
    cut the two outer axes (the second in multiples of ``align``), never the normalized one."""
    epsilon: float = 1e-5
    align: int = 1
    kernels = {"default": rms_rows}

    def infer(self, x, w):
        return x.spec, x.spec.with_(shape=x.shape[:2])

    def tiling(self, x, w):
        return {0: 1, 1: self.align}, {0: 1, -1: self.align}

    def map_tiles(self, out_tile, x, w):
        b, r, _ = out_tile[0]
        assert out_tile[1] == (b, r)  # both outputs are cut alike
        return [(b, r, slice(None)), None]

    def run(self, impl, inputs, outputs, backend):
        impl(*inputs, *outputs, eps=self.epsilon, backend=backend)

    def plan(self, impl, inputs, outputs, backend):  # each tile's launch, bound once
        return [dsl.Launch(impl, (*inputs, *outputs), {"eps": self.epsilon}, backend=backend)]


@dsl.kernel
def diff_cols(x: In[f32, 2], y: Out[f32, 2]):
    m = y.shape[1]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        r = i // m
        c = i % m
        y[r, c] = x[r, c + 1] - x[r, c]


class ColDiff(dsl.Op):
    """y[:, j] = x[:, j + 1] - x[:, j]: tiles cut the columns, and each reads one column more
    than it writes (a halo), so neither its input nor its output view is contiguous."""
    align: int = 1
    kernels = {"default": diff_cols}

    def infer(self, x):
        return x.spec.with_(shape=(x.shape[0], None if x.shape[1] is None else x.shape[1] - 1))

    def tiling(self, x):
        return {1: self.align}

    def map_tiles(self, out_tile, x):
        rows, cols = out_tile[0]
        return [(rows, slice(cols.start, cols.stop + 1))]


def rms_ref(x, w, eps=1e-5):
    inv = 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1) + eps)
    return (x * inv[..., None] * w).astype(np.float32), inv.astype(np.float32)


def rms_model(shape, backend, tiling, align=1):
    g = dsl.Graph("rms")
    x = g.input("x", shape, dsl.f32)
    w = g.input("w", (shape[-1],), dsl.f32)
    y, inv = TiledRMSNorm(align=align)(x, w)
    g.output(y, "y")
    g.output(inv, "inv")
    return g.compile(backend=backend, tiling=tiling)


def tiles_of(model):
    plan = next(iter(model._plans.values())).first
    return plan.tiled


@pytest.mark.parametrize("shape, align, n", [((3, 37, 5), 4, 3), ((1, 37, 5), 4, 3), ((3, 37, 5), 3, 5)])
def test_rms_tiled_matches_untiled(backend, shape, align, n):
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(shape[-1]).astype(np.float32)
    tiled = rms_model(shape, backend, n, align)
    plain = rms_model(shape, backend, False, align)
    assert list(tiles_of(tiled).values()) and not tiles_of(plain)
    got, want = tiled.run({"x": x, "w": w}), plain.run({"x": x, "w": w})
    ref_y, ref_inv = rms_ref(x, w)
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["inv"], want["inv"])
    np.testing.assert_allclose(got["y"], ref_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["inv"], ref_inv, rtol=1e-5)
    assert "tiles=" in str(tiled) and "tiles=" not in str(plain)


def test_tile_count_and_alignment():
    """Tiles are multiples of the alignment (the last one takes the rest), all outputs alike."""
    spec = dsl.TensorSpec((3, 37, 5), dsl.f32)
    op = TiledRMSNorm(align=4)
    plan = tiles.plan_tiles(op, [spec, dsl.TensorSpec((5,), dsl.f32)],
                            [spec, spec.with_(shape=(3, 37))], 5, "node 'n'")
    cuts = [t[0][0][1] for t in plan]  # output 0's axis-1 slice of every tile (axis 0 gives only 3)
    assert [(s.start, s.stop) for s in cuts] == [(0, 8), (8, 16), (16, 24), (24, 32), (32, 37)]
    assert all(t[0][1] == t[0][0][:2] for t in plan)
    assert plan[0][1] == [(slice(0, 3), slice(0, 8), slice(0, 5)), None]
    # axis 0 gives as many tiles as asked: the outer axis wins (contiguous views)
    plan = tiles.plan_tiles(op, [spec, None], [spec, spec.with_(shape=(3, 37))], 3, "node 'n'")
    assert [t[0][0][0] for t in plan] == [slice(0, 1), slice(1, 2), slice(2, 3)]
    # too small to cut in two aligned tiles: untiled
    small = dsl.TensorSpec((1, 4, 5), dsl.f32)
    assert tiles.plan_tiles(op, [small, None], [small, small.with_(shape=(1, 4))], 4, "node 'n'") is None


def test_inner_axis_tiles_with_halo(backend):
    x = RNG.standard_normal((5, 42)).astype(np.float32)
    x = x[:, ::2].copy()  # (5, 21)
    for align, n in ((1, 4), (3, 3), (7, 2)):
        g = dsl.Graph("diff")
        t = g.input("x", (5, 21), dsl.f32)
        g.output(ColDiff(align=align)(t), "y")
        model = g.compile(backend=backend, tiling=n)
        assert tiles_of(model)
        np.testing.assert_array_equal(model.run({"x": x})["y"], np.diff(x, axis=1))


def test_noncontiguous_feed_and_chain(backend):
    """A strided feed, and a tiled op whose input is another tiled op's output."""
    base = RNG.standard_normal((4, 30, 12)).astype(np.float32)
    x = base[:, :, ::2]  # not contiguous
    w = RNG.standard_normal(6).astype(np.float32)
    g = dsl.Graph("chain")
    t = g.input("x", (4, 30, 6), dsl.f32)
    wt = g.constant("w", w)
    y, _ = TiledRMSNorm()(t, wt)
    y2, inv2 = TiledRMSNorm(align=2)(y, wt)
    g.output(y2, "y2")
    g.output(inv2, "inv2")
    model = g.compile(backend=backend, tiling=3)
    assert len(tiles_of(model)) == 2
    want, _ = rms_ref(*rms_ref(x, w)[:1], w)
    out = model.run({"x": x})
    np.testing.assert_allclose(out["y2"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["inv2"], rms_ref(rms_ref(x, w)[0], w)[1], rtol=1e-5)


def test_runtime_shapes_are_tiled_per_shape():
    g = dsl.Graph("dyn")
    t = g.input("x", (None, 9), dsl.f32)
    g.output(ColDiff()(t), "y")
    model = g.compile(backend="numba", tiling=2)
    for rows in (3, 17):
        x = RNG.standard_normal((rows, 9)).astype(np.float32)
        np.testing.assert_array_equal(model.run({"x": x})["y"], np.diff(x, axis=1))
    assert all(p.first.tiled for p in model._plans.values())


def test_tiling_switches(monkeypatch):
    x = RNG.standard_normal((2, 128, 300)).astype(np.float32)  # 76800 elements: above MIN_ELEMENTS
    w = np.ones(300, np.float32)
    monkeypatch.setattr(tiles, "cores", lambda: 2)
    assert list(tiles_of(rms_model(x.shape, "numba", True)).values()) == [2]
    assert list(tiles_of(rms_model(x.shape, "numba", None)).values()) == [2]
    assert not tiles_of(rms_model((2, 4, 300), "numba", True))  # small: one launch is cheaper
    assert not tiles_of(rms_model(x.shape, "interpreter", True))  # tiles would run in order there
    assert list(tiles_of(rms_model(x.shape, "interpreter", 2)).values()) == [2]  # unless asked
    assert not tiles_of(rms_model(x.shape, "numba", False))
    assert not tiles_of(rms_model(x.shape, "numba", 1))
    monkeypatch.setenv("OPDSL_NO_TILING", "1")
    off = rms_model(x.shape, "numba", None)
    assert not tiles_of(off)
    np.testing.assert_allclose(off.run({"x": x, "w": w})["y"], rms_ref(x, w)[0], rtol=1e-5, atol=1e-6)
    assert list(tiles_of(rms_model(x.shape, "numba", 4)).values()) == [4]
    for bad in ("yes", 0, -2, 2.5):
        with pytest.raises(ValueError, match=r"compile\(tiling=.*accepted None"):
            rms_model(x.shape, "numba", bad)


def test_inplace_nodes_are_not_tiled(monkeypatch):
    monkeypatch.setenv("OPDSL_INPLACE_ALL", "1")  # by default the plan gives InplaceDiff its own buffer

    class InplaceDiff(ColDiff):
        inplace = {0: 0}

        def infer(self, x):
            return x.spec

        def map_tiles(self, out_tile, x):
            return [out_tile[0]]

    @dsl.kernel
    def neg(x: In[f32, 2], y: Out[f32, 2]):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = -x.flat[i]

    InplaceDiff.kernels = {"default": neg}
    g = dsl.Graph("inplace")
    t = g.input("x", (6, 8), dsl.f32)
    u = InplaceDiff()(ColDiff()(t))  # the intermediate dies here: the plan runs it in place
    g.output(ColDiff()(u), "y")
    model = g.compile(backend="numba", tiling=2)
    plan = next(iter(model._plans.values())).first
    assert plan.memory.inplace and len(plan.tiled) == 2
    x = RNG.standard_normal((6, 8)).astype(np.float32)
    np.testing.assert_array_equal(model.run({"x": x})["y"], np.diff(-np.diff(x, axis=1), axis=1))


class _Bad(ColDiff):
    result = None
    mapped = None

    def tiling(self, x):
        return type(self).result if type(self).result is not None else {1: 1}

    def map_tiles(self, out_tile, x):
        if type(self).mapped is not None:
            return type(self).mapped
        return super().map_tiles(out_tile, x)


@pytest.mark.parametrize("result, mapped, match", [
    ([{1: 1}, {0: 1}], None, r"tiling\(\) returned .* for 1 output"),
    ({2: 1}, None, r"tiling\(\) output 0 axis 2 is not an axis of its shape \(4, 9\)"),
    ({1: 0}, None, r"tiling\(\) output 0 axis 1 alignment 0"),
    ({}, None, r"tiling\(\) output 0 is \{\}"),
    ({1: True}, None, r"alignment True"),
    (None, [], r"map_tiles\(\(\[0:4, 0:5\]\)\) returned \[\] for 1 input"),
    (None, [(slice(0, 4), slice(0, 11))], r"input 0 axis 1 is slice\(0, 11, None\), outside its extent 10"),
    (None, [(slice(0, 4), slice(0, 10, 2))], r"input 0 axis 1 is slice\(0, 10, 2\)"),
    (None, [(slice(0, 4),)], r"input 0 is \(slice\(0, 4, None\),\), for shape \(4, 10\)"),
])
def test_bad_hook_results(result, mapped, match):
    class Bad(_Bad):
        pass
    Bad.result, Bad.mapped = result, mapped
    g = dsl.Graph("bad")
    t = g.input("x", (4, 10), dsl.f32)
    g.output(Bad()(t), "y")
    with pytest.raises(dsl.VerifyError, match=r"ColDiff|Bad") as err:
        g.compile(backend="interpreter", tiling=2)
    assert "node " in str(err.value) and "accepted" in str(err.value)
    assert re.search(match, str(err.value)), str(err.value)


def test_a_failing_hook_names_the_node():
    class Broken(ColDiff):
        def map_tiles(self, out_tile, x):
            return [(out_tile[0][0], out_tile[0][1] + 1)]  # slice + int: a bug in the op

    g = dsl.Graph("broken")
    t = g.input("x", (4, 10), dsl.f32)
    g.output(Broken()(t), "y")
    with pytest.raises(dsl.VerifyError, match=r"Broken \(node '.*'\): map_tiles\(\(\[0:4, 0:5\]\)\) failed on "
                                              r"inputs \(f32\[4,10\]\): TypeError"):
        g.compile(backend="interpreter", tiling=2)


def test_tiling_without_map_tiles():
    class NoMap(dsl.Op):
        kernels = {"default": diff_cols}

        def infer(self, x):
            return x.spec

        def tiling(self, x):
            return {0: 1}

    g = dsl.Graph("nomap")
    t = g.input("x", (4, 10), dsl.f32)
    g.output(NoMap()(t), "y")
    with pytest.raises(NotImplementedError, match=r"NoMap declares tiling\(\) but no map_tiles"):
        g.compile(backend="interpreter", tiling=2)


def test_a_failing_tile_fails_the_run():
    """A tile whose run raises (here a plain-callable kernel, run on the tile threads) fails
    the model's run after every other tile finished."""
    seen = []

    def half(x, y):
        seen.append(x.shape)
        if x.shape[1] == 4:  # the second tile: output columns 5:8 read columns 5:9
            raise RuntimeError("tile of 4 columns")
        y[...] = x[:, 1:] - x[:, :-1]

    class PyDiff(ColDiff):
        kernels = {"default": half}

    g = dsl.Graph("py")
    t = g.input("x", (2, 9), dsl.f32)
    g.output(PyDiff(align=5)(t), "y")
    model = g.compile(backend="numba", tiling=2)
    assert list(tiles_of(model).values()) == [2]
    with pytest.raises(RuntimeError, match="tile of 4 columns"):
        model.run({"x": np.ones((2, 9), np.float32)})
    assert sorted(s[1] for s in seen[-2:]) == [4, 6]


@pytest.mark.skipif(tiles.cores() < 2, reason="one core: tiles run in order")
def test_numba_tiles_run_on_several_threads():
    """On numba each tile runs on its own thread (the caller's or a tile thread)."""
    import threading
    seen = set()

    def record(x, y):
        seen.add(threading.get_ident())
        y[...] = x[:, 1:] - x[:, :-1]

    class PyDiff(ColDiff):
        kernels = {"default": record}

    g = dsl.Graph("threads")
    t = g.input("x", (4, 33), dsl.f32)
    g.output(PyDiff()(t), "y")
    model = g.compile(backend="numba", tiling=2)
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    for _ in range(5):
        np.testing.assert_array_equal(model.run({"x": x})["y"], np.diff(x, axis=1))
    assert threading.get_ident() in seen and len(seen) >= 2


def test_hooks_as_package_functions(backend):
    """A package's functions.py gives the hooks as plain functions taking the op first; the
    package loader copies the names in ``tiling.HOOKS`` onto the op class it builds."""
    def tiling(op, x):
        return {1: 2}

    def map_tiles(op, out_tile, x):
        rows, cols = out_tile[0]
        return [(rows, slice(cols.start, cols.stop + 1))]

    functions = {"tiling": tiling, "map_tiles": map_tiles}
    assert set(tiles.HOOKS) == set(functions)
    PkgDiff = type("PkgDiff", (dsl.Op,), {"kernels": {"default": diff_cols}, "infer": ColDiff.infer,
                                          **{name: functions[name] for name in tiles.HOOKS}})
    g = dsl.Graph("pkg")
    t = g.input("x", (3, 12), dsl.f32)
    g.output(PkgDiff()(t), "y")
    model = g.compile(backend=backend, tiling=3)
    assert list(tiles_of(model).values()) == [3]
    x = RNG.standard_normal((3, 12)).astype(np.float32)
    np.testing.assert_array_equal(model.run({"x": x})["y"], np.diff(x, axis=1))


def _diff_in_forked_child(q, x):
    def diff(x, y):
        y[...] = x[:, 1:] - x[:, :-1]

    class PyDiff(ColDiff):
        kernels = {"default": diff}

    g = dsl.Graph("child")
    t = g.input("x", x.shape, dsl.f32)
    g.output(PyDiff()(t), "y")
    q.put(g.compile(backend="numba", tiling=2).run({"x": x})["y"])


@pytest.mark.skipif(tiles.cores() < 2 or not hasattr(__import__("os"), "fork"), reason="needs fork and 2 cores")
def test_forked_child_makes_its_own_tile_threads():
    """The parent's tile threads do not exist in a forked child: waiting on them would hang."""
    import multiprocessing as mp
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    g = dsl.Graph("parent")
    t = g.input("x", x.shape, dsl.f32)
    g.output(ColDiff()(t), "y")
    g.compile(backend="numba", tiling=2).run({"x": x})  # the parent's tile threads exist now
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_diff_in_forked_child, args=(q, x))
    p.start()
    try:
        np.testing.assert_array_equal(q.get(timeout=60), np.diff(x, axis=1))
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()


def test_contiguous_tiles_are_views_others_are_copied():
    def work_of(model):
        plan = next(iter(model._plans.values())).first
        return next(args[0] for fn, args in plan.steps if fn in (tiles.run_tiles, tiles.run_tiles_in_order))

    rows = work_of(rms_model((3, 8, 5), "numba", 3))  # axis 0: every tile is a block of whole rows
    assert all(not before and not after for before, _, after in rows)
    x_buf = next(iter(rms_model((3, 8, 5), "numba", 3)._plans.values())).first.inputs[0]
    cols = work_of(rms_model((3, 8, 5), "numba", 4))  # axis 1 of a batch of 3: strided views
    assert all(len(before) == 1 and len(after) == 2 for before, _, after in cols)
    tile_in = cols[0][0][0][0]  # the first tile's x buffer, filled from the strided view
    assert tile_in.shape == (3, 2, 5) and not np.shares_memory(tile_in, x_buf)
