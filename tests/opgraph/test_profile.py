"""Model.profile: per-node timing of a compiled graph (dsl/opgraph/profile.py)."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(3)


def mlp_graph():
    g = dsl.Graph("mlp")
    x = g.input("x", (None, 8), dsl.f32)
    w = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    h = ops.Relu(ops.Add(ops.MatMul(x, g.constant("w", w)), g.constant("b", b)))
    g.output(ops.Tanh(h), "y")
    return g, w, b


@pytest.mark.parametrize("backend_name", ["numba", "interpreter"])
def test_profile_times_every_node(backend_name):
    g, w, b = mlp_graph()
    model = g.compile(backend=backend_name, fuse=False)  # one row per node as written
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    prof = model.profile({"x": x}, repeat=3)
    assert [r.name for r in prof.rows] == [n.name for n in model.graph.nodes]
    assert [r.op_type for r in prof.rows] == ["MatMul", "Add", "Relu", "Tanh"]
    assert all(r.mean_s > 0 for r in prof.rows)
    assert sum(r.share for r in prof.rows) == pytest.approx(1.0)
    assert prof.total_s == pytest.approx(sum(r.mean_s for r in prof.rows)) and prof.wall_s >= prof.total_s
    assert [r.shape for r in prof.rows] == [(4, 16)] * 4
    assert all(r.impl in n.op.kernels for r, n in zip(prof.rows, model.graph.nodes))
    assert prof.repeat == 3 and prof.backend == backend_name
    # profiling runs the model's own plan: results afterwards are still right
    np.testing.assert_allclose(model.run({"x": x})["y"], np.tanh(np.maximum(x @ w + b, 0)), rtol=1e-5, atol=1e-6)
    text = str(prof)
    assert text.startswith(f"profile of 'mlp' [{backend_name}], mean of 3 run(s): ")
    lines = text.splitlines()
    assert lines[1].split() == ["node", "op", "impl", "mean", "share", "output", "shape"]
    assert len(lines) == 3 + 4 and all(r.name in text for r in prof.rows)
    md = prof.to_markdown().splitlines()
    assert md[0] == "| node | op | impl | mean | share | output shape |" and len(md) == 2 + 4
    assert prof.slowest(1)[0].mean_s == max(r.mean_s for r in prof.rows)
    assert sum(n for _, n, _, _ in prof.by_op_type()) == 4


def test_profile_of_a_graph_whose_shapes_depend_on_run_time_values():
    g = dsl.Graph("dyn")
    x = g.input("x", (2, 6), dsl.f32)
    s = g.input("s", (2,), dsl.i64)
    g.output(ops.Relu(ops.Reshape(x, s)), "y")
    model = g.compile(backend="interpreter")
    prof = model.profile({"x": np.ones((2, 6), np.float32), "s": np.array([3, 4], np.int64)}, repeat=2)
    assert [r.op_type for r in prof.rows] == ["Reshape", "Relu"]
    assert [r.shape for r in prof.rows] == [(3, 4), (3, 4)]
    assert all(r.mean_s > 0 for r in prof.rows) and sum(r.share for r in prof.rows) == pytest.approx(1.0)


def test_profile_rejects_bad_arguments():
    g, _, _ = mlp_graph()
    model = g.compile(backend="interpreter")
    with pytest.raises(ValueError, match="repeat must be an integer >= 1, got 0"):
        model.profile({"x": np.zeros((1, 8), np.float32)}, repeat=0)
    with pytest.raises(ValueError, match="missing input 'x'"):
        model.profile({}, repeat=1)
