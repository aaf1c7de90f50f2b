"""The elementwise fusion pass (ops/elementwise_fusion.py, ops/fused_elementwise.py) and the
MatMul bias rewrite (ops/matmul_fusion.py): fused graphs give the unfused graph's results (and
numpy's) on every backend, for every float dtype and broadcast pattern; values read outside a
chain are not fused away; identical chains share one compiled kernel; bad programs and inputs
are refused with the step, op or input named."""
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from math import erf as _erf

import dsl
import ops
from dsl.lang.expr_tree import Call, Const, Input, Program, ProgramBuilder
from ops.fused_elementwise import FusedElementwise
from ops.matmul_fusion import FusedMatMul

RNG = np.random.default_rng(5)
erf = np.vectorize(_erf)


def compile_both(build, backend, inputs):
    """(fused model, unfused model) of the graph ``build(g, *inputs)`` makes."""
    models = []
    for fuse in (True, False):
        g = dsl.Graph("fusion")
        ins = [g.input(name, shape, dt) for name, shape, dt in inputs]
        g.output(build(g, *ins), "y")
        models.append(g.compile(backend=backend, fuse=fuse))
    return models


def op_types(model):
    return [n.op_type for n in model.graph.nodes]


def gelu(g, f):
    return ops.Mul(ops.Mul(f, ops.Add(ops.Erf(ops.Div(f, np.float32(np.sqrt(2)))), np.float32(1))),
                   np.float32(0.5))


def test_bias_gelu_chain_is_one_kernel(backend):
    bias = RNG.standard_normal(8).astype(np.float32)
    fused, plain = compile_both(lambda g, x: gelu(g, ops.Add(x, g.constant("bias", bias))), backend,
                                [("x", (2, 3, 8), dsl.f32)])
    assert op_types(fused) == ["FusedElementwise"]
    assert op_types(plain) == ["Add", "Div", "Erf", "Add", "Mul", "Mul"]
    x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    got, want = fused.run({"x": x})["y"], plain.run({"x": x})["y"]
    f = x + bias
    np.testing.assert_allclose(got, 0.5 * f * (1 + erf(f / np.sqrt(2))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", ["f64", "f16", "bf16"])
def test_dtypes(backend, dtype):
    dt = getattr(dsl, dtype)
    x = RNG.standard_normal((4, 6)).astype(dt.np)
    fused, plain = compile_both(lambda g, a: ops.Sigmoid(ops.Tanh(ops.Mul(ops.Sub(a, a.graph.constant(
        "c", np.asarray(0.25, dt.np))), a))), backend, [("x", (4, 6), dt)])
    assert op_types(fused) == ["FusedElementwise"]
    got = fused.run({"x": x})["y"]
    assert got.dtype == x.dtype
    xf = x.astype(np.float64)
    ref = 1 / (1 + np.exp(-np.tanh((xf - 0.25) * xf)))
    tol = {"f64": 1e-12, "f16": 2e-3, "bf16": 2e-2}[dtype]  # 16-bit: one rounding at the end, not per node
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(got.astype(np.float64), plain.run({"x": x})["y"].astype(np.float64),
                               rtol=tol, atol=tol)


def every_op(g, a, b, c):
    """One DAG using every fusable op: a (3, 1, 5), b (4, 1), c bool (5,), broadcast to (3, 4, 5)."""
    half = np.float32(0.5)
    s = ops.Add(a, b)
    t = ops.Sub(ops.Mul(s, half), ops.Div(a, ops.Add(ops.Abs(b), np.float32(1))))
    u = ops.Max(ops.Relu(t), ops.LeakyRelu(ops.Neg(t), alpha=0.3))
    v = ops.Min(u, ops.Clip(s, np.float32(-1), np.float32(1.5)))
    w = ops.Where(c, ops.Sqrt(ops.Abs(v)), ops.Exp(ops.Log(ops.Add(ops.Abs(v), half))))
    p = ops.Pow(ops.Add(ops.Abs(w), half), ops.Reciprocal(ops.Add(ops.Abs(b), np.float32(2))))
    q = ops.Add(ops.Floor(p), ops.Ceil(ops.Sin(w)))
    r = ops.Add(q, ops.Round(ops.Cos(ops.Mul(p, np.float32(3)))))
    return ops.Cast(ops.Sigmoid(ops.Erf(ops.Tanh(r))), to=dsl.f64)


def every_op_ref(a, b, c):
    a, b = a.astype(np.float32), b.astype(np.float32)
    s = a + b
    t = s * np.float32(0.5) - a / (np.abs(b) + 1)
    u = np.maximum(np.maximum(t, 0), np.where(-t >= 0, -t, np.float32(0.3) * -t))
    v = np.minimum(u, np.clip(s, -1, 1.5))
    w = np.where(c, np.sqrt(np.abs(v)), np.exp(np.log(np.abs(v) + np.float32(0.5))))
    p = (np.abs(w) + np.float32(0.5)) ** (1 / (np.abs(b) + 2))
    r = np.floor(p) + np.ceil(np.sin(w)) + np.round(np.cos(p * 3))
    return (1 / (1 + np.exp(-erf(np.tanh(r))))).astype(np.float64)


def test_every_fusable_op_with_broadcasting(backend):
    inputs = [("a", (3, 1, 5), dsl.f32), ("b", (None, 1), dsl.f32), ("c", (5,), dsl.bool_)]
    fused, plain = compile_both(every_op, backend, inputs)
    assert op_types(fused) == ["FusedElementwise"], op_types(fused)
    assert len(plain.graph.nodes) > 30
    feeds = {"a": RNG.standard_normal((3, 1, 5)).astype(np.float32),
             "b": RNG.standard_normal((4, 1)).astype(np.float32), "c": np.array([1, 0, 1, 1, 0], bool)}
    got = fused.run(feeds)["y"]
    assert got.shape == (3, 4, 5) and got.dtype == np.float64
    np.testing.assert_allclose(got, plain.run(feeds)["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, every_op_ref(**feeds), rtol=1e-5, atol=1e-5)


def test_a_value_read_outside_the_chain_ends_it(backend):
    def build(g, x):
        s = ops.Add(x, np.float32(1))          # read by Mul and by ReduceSum: stays a node
        y = ops.Tanh(ops.Mul(s, np.float32(2)))
        return ops.Add(y, ops.ReduceSum(s, np.array([1], np.int64), keepdims=1))
    fused, plain = compile_both(build, backend, [("x", (3, 4), dsl.f32)])
    assert op_types(fused) == ["Add", "ReduceSum", "FusedElementwise"]
    fe = fused.graph.nodes[-1]
    assert [s.op for s in fe.op.program.steps] == ["Mul", "Tanh", "Add"]  # three steps
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(fused.run({"x": x})["y"], plain.run({"x": x})["y"], rtol=1e-6)


def test_graph_outputs_are_not_fused_away(backend):
    g = dsl.Graph("outs")
    x = g.input("x", (5,), dsl.f32)
    s = ops.Exp(x)
    g.output(s, "s")
    g.output(ops.Neg(ops.Mul(s, np.float32(3))), "y")
    m = g.compile(backend=backend)
    assert op_types(m) == ["Exp", "FusedElementwise"]
    xv = RNG.standard_normal(5).astype(np.float32)
    out = m.run({"x": xv})
    np.testing.assert_allclose(out["s"], np.exp(xv), rtol=1e-6)
    np.testing.assert_allclose(out["y"], -3 * np.exp(xv), rtol=1e-6)


def test_identical_chains_share_one_kernel(backend):
    def build(g, x, z):
        return ops.Add(ops.Tanh(ops.Mul(x, np.float32(2))), ops.Tanh(ops.Mul(z, np.float32(3))))
    g = dsl.Graph("twice")
    x, z = g.input("x", (6,), dsl.f32), g.input("z", (6,), dsl.f32)
    a = ops.Relu(ops.Sub(x, np.float32(1)))
    b = ops.Relu(ops.Sub(z, np.float32(2)))
    g.output(ops.Sigmoid(a), "ya")
    g.output(ops.Sigmoid(b), "yb")
    m = g.compile(backend=backend)
    nodes = m.graph.nodes
    assert op_types(m) == ["FusedElementwise", "FusedElementwise"]
    assert nodes[0].op == nodes[1].op  # same program: the constants are inputs, not code
    impls = [n.op.implementation([t.spec for t in n.inputs], backend) for n in nodes]
    assert impls[0] is impls[1]
    xv, zv = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
    out = m.run({"x": xv, "z": zv})
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    np.testing.assert_allclose(out["ya"], sig(np.maximum(xv - 1, 0)), rtol=1e-6)
    np.testing.assert_allclose(out["yb"], sig(np.maximum(zv - 2, 0)), rtol=1e-6)
    del build


def test_fused_op_eager_and_pickle(backend):
    b = ProgramBuilder()
    b.call("Add", b.call("Mul", b.input(0), b.input(1)), b.input(0))
    op = FusedElementwise(program=b.program())
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    c = RNG.standard_normal((3,)).astype(np.float32)
    np.testing.assert_allclose(op(a, c, backend=backend), a * c + a, rtol=1e-6)
    again = pickle.loads(pickle.dumps(op))
    assert again == op and again.program == op.program and hash(again) == hash(op)


def _one(*steps):
    return Program(tuple(steps))


@pytest.mark.parametrize("program,message", [
    (_one(Call("Tan", (Input(0),))), "Tan is not an op that fuses; accepted: Abs@6, Add@7"),
    (_one(Call("Add", (Input(0),))), "Add takes 2 argument(s)"),
    (_one(Call("Add", (Input(0), None))), "Add takes 2 argument(s)"),
    (_one(Call("LeakyRelu", (Input(0),))), "LeakyRelu takes 1 argument(s) and the attributes alpha"),
    (_one(Call("Relu", (Input(0),), attrs=(("alpha", 1.0),))), "Relu takes 1 argument(s)"),
    (_one(Call("Neg", (Input(3),))), "reads x3, but the node has 1 input(s)"),
    (_one(Call("Neg", (Input(0),), dtype="f64")), "argument 0 is f32, the step takes f64 there"),
    (_one(Call("Clip", (Input(0), Const(0.0), Const(1.0)), since=12)), "Clip@12 is not an op that fuses"),
    ("t0 = f32(x0)", "expects Program, got str"),
])
def test_bad_programs_are_refused(program, message):
    with pytest.raises((dsl.VerifyError, TypeError)) as e:
        FusedElementwise(program=program)(np.zeros(3, np.float32), backend="interpreter")
    assert message in str(e.value)


def test_bad_inputs_are_refused():
    op = FusedElementwise(program=_one(Call("Neg", (Input(0),))))
    with pytest.raises(dsl.VerifyError, match=r"input x0 is i32\[3\]; accepted dtypes: f16, bf16, f32, f64, bool"):
        op(np.zeros(3, np.int32), backend="interpreter")
    with pytest.raises(dsl.VerifyError, match="dtype 'i32'; accepted: f16, bf16, f32, f64"):
        op.replace(dtype="i32")(np.zeros(3, np.float32), backend="interpreter")
    with pytest.raises(dsl.VerifyError, match="do not broadcast"):
        op.replace(program=_one(Call("Add", (Input(0), Input(1)))))(np.zeros(3, np.float32),
                                                                   np.zeros(4, np.float32), backend="interpreter")


# --------------------------------------------------------------------------- MatMul + bias

@pytest.mark.parametrize("m,k,n", [(3, 5, 4), (64, 64, 64)], ids=["small", "packed"])
def test_matmul_bias_is_one_gemm(backend, m, k, n):
    w = RNG.standard_normal((k, n)).astype(np.float32)
    bias = RNG.standard_normal((1, n)).astype(np.float32)
    fused, plain = compile_both(lambda g, x: ops.Relu(ops.Add(g.constant("bias", bias), ops.MatMul(
        x, g.constant("w", w)))), backend, [("x", (2, m, k), dsl.f32)])
    assert op_types(fused) == ["FusedMatMul", "Relu"]
    x = RNG.standard_normal((2, m, k)).astype(np.float32)
    got = fused.run({"x": x})["y"]
    np.testing.assert_allclose(got, np.maximum(x @ w + bias, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, plain.run({"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_matmul_add_of_a_per_batch_matrix_is_not_a_bias(backend):
    """A (2, 3, 4) addend differs per batch entry: the GEMM's C is one matrix for all of them."""
    w = RNG.standard_normal((5, 4)).astype(np.float32)
    z = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    fused, _ = compile_both(lambda g, x: ops.Add(ops.MatMul(x, g.constant("w", w)), g.constant("z", z)),
                            backend, [("x", (2, 3, 5), dsl.f32)])
    assert op_types(fused) == ["MatMul", "Add"]
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    np.testing.assert_allclose(fused.run({"x": x})["y"], x @ w + z, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k,n", [(5, 8, 16), (64, 64, 64)], ids=["small", "packed"])
def test_attention_scores_scale_and_mask_are_one_gemm(backend, m, k, n):
    """Q·K / 8 + mask (the mask broadcast over batch and heads) and Q·K · 0.125 + mask are one
    FusedMatMul (alpha, C) giving the unfused graph's results; so is a (m, 1) column bias."""
    q = RNG.standard_normal((2, 3, m, k)).astype(np.float32)
    kt = RNG.standard_normal((2, 3, k, n)).astype(np.float32)
    mask = np.triu(np.full((m, n), -1e4, np.float32), k=1)
    col = RNG.standard_normal((m, 1)).astype(np.float32)
    cases = [(lambda g, a, b: ops.Add(ops.Div(ops.MatMul(a, b), np.float32(8)), g.constant("mask", mask)),
              q @ kt / 8 + mask),
             (lambda g, a, b: ops.Add(g.constant("mask", mask), ops.Mul(np.float32(0.125), ops.MatMul(a, b))),
              q @ kt / 8 + mask),
             (lambda g, a, b: ops.Add(ops.MatMul(a, b), g.constant("col", col)), q @ kt + col)]
    for build, want in cases:
        fused, plain = compile_both(build, backend, [("q", q.shape, dsl.f32), ("k", kt.shape, dsl.f32)])
        assert op_types(fused) == ["FusedMatMul"]
        got = fused.run({"q": q, "k": kt})["y"]
        np.testing.assert_array_equal(got, plain.run({"q": q, "k": kt})["y"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_only_exact_scales_fuse(backend):
    """Div by 3 (1/3 is not exact) stays a node; a scale after a bias would scale the bias; an
    integer product takes no alpha."""
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    w = RNG.standard_normal((6, 5)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    fused, _ = compile_both(lambda g, a: ops.Div(ops.MatMul(a, g.constant("w", w)), np.float32(3)), backend,
                            [("x", x.shape, dsl.f32)])
    assert op_types(fused) == ["MatMul", "Div"]
    np.testing.assert_allclose(fused.run({"x": x})["y"], x @ w / 3, rtol=1e-5, atol=1e-5)
    fused, _ = compile_both(lambda g, a: ops.Mul(ops.Add(ops.MatMul(a, g.constant("w", w)), g.constant("b", b)),
                                                 np.float32(0.5)), backend, [("x", x.shape, dsl.f32)])
    assert op_types(fused) == ["FusedMatMul", "Mul"]
    np.testing.assert_allclose(fused.run({"x": x})["y"], (x @ w + b) * 0.5, rtol=1e-5, atol=1e-5)
    xi, wi = np.arange(24, dtype=np.int32).reshape(4, 6), np.ones((6, 5), np.int32)
    fused, _ = compile_both(lambda g, a: ops.Mul(ops.MatMul(a, g.constant("w", wi)), np.int32(2)), backend,
                            [("x", xi.shape, dsl.i32)])
    assert op_types(fused) == ["MatMul", "Mul"]
    np.testing.assert_array_equal(fused.run({"x": xi})["y"], xi @ wi * 2)


def test_fused_matmul_bad_bias():
    a, b = np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32)
    with pytest.raises(dsl.VerifyError, match=r"FusedMatMul bias .* must be f32 of shape \(4,\), \(1, ..., 4\) "
                                              r"or \(1, ..., 2, 4\)"):
        FusedMatMul()(a, b, np.zeros((3, 4), np.float32), backend="interpreter")
    with pytest.raises(dsl.VerifyError, match=r"FusedMatMul alpha=2.0 needs float inputs"):
        FusedMatMul(alpha=2.0)(a.astype(np.int32), b.astype(np.int32), backend="interpreter")
    np.testing.assert_allclose(FusedMatMul(alpha=0.5)(a + 1, b + 1, np.ones((2, 1), np.float32), backend="interpreter"),
                               np.full((2, 4), 2.5, np.float32))
    np.testing.assert_allclose(FusedMatMul()(a + 1, b + 1, np.arange(4, dtype=np.float32), backend="interpreter"),
                               np.full((2, 4), 3, np.float32) + np.arange(4))


def test_a_chain_after_a_blocked_producer_stays_blocked(backend):
    """Sin -> Mul(0.5) -> Cos after an nchwc16 Conv is one FusedElementwise on the blocked
    arrays (the scalar stays plain); the padding lanes it fills (cos 0 = 1) are re-zeroed."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "opgraph"))  # tests/opgraph/oplayer_testops.py
    import oplayer_testops as L
    g = dsl.Graph("blocked")
    x = g.input("x", (1, 20, 2, 3), dsl.f32)
    w = g.constant("w", RNG.standard_normal((18, 20, 3, 3)).astype(np.float32) * 0.2)
    c = L.Conv3x3(x, w)  # an nchwc16 producer
    g.output(L.LaneSum(ops.Cos(ops.Mul(ops.Sin(c), np.float32(0.5)))), "s")  # LaneSum adds the padding lanes
    xv = RNG.standard_normal((1, 20, 2, 3)).astype(np.float32)
    blocked = g.compile(backend=backend)
    (fe,) = [n for n in blocked.graph.nodes if n.op_type == "FusedElementwise"]
    assert fe.outputs[0].spec.format == "nchwc16" and [t.spec.format for t in fe.inputs] == ["nchwc16", "plain"]
    assert fe.inputs[0].producer.op_type == "Conv3x3"  # no reorder between them
    np.testing.assert_allclose(blocked.run({"x": xv})["s"],
                               g.compile(backend=backend, formats="plain").run({"x": xv})["s"], rtol=1e-5)
