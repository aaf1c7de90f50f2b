"""The program of a FusedElementwise node as data (dsl/lang/expr_tree.py): built step by step,
equal and hashed by value, pickled, written to its JSON attribute form and read back; a
malformed tree or JSON text is refused with the step or key named and what is accepted."""
import math
import pickle

import pytest

from dsl.lang.expr_tree import FORMAT, Call, Const, Input, Program, ProgramBuilder, Ref


def _gelu() -> Program:
    b = ProgramBuilder()
    t = b.call("Erf", b.call("Div", b.input(0), b.const(math.sqrt(2))))
    half = b.call("Mul", b.input(0), b.call("Add", t, b.const(1)))
    b.call("Mul", half, b.const(0.5))
    return b.program()


def test_builder_numbers_the_steps():
    p = _gelu()
    assert [s.op for s in p.steps] == ["Div", "Erf", "Add", "Mul", "Mul"]
    assert p.steps[1].args == (Ref(0),) and p.steps[3].args == (Input(0), Ref(2))
    assert p.n_inputs == 1 and p.dtype == "f32"
    assert str(p).splitlines()[0] == f"t0 = Div(x0, {math.sqrt(2)!r}): f32"
    assert str(p).splitlines()[-1] == "t4 = Mul(t3, 0.5): f32"


def test_equal_hash_and_pickle_by_value():
    a, b = _gelu(), _gelu()
    assert a == b and hash(a) == hash(b) and a is not b
    assert pickle.loads(pickle.dumps(a)) == a
    c = Program(a.steps[:-1] + (Call("Mul", (Ref(3), Const(0.25))),))
    assert c != a
    leaky = Call("LeakyRelu", (Input(0),), attrs={"alpha": 0.5})
    assert leaky == Call("LeakyRelu", (Input(0),), attrs=(("alpha", 0.5),)) and leaky.attr("alpha") == 0.5


def test_json_round_trip():
    b = ProgramBuilder()
    t = b.call("Clip", b.input(0), None, b.const(6), since=11)
    b.call("LeakyRelu", b.call("Cast", t, dtype="f64"), dtype="f64", alpha=0.125)
    p = b.program()
    text = p.to_json()
    assert FORMAT in text and "import" not in text
    assert Program.from_json(text) == p
    assert Program.from_onnx_attribute(p.onnx_attribute()) == p


@pytest.mark.parametrize("make, message", [
    (lambda: Program(()), "Program needs at least one step"),
    (lambda: Program((Call("Neg", (Ref(0),)),)), "step 0 (Neg(t0): f32) reads t0; it may read inputs and constants"),
    (lambda: Program((Call("Neg", (Input(0),)), Call("Neg", (Ref(1),)))), "may read the earlier steps t0..t0"),
    (lambda: Program(("t0 = f32(x0)",)), "Program step 0 is str"),
    (lambda: Call("Neg", (Input(0),), dtype="f16"), "dtype 'f16'; accepted: f32, f64"),
    (lambda: Call("Neg", ("x0",)), "args must be a tuple of Input, Ref, Const or None"),
    (lambda: Call("os.system", (Input(0),)), "Call op must be an ONNX op type"),
    (lambda: Call("LeakyRelu", (Input(0),), attrs=(("alpha", "1"),)), "attrs must be (name, finite number) pairs"),
    (lambda: Call("Neg", (Input(0),), since=0), "since must be an opset version >= 1"),
    (lambda: Const(float("nan")), "Const value must be a finite int or float"),
    (lambda: Input(-1), "Input index must be an int >= 0"),
])
def test_malformed_trees_are_refused(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert message in str(e.value)


@pytest.mark.parametrize("text, message", [
    ("t0 = f32(x0 * 2)", "Python-text program opdsl wrote before programs became data"),
    ("{", "is not the JSON form 'opdsl.elementwise/1'"),
    ('{"format": "opdsl.elementwise/9", "steps": []}', "format 'opdsl.elementwise/9'; accepted: 'opdsl.elementwise/1'"),
    ('{"format": "opdsl.elementwise/1", "steps": 3}', "'steps' must be a list"),
    ('{"format": "opdsl.elementwise/1", "steps": [{"op": "Neg", "args": [{"input": 0}], "code": 1}]}',
     "steps[0] "),
    ('{"format": "opdsl.elementwise/1", "steps": [{"op": "Neg", "args": [{"name": "x"}]}]}',
     'accepted null, {"input": k}, {"step": k} or {"const": number}'),
    ('{"format": "opdsl.elementwise/1", "steps": [{"op": "Neg", "args": [{"step": 0}]}]}', "reads t0"),
    ('{"format": "opdsl.elementwise/1", "steps": [{"op": "Neg", "args": [{"const": "1e400"}]}]}',
     "Const value must be a finite int or float"),
])
def test_malformed_json_is_refused(text, message):
    with pytest.raises(ValueError) as e:
        Program.from_json(text)
    assert message in str(e.value)
