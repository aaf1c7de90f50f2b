"""Einsum on every backend against numpy.einsum."""
import numpy as np
import pytest

import ops
from dsl.opgraph.spec import VerifyError

RNG = np.random.default_rng(4)

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
    ("ii->i", [(4, 4)]),                         # diagonal
    ("ii", [(3, 3)]),                            # implicit: trace
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),  # ellipsis broadcasting, implicit output
    ("i,i", [(6,), (6,)]),                       # dot
    ("ij->ji", [(3, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),  # three operands, contracted pairwise
    ("bhqd, bhkd -> bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("i,j->ij", [(3,), (4,)]),                   # outer product
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_equations_match_numpy(backend, equation, shapes):
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    y = ops.Einsum(*xs, equation=equation, backend=backend)
    want = np.einsum(equation.replace(" ", ""), *[x.astype(np.float64) for x in xs])
    assert y.shape == want.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_integers_are_exact(backend):
    a = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    b = RNG.integers(-50, 50, (4, 2)).astype(np.int32)
    np.testing.assert_array_equal(ops.Einsum(a, b, equation="ij,jk->ik", backend=backend), a @ b)


def test_bad_equations_are_named():
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(VerifyError, match=r"has 2 operand term\(s\), got 1 inputs"):
        ops.Einsum(a, equation="ij,jk->ik", backend="interpreter")
    with pytest.raises(VerifyError, match="letter 'j' has size 3 in one place and 4 in another"):
        ops.Einsum(a, np.zeros((4, 2), np.float32), equation="ij,jk->ik", backend="interpreter")
    with pytest.raises(VerifyError, match="term 'i' has 1 letter.* rank 2"):
        ops.Einsum(a, equation="i->i", backend="interpreter")
    with pytest.raises(VerifyError, match="output letter 'z' appears in no input term"):
        ops.Einsum(a, equation="ij->z", backend="interpreter")
