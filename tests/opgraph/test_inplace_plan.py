"""Which nodes the memory plan runs in place (dsl/opgraph/memory.py): by default only ops whose
in-place run is a no-op (``inplace_noop``); an elementwise loop whose output is its input runs
LLVM's scalar fallback, so Exp, Neg, Add... get a buffer of their own.  OPDSL_INPLACE_ALL=1
honours every op's ``inplace`` (smallest arena).  Results are identical either way."""
import numpy as np

import dsl
import ops
from dsl.opgraph.memory import plan_memory

RNG = np.random.default_rng(11)


def chain(shape=(4, 33)):
    """x -> Exp -> Neg -> Add(., x) -> Sigmoid -> Reshape -> Abs: every intermediate dies at its reader."""
    g = dsl.Graph("chain")
    x = g.input("x", shape, dsl.f32)
    h = ops.Sigmoid(ops.Add(ops.Neg(ops.Exp(x)), x))
    g.output(ops.Abs(ops.Reshape(h, np.array([-1], np.int64))), "y")
    return g


def reference(x):
    return np.abs((1 / (1 + np.exp(-(-np.exp(x) + x)))).reshape(-1))


def in_place_ops(model):
    by_output = {t.name: n.op_type for n in model.graph.nodes for t in n.outputs}
    return sorted(by_output[out] for out, _ in model.memory_plan().inplace)


def test_default_plan_runs_only_no_op_nodes_in_place(backend, monkeypatch):
    monkeypatch.delenv("OPDSL_INPLACE_ALL", raising=False)
    model = chain().compile(backend=backend, fuse=False)  # unfused: one node per op
    assert not model.inplace_all
    assert in_place_ops(model) == ["Reshape"]  # Exp, Neg, Add, Sigmoid, Abs write a buffer of their own
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    for _ in range(2):  # the second run reuses the arena
        np.testing.assert_allclose(model.run({"x": x})["y"], reference(x), rtol=1e-5, atol=1e-6)


def test_inplace_all_switch_gives_the_same_results_in_a_smaller_arena(backend, monkeypatch):
    x = RNG.standard_normal((4, 33)).astype(np.float32)
    monkeypatch.delenv("OPDSL_INPLACE_ALL", raising=False)
    fast = chain().compile(backend=backend, fuse=False)
    monkeypatch.setenv("OPDSL_INPLACE_ALL", "1")
    small = chain().compile(backend=backend, fuse=False)
    assert small.inplace_all
    assert in_place_ops(small) == ["Add", "Neg", "Reshape", "Sigmoid"]  # Exp reads the graph input
    assert small.memory_plan().arena_bytes < fast.memory_plan().arena_bytes
    np.testing.assert_array_equal(small.run({"x": x})["y"], fast.run({"x": x})["y"])
    monkeypatch.setenv("OPDSL_INPLACE_ALL", "0")
    assert not chain().compile(backend="interpreter", fuse=False).inplace_all


class _Node:
    def __init__(self, op, inputs, outputs):
        self.op, self.inputs, self.outputs = op, inputs, outputs


class _T:
    def __init__(self, name):
        self.name = name


class _Elementwise:
    inplace = {0: 0}


class _View:
    inplace = {0: 0}
    inplace_noop = True


def test_plan_memory_decides_in_place_by_the_op():
    """Unit level: a dying input's buffer goes to a no-op view always, to an elementwise op only
    with ``inplace_all``; a free buffer of the right size is reused in both cases."""
    x, a, b, c, d = (_T(n) for n in "xabcd")
    nodes = [_Node(_Elementwise(), [x], [a]), _Node(_Elementwise(), [a], [b]),
             _Node(_View(), [b], [c]), _Node(_Elementwise(), [c], [d])]
    layout = {t.name: ((8,), np.dtype(np.float32)) for t in (x, a, b, c, d)}
    fast = plan_memory(nodes, layout, [d])
    assert fast.inplace == [("c", "b")]
    assert fast.sizes == [32, 32] and fast.assign == {"a": 0, "b": 1, "c": 1}
    small = plan_memory(nodes, layout, [d], inplace_all=True)
    assert small.inplace == [("b", "a"), ("c", "b")]
    assert small.sizes == [32] and small.assign == {"a": 0, "b": 0, "c": 0}


def steps_of(model):
    plan = next(iter(model._plans.values())).first
    return {n.op_type: end - first for n, first, end in plan.spans}


def test_dropout_in_place_with_its_mask_unread_runs_nothing(backend):
    g = dsl.Graph("dropout")
    x = g.input("x", (3, 5), dsl.f32)
    y, _mask = ops.Dropout(ops.Exp(x))
    g.output(ops.Neg(y), "y")
    model = g.compile(backend=backend, fuse=False)
    assert in_place_ops(model) == ["Dropout"] and steps_of(model)["Dropout"] == 0
    xv = RNG.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": xv})["y"], -np.exp(xv), rtol=1e-6)


def test_dropout_whose_mask_is_read_still_writes_it(backend):
    g = dsl.Graph("mask")
    x = g.input("x", (3, 5), dsl.f32)
    y, mask = ops.Dropout(ops.Exp(x))
    g.output(ops.Neg(y), "y")
    g.output(mask, "mask")
    model = g.compile(backend=backend, fuse=False)
    assert steps_of(model)["Dropout"] == 1  # in place, but the mask must be written
    xv = RNG.standard_normal((3, 5)).astype(np.float32)
    out = model.run({"x": xv})
    np.testing.assert_allclose(out["y"], -np.exp(xv), rtol=1e-6)
    assert out["mask"].dtype == np.bool_ and out["mask"].all()


def test_identity_in_place_runs_nothing(backend):
    g = dsl.Graph("identity")
    x = g.input("x", (2, 7), dsl.f32)
    g.output(ops.Neg(ops.Identity(ops.Exp(x))), "y")
    model = g.compile(backend=backend, fuse=False)
    assert in_place_ops(model) == ["Identity"] and steps_of(model)["Identity"] == 0
    xv = RNG.standard_normal((2, 7)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": xv})["y"], -np.exp(xv), rtol=1e-6)


def test_an_output_identity_or_reshape_of_a_result_only_it_reads_runs_nothing(backend):
    """The node making that result writes the output's buffer itself (a graph output is a
    fresh array per run, so the copy never ran in place); the outputs stay correct, distinct
    arrays each run."""
    g = dsl.Graph("output_copies")
    x = g.input("x", (4, 6), dsl.f32)
    g.output(ops.Identity(ops.Exp(x)), "y")
    g.output(ops.Reshape(ops.Neg(x), np.array([-1], np.int64)), "z")
    model = g.compile(backend=backend, fuse=False)
    assert steps_of(model)["Identity"] == 0 and steps_of(model)["Reshape"] == 0
    runs = [(xv, model.run({"x": xv})) for xv in RNG.standard_normal((2, 4, 6)).astype(np.float32)]
    for xv, out in runs:
        np.testing.assert_allclose(out["y"], np.exp(xv), rtol=1e-6)
        np.testing.assert_array_equal(out["z"], -xv.reshape(-1))
    assert not np.shares_memory(runs[0][1]["y"], runs[1][1]["y"])


def test_output_copies_that_must_run(backend):
    """The copy runs when its input is read elsewhere too (another node, another output) or is
    a graph input; results as numpy's."""
    g = dsl.Graph("kept_copies")
    x = g.input("x", (4, 6), dsl.f32)
    e = ops.Exp(x)
    g.output(ops.Identity(e), "y")
    g.output(ops.Neg(e), "n")            # e has a second reader
    t = ops.Abs(x)
    g.output(t, "t")
    g.output(ops.Identity(t), "t_again")  # its input is a graph output itself
    g.output(ops.Identity(x), "x_again")  # a graph input
    model = g.compile(backend=backend, fuse=False)
    plan = next(iter(model._plans.values())).first
    assert [end - first for n, first, end in plan.spans if n.op_type == "Identity"] == [1, 1, 1]
    xv = RNG.standard_normal((4, 6)).astype(np.float32)
    out = model.run({"x": xv})
    np.testing.assert_allclose(out["y"], np.exp(xv), rtol=1e-6)
    np.testing.assert_allclose(out["n"], -np.exp(xv), rtol=1e-6)
    np.testing.assert_array_equal(out["t_again"], np.abs(xv))
    np.testing.assert_array_equal(out["x_again"], xv)
    assert not np.shares_memory(out["t"], out["t_again"])
