"""ONNX Einsum (opset 12+): explicit and implicit equations, ellipsis broadcasting, repeated
letters in a term (diagonals) and any number of operands.

The equation is planned once per input shapes: operands are contracted left to right, two at
a time, each step keeping only the letters still needed by later operands or the output.  A
step is one launch of ``einsum_kernel``, a strided product-sum: the output's letters (at most
six) index the result, the summed letters (at most four) are looped over, and each operand
reaches a letter through a stride (the sum of its axes' strides for a repeated letter, 0 where
it lacks the letter or broadcasts it).  It is the general path; matmul-shaped equations do not
go to the packed GEMM yet.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import dsl
from dsl import In, Out, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import NUMERIC, same_dtype

T = dsl.TypeVar("T")
MAX_OUT = 6
MAX_SUM = 4
ELLIPSIS_LETTERS = "0123456789"  # stand-ins for ellipsis axes: never letters of an equation


@dsl.kernel
def einsum_kernel(a: In[T], b: In[T], y: Out[T], geo: In[i64, 2]):
    """y[o0..o5] = Σ_u a[Σ o·sa + Σ u·sa'] · b[...]; geo rows: dims (6 kept, 4 summed), a's strides, b's."""
    d1 = geo[0, 1]
    d2 = geo[0, 2]
    d3 = geo[0, 3]
    d4 = geo[0, 4]
    d5 = geo[0, 5]
    e1 = geo[0, 7]
    e2 = geo[0, 8]
    e3 = geo[0, 9]
    summed = geo[0, 6] * e1 * e2 * e3
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        r = i
        o5 = r % d5
        r = r // d5
        o4 = r % d4
        r = r // d4
        o3 = r % d3
        r = r // d3
        o2 = r % d2
        r = r // d2
        o1 = r % d1
        o0 = r // d1
        pa = o0 * geo[1, 0] + o1 * geo[1, 1] + o2 * geo[1, 2] + o3 * geo[1, 3] + o4 * geo[1, 4] + o5 * geo[1, 5]
        pb = o0 * geo[2, 0] + o1 * geo[2, 1] + o2 * geo[2, 2] + o3 * geo[2, 3] + o4 * geo[2, 4] + o5 * geo[2, 5]
        acc = 0
        for s in range(summed):
            q = s
            u3 = q % e3
            q = q // e3
            u2 = q % e2
            q = q // e2
            u1 = q % e1
            u0 = q // e1
            acc += (a.flat[pa + u0 * geo[1, 6] + u1 * geo[1, 7] + u2 * geo[1, 8] + u3 * geo[1, 9]]
                    * b.flat[pb + u0 * geo[2, 6] + u1 * geo[2, 7] + u2 * geo[2, 8] + u3 * geo[2, 9]])
        y.flat[i] = acc


# --------------------------------------------------------------------------- planning

@dataclass(frozen=True)
class Equation:
    """A parsed equation: one letter string per operand (ellipsis expanded) and the output's."""
    terms: Tuple[str, ...]
    output: str


def parse(equation: str, ranks: Sequence[int]) -> Equation:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise VerifyError(f"Einsum equation {equation!r} has {len(terms)} operand term(s), got {len(ranks)} inputs")
    for t in terms + ([rhs] if arrow else []):
        body = t.replace("...", "")
        if "." in body or not all(c.isalpha() and c.isascii() for c in body):
            raise VerifyError(f"Einsum equation {equation!r}: term {t!r} may hold only letters a-z, A-Z and one '...'")
        if t.count("...") > 1:
            raise VerifyError(f"Einsum equation {equation!r}: term {t!r} has more than one ellipsis")
    widths = []
    for t, rank in zip(terms, ranks):
        letters = len(t.replace("...", ""))
        n = rank - letters if "..." in t else 0
        if n < 0 or (("..." not in t) and letters != rank):
            raise VerifyError(f"Einsum equation {equation!r}: term {t!r} has {letters} letter(s) but its input has "
                              f"rank {rank}")
        widths.append(n)
    ell = max(widths, default=0)
    if ell > len(ELLIPSIS_LETTERS):
        raise VerifyError(f"Einsum ellipsis covers {ell} axes; at most {len(ELLIPSIS_LETTERS)} are supported")
    full = ELLIPSIS_LETTERS[:ell]
    expanded = tuple(t.replace("...", full[ell - n:]) for t, n in zip(terms, widths))
    if arrow:
        output = rhs.replace("...", full)
        for c in output:
            if not any(c in t for t in expanded):
                raise VerifyError(f"Einsum equation {equation!r}: output letter {c!r} appears in no input term")
        if len(set(output)) != len(output):
            raise VerifyError(f"Einsum equation {equation!r}: output {rhs!r} repeats a letter")
    else:
        counts: Dict[str, int] = {}
        for t in expanded:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        output = full + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in full))
    return Equation(expanded, output)


def letter_sizes(eq: Equation, shapes: Sequence[Sequence[Optional[int]]], equation: str) -> Dict[str, Optional[int]]:
    """Each letter's size; ellipsis axes broadcast (1 against n), other letters must agree."""
    sizes: Dict[str, Optional[int]] = {}
    for t, shape in zip(eq.terms, shapes):
        for c, d in zip(t, shape):
            old = sizes.get(c, 1 if c in ELLIPSIS_LETTERS else None)
            if d is None or old is None:
                sizes[c] = d if old is None else old
            elif old != d:
                if c in ELLIPSIS_LETTERS and 1 in (old, d):
                    sizes[c] = max(old, d)
                else:
                    raise VerifyError(f"Einsum equation {equation!r}: letter {c!r} has size {old} in one place and "
                                      f"{d} in another")
            sizes.setdefault(c, d)
    return sizes


def steps(eq: Equation) -> List[Tuple[int, int, str]]:
    """Pairwise plan: (left, right, result letters); operand indices count intermediates
    after the inputs (input n is the first intermediate).  A lone operand is paired with -1."""
    live = list(range(len(eq.terms)))
    letters = {i: t for i, t in enumerate(eq.terms)}
    plan = []
    nxt = len(eq.terms)
    if len(live) == 1:
        return [(0, -1, eq.output)]
    while len(live) > 1:
        a, b = live[0], live[1]
        rest = "".join(letters[i] for i in live[2:]) + eq.output
        if len(live) == 2:
            keep = eq.output
        else:
            seen = []
            for c in letters[a] + letters[b]:
                if c in rest and c not in seen:
                    seen.append(c)
            keep = "".join(seen)
        plan.append((a, b, keep))
        letters[nxt] = keep
        live = [nxt] + live[2:]
        nxt += 1
    return plan


def geometry(left: str, right: str, keep: str, sizes: Dict[str, int], a_shape, b_shape) -> np.ndarray:
    """The (3, 10) i64 table einsum_kernel reads for one contraction."""
    summed = [c for c in dict.fromkeys(left + right) if c not in keep]
    if len(keep) > MAX_OUT or len(summed) > MAX_SUM:
        raise VerifyError(f"Einsum step {left},{right}->{keep} keeps {len(keep)} and sums {len(summed)} letters; "
                          f"supported: at most {MAX_OUT} kept and {MAX_SUM} summed per contraction")
    geo = np.zeros((3, MAX_OUT + MAX_SUM), np.int64)
    geo[0, :] = 1
    kept = [None] * (MAX_OUT - len(keep)) + list(keep)      # kept letters right-aligned
    sums = list(summed) + [None] * (MAX_SUM - len(summed))
    slots = kept + sums
    for row, (term, shape) in ((1, (left, a_shape)), (2, (right, b_shape))):
        strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]
        for k, c in enumerate(term):
            if shape[k] == 1:
                continue  # broadcast (or size 1): the stride never moves
            geo[row, slots.index(c)] += strides[k]
    for k, c in enumerate(slots):
        if c is not None:
            geo[0, k] = sizes[c]
    return geo


@dsl.op("Einsum", since=12)
class Einsum(dsl.Op):
    """Einstein summation over any number of operands; see the module docstring."""

    equation: str = ""
    kernels = {"default": einsum_kernel}

    def _plan(self, inputs):
        eq = parse(self.equation, [x.ndim for x in inputs])
        sizes = letter_sizes(eq, [x.shape for x in inputs], self.equation)
        return eq, sizes

    def verify(self, *inputs):
        if not inputs:
            raise VerifyError("Einsum needs at least one input")
        same_dtype("Einsum", *inputs)
        if inputs[0].dtype not in NUMERIC:
            raise VerifyError(f"Einsum inputs must be numeric, got {inputs[0]}")
        self._plan(inputs)

    def infer(self, *inputs):
        eq, sizes = self._plan(inputs)
        return TensorSpec(tuple(sizes[c] for c in eq.output), inputs[0].dtype)

    def run(self, impl, inputs, outputs, backend):
        eq, sizes = self._plan(inputs)
        arrays = list(inputs)
        terms = list(eq.terms)
        plan = steps(eq)
        one = np.ones(1, outputs[0].dtype)
        for n, (a, b, keep) in enumerate(plan):
            last = n == len(plan) - 1
            shape = tuple(sizes[c] for c in keep)
            y = outputs[0] if last else np.empty(shape, outputs[0].dtype)
            left = arrays[a]
            right, rterm = (one, "") if b < 0 else (arrays[b], terms[b])
            geo = geometry(terms[a], rterm, keep, sizes, left.shape, right.shape if b >= 0 else ())
            impl(left, right, y, geo, backend=backend)
            arrays.append(y)
            terms.append(keep)
