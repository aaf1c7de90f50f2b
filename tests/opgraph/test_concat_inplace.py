"""Concat without copies (dsl/opgraph/concat_inplace.py, memory.py ``views``): producers write
into their slice of the Concat's output, which then runs no launch; results equal the copying
plan's on every backend; the cases whose slices are not contiguous, or whose inputs are read
elsewhere, made outside a node or the Concat's output a graph output, keep the copy."""
import numpy as np
import pytest

import dsl
import ops

RNG = np.random.default_rng(9)
SHAPE = (1, 3, 4, 5)


def build(axis=1, shape=SHAPE, extra_reader=False, raw_input=False, concat_is_output=False):
    g = dsl.Graph("cat")
    x = g.input("x", shape, dsl.f32)
    a = ops.Tanh(x)
    b = ops.Exp(x)
    c = ops.Concat(a, x if raw_input else b, axis=axis)
    if concat_is_output:
        g.output(c, "y")
    else:
        g.output(ops.Neg(c), "y")
        if extra_reader:
            g.output(ops.Sin(b), "z")
    return g


def reference(x, axis=1, extra_reader=False, raw_input=False, concat_is_output=False):
    c = np.concatenate([np.tanh(x), x if raw_input else np.exp(x)], axis=axis)
    return c if concat_is_output else -c


def concat_span(model):
    plan = next(iter(model._plans.values())).first
    return next((first, end) for n, first, end in plan.spans if n.op_type == "Concat")


def test_producers_write_into_the_concat(backend):
    model = build().compile(backend=backend)
    copying = build().compile(backend=backend, fuse=False)
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    got = model.run({"x": x})["y"]
    np.testing.assert_allclose(got, reference(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got, copying.run({"x": x})["y"])
    plan = model.memory_plan()
    a, b = (n.outputs[0].name for n in model.graph.nodes[:2])
    cat = model.graph.nodes[2].outputs[0].name
    half = int(np.prod(SHAPE)) * 4
    assert plan.views == {a: (cat, 0), b: (cat, half)}
    assert a not in plan.assign and b not in plan.assign and cat in plan.assign
    first, end = concat_span(model)
    assert first == end  # the Concat has no launch left
    assert copying.memory_plan().views == {}
    assert plan.arena_bytes < copying.memory_plan().arena_bytes
    again = model.run({"x": x + 1})["y"]  # a second run reuses the same views
    np.testing.assert_allclose(again, reference(x + 1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", [
    dict(axis=2),                              # rows of a channel: strided slices
    dict(axis=1, shape=(2, 3, 4, 5)),          # batch 2: each input is two blocks
    dict(extra_reader=True),                   # Exp's output is also read by a Sin
    dict(raw_input=True),                      # a graph input has no producer to redirect
    dict(concat_is_output=True),               # graph outputs are fresh arrays per run
], ids=["axis2", "batch2", "extra-reader", "graph-input", "concat-output"])
def test_cases_that_keep_the_copy(backend, case):
    case = dict(case)  # the parametrized dict is shared by every backend
    shape = case.pop("shape", SHAPE)
    model = build(shape=shape, **case).compile(backend=backend)
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": x})["y"], reference(x, **case), rtol=1e-6, atol=1e-6)
    assert model.memory_plan().views == {}
    first, end = concat_span(model)
    assert end > first
