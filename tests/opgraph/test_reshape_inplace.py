"""A Reshape (Flatten, Squeeze, Unsqueeze) the memory plan runs in place launches nothing: its
output already holds its input's bytes (memory.py ``copies_onto_itself``, ``inplace_noop``).
When its input is still read later it cannot run in place and keeps its copy."""
import numpy as np

import dsl
import ops

RNG = np.random.default_rng(4)


def spans(model):
    plan = next(iter(model._plans.values())).first
    return {n.name: end - first for n, first, end in plan.spans}


def test_reshape_in_place_runs_nothing(backend):
    g = dsl.Graph("view")
    x = g.input("x", (2, 3, 4), dsl.f32)
    e = ops.Exp(x)
    r = ops.Reshape(e, np.array([6, 4], np.int64))
    u = ops.Unsqueeze(ops.Sin(r), np.array([0], np.int64))
    g.output(ops.Neg(u), "y")
    model = g.compile(backend=backend)
    reshape, unsqueeze = (n.name for n in model.graph.nodes if n.op_type in ("Reshape", "Unsqueeze"))
    steps = spans(model)
    assert steps[reshape] == 0 and steps[unsqueeze] == 0
    assert (r.name, e.name) in model.memory_plan().inplace
    xv = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(model.run({"x": xv})["y"], -np.sin(np.exp(xv).reshape(1, 6, 4)),
                                       rtol=1e-5, atol=1e-6)


def test_reshape_of_a_value_read_later_copies(backend):
    g = dsl.Graph("copy")
    x = g.input("x", (2, 6), dsl.f32)
    e = ops.Exp(x)
    r = ops.Reshape(e, np.array([3, 4], np.int64))
    g.output(ops.Add(ops.Reshape(ops.Neg(r), np.array([2, 6], np.int64)), e), "y")
    model = g.compile(backend=backend, fuse=False)
    first = next(n.name for n in model.graph.nodes if n.op_type == "Reshape")
    assert spans(model)[first] > 0
    xv = RNG.standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": xv})["y"], np.zeros((2, 6)), atol=1e-6)
