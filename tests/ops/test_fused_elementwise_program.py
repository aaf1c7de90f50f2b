"""A FusedElementwise program as data (dsl/lang/expr_tree.py) through the op library: the kernel
text is written from the steps (ops/fused_elementwise.py), export writes one standard node per
step (ops/fused_elementwise_export.py) or, where the opset cannot, keeps the com.opdsl node with
the program as a JSON attribute; both load back with ``dsl.load_onnx`` and give numpy's values on
every backend.  A malformed attribute is an OnnxImportError naming the node and what is wrong."""
import collections
import math

import numpy as np
import pytest

import dsl
import ops
from dsl.lang.expr_tree import Call, Const, Input, Program, ProgramBuilder
from ops.fused_elementwise import FusedElementwise, program_lines

onnx = pytest.importorskip("onnx")
RNG = np.random.default_rng(12)


def _program() -> Program:
    """round(gelu(x0) * sigmoid(x1)) / 4, over x0 (3, 4) and x1 (4,)."""
    b = ProgramBuilder()
    t = b.call("Erf", b.call("Div", b.input(0), b.const(math.sqrt(2))))
    gelu = b.call("Mul", b.call("Mul", b.input(0), b.call("Add", t, b.const(1))), b.const(0.5))
    b.call("Div", b.call("Round", b.call("Mul", gelu, b.call("Sigmoid", b.input(1)))), b.const(4))
    return b.program()


def _want(x, y):
    erf = np.vectorize(math.erf)
    gelu = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    return np.round(gelu * (1 / (1 + np.exp(-y)))) / 4


def _graph(opset: int):
    g = dsl.Graph("program")
    g.opset_imports[""] = opset
    x, y = g.input("x", (3, 4), dsl.f32), g.input("y", (4,), dsl.f32)
    g.output(FusedElementwise(x, y, program=_program()), "z")
    return g


FEEDS = {"x": RNG.uniform(-3, 3, (3, 4)).astype(np.float32), "y": RNG.uniform(-3, 3, 4).astype(np.float32)}


def test_kernel_text_is_written_from_the_steps():
    lines = program_lines(_program(), ["f32", "f32"])
    assert lines[:3] == [f"t0 = f32(x0 / {math.sqrt(2)!r})", "t1 = f32(dsl.erf(t0))", "t2 = f32(t1 + 1.0)"]
    # Sigmoid is three expressions (never overflows), Round is dsl.rint
    assert lines[5:8] == ["t5 = f32(dsl.exp(-abs(x1)))", "t6 = f32(1 / (1 + t5))",
                          "t7 = f32(t6 if x1 >= 0 else t5 * t6)"]
    assert lines[8:] == ["t8 = f32(t4 * t7)", "t9 = f32(dsl.rint(t8))", "t10 = f32(t9 / 4.0)"]
    f64 = Program((Call("Neg", (Input(0),), "f64"),))
    assert program_lines(f64, ["f64"]) == ["t0 = f64(-x0)"]
    assert program_lines(Program((Call("Neg", (Input(0),)),)), ["f16"]) == ["t0 = f32(-x0)"]  # f16 loads as f32


def test_standard_form_round_trip(backend):
    """Opset 17 writes every step as its op; load_onnx fuses them again into one node."""
    exported = _graph(17).to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    kinds = collections.Counter(n.op_type for n in exported.graph.node)
    assert not any(n.domain for n in exported.graph.node)
    assert {k: kinds[k] for k in ("Erf", "Sigmoid", "Round", "Div")} == {"Erf": 1, "Sigmoid": 1, "Round": 1, "Div": 2}
    model = dsl.load_onnx(exported, backend=backend)
    assert [n.op_type for n in model.graph.nodes] == ["FusedElementwise"]
    np.testing.assert_allclose(model.run(FEEDS)["z"], _want(**FEEDS), rtol=1e-5, atol=1e-6)


def test_custom_node_round_trip(backend):
    """At opset 9 (no Round) the node stays com.opdsl, its program a JSON attribute that
    load_onnx reads back into an equal program."""
    exported = _graph(9).to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    (node,) = exported.graph.node
    assert (node.domain, node.op_type) == ("com.opdsl", "FusedElementwise")
    (attr,) = [a for a in node.attribute if a.name == "program"]
    assert attr.type == onnx.AttributeProto.STRING and attr.s.decode().startswith('{"format":"opdsl.elementwise/1"')
    model = dsl.load_onnx(exported, backend=backend)
    (back,) = model.graph.nodes
    assert back.op.program == _program()
    np.testing.assert_allclose(model.run(FEEDS)["z"], _want(**FEEDS), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("text, message", [
    ("t0 = f32(x0 * x1)", "Python-text program opdsl wrote before programs became data"),
    ('{"format":"opdsl.elementwise/1","steps":[{"op":"Tan","args":[{"input":0}]}]}',
     "Tan is not an op that fuses; accepted: Abs@6"),
    ('{"format":"opdsl.elementwise/1","steps":[{"op":"Add","args":[{"input":0},{"input":5}]}]}',
     "reads x5, but the node has 2 input(s)"),
    ('{"format":"opdsl.elementwise/1","steps":[{"op":"Add","args":[{"input":0},{"inp":1}]}]}', "steps[0]"),
])
def test_malformed_attribute_names_the_node(text, message):
    exported = _graph(9).to_onnx()
    node = exported.graph.node[0]
    node.name = "fused_1"
    for a in node.attribute:
        if a.name == "program":
            a.s = text.encode()
    with pytest.raises(dsl.OnnxImportError) as e:
        dsl.load_onnx(exported, backend="interpreter")
    assert "fused_1" in str(e.value) and message in str(e.value)


def test_literal_and_optional_bounds_of_clip(backend):
    """Clip's bounds as literals (Clip-6 attributes become Const arguments) or absent."""
    g = dsl.Graph("clip")
    x = g.input("x", (6,), dsl.f32)
    g.output(ops.Mul(ops.ClipV6(x, min=-0.5, max=0.75), np.float32(2)), "y")
    model = g.compile(backend=backend)
    (node,) = model.graph.nodes
    assert node.op.program.steps[0].args[1:] == (Const(-0.5), Const(0.75))
    xv = np.linspace(-2, 2, 6, dtype=np.float32)
    np.testing.assert_allclose(model.run({"x": xv})["y"], np.clip(xv, -0.5, 0.75) * 2, rtol=1e-6)
    only_max = FusedElementwise(program=Program((Call("Clip", (Input(0), None, Const(0.25))),)))
    np.testing.assert_allclose(only_max(xv, backend=backend), np.minimum(xv, 0.25), rtol=1e-6)


def test_program_checked_in_a_fresh_process_loads_its_ops():
    """The library loads lazily: a program read back (a model plan cache entry, a file) may call
    ops whose modules nobody imported yet (Div, Erf).  Checking it imports them instead of calling
    them "not an op that fuses", which made every warm load of the BERT layer rebuild its model."""
    import subprocess
    import sys
    from pathlib import Path
    code = ("from dsl.lang.expr_tree import Call, Const, Input, Program, Ref\n"
            "from ops.fused_elementwise import program_lines\n"
            "p = Program((Call('Div', (Input(0), Const(1.5))), Call('Erf', (Ref(0),)), Call('Tan', (Ref(1),))))\n"
            "try:\n"
            "    program_lines(p, ['f32'])\n"
            "except Exception as e:\n"
            "    print(e)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    # Div and Erf pass; the step that really does not fuse is still refused by name, with every
    # op that does listed (the whole library loaded to say so)
    assert "step t2 = Tan(t1): f32: Tan is not an op that fuses" in out.stdout, out.stdout
    assert "Div@7" in out.stdout and "Erf@9" in out.stdout, out.stdout
