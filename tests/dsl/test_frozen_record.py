"""@frozen_record behaves as @dataclass(frozen=True) (the reference here) and compiles its
methods only when a class first uses them (dsl/lang/frozen_record.py)."""
import copy
import dataclasses
import pickle
from dataclasses import field
from typing import Tuple

import pytest

from dsl.lang import ir
from dsl.lang.frozen_record import frozen_record


@frozen_record(kw_only=True)
class Base:
    tag: str = "t"
    note: str = field(default="", compare=False)


@frozen_record
class Leaf(Base):
    a: int
    b: Tuple[int, ...] = ()
    c: list = field(default_factory=list, compare=False, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefBase:
    tag: str = "t"
    note: str = field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class RefLeaf(RefBase):
    a: int
    b: Tuple[int, ...] = ()
    c: list = field(default_factory=list, compare=False, repr=False)


CALLS = [((1,), {}), ((1, (2, 3)), {}), ((), {"a": 4, "tag": "u"}), ((5,), {"note": "n", "c": [1]})]


@pytest.mark.parametrize("args,kwargs", CALLS)
def test_same_fields_equality_hash_and_repr_as_a_frozen_dataclass(args, kwargs):
    mine, ref = Leaf(*args, **kwargs), RefLeaf(*args, **kwargs)
    assert [(f.name, getattr(mine, f.name)) for f in dataclasses.fields(mine)] == \
           [(f.name, getattr(ref, f.name)) for f in dataclasses.fields(ref)]
    assert repr(mine) == repr(ref).replace("RefLeaf", "Leaf")
    assert hash(mine) == hash(ref)
    twin = Leaf(*args, **kwargs)
    assert mine == twin and not (mine != twin)
    assert dataclasses.replace(mine, note="other") == mine  # a compare=False field
    assert dataclasses.replace(mine, a=99) != mine
    assert mine != ref  # another class is never equal, as with dataclasses
    assert Leaf.__match_args__ == RefLeaf.__match_args__


def test_default_factory_makes_one_value_per_instance():
    x, y = Leaf(1), Leaf(1)
    assert x.c == [] and x.c is not y.c


def test_frozen_and_argument_errors_match_dataclasses():
    leaf = Leaf(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'a'"):
        leaf.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'a'"):
        del leaf.a
    for args, kwargs in (((), {}), ((1, (), [], 0), {}), ((1,), {"zzz": 2})):
        with pytest.raises(TypeError) as mine:
            Leaf(*args, **kwargs)
        with pytest.raises(TypeError) as ref:
            RefLeaf(*args, **kwargs)
        assert str(mine.value) == str(ref.value).replace("RefLeaf", "Leaf")


def test_a_class_that_writes_its_own_method_is_refused():
    with pytest.raises(TypeError, match="Own defines __eq__; @frozen_record makes it"):
        @frozen_record
        class Own:
            a: int

            def __eq__(self, other):
                return True


def test_methods_are_compiled_at_first_use_only():
    @frozen_record
    class Fresh:
        a: int

    assert Fresh.__init__.__name__ == "_first_init" and Fresh.__hash__.__name__ == "_first_hash"
    one = Fresh(1)
    assert Fresh.__init__.__qualname__.endswith("Fresh.__init__")  # generated, installed on the class
    assert hash(one) == hash((1,)) and Fresh.__hash__.__qualname__.endswith("Fresh.__hash__")
    assert Fresh(2) != one and Fresh.__eq__.__qualname__.endswith("Fresh.__eq__")


def test_ir_nodes_pickle_and_copy():
    node = ir.Binary("add", ir.Const(1), ir.Name("x"), loc=ir.SourceLoc("k.py", 3, 4, "x + 1"))
    for other in (pickle.loads(pickle.dumps(node)), copy.deepcopy(node), copy.copy(node)):
        assert other == node and hash(other) == hash(node) and other.loc == node.loc
    assert ir.Binary.__match_args__ == ("op", "left", "right")
    match node:
        case ir.Binary("add", ir.Const(1), right):
            assert right == ir.Name("x")
        case _:
            pytest.fail("ir nodes support structural pattern matching")
