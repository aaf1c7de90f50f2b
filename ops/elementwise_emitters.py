"""How the elementwise ops fuse, named by rows of ops/elementwise_table.py: for each, how a graph
node becomes one step of a fused program (a ``dsl.lang.expr_tree.Call``) and how that step is
spelt in the fused kernel's DSL.

A ``Fusion`` has two faces.  ``build(node, args)`` reads the node's params and returns the step's
arguments and attributes (None: this node cannot be fused, e.g. a bound that is not finite).
``spell(args, attrs)`` gets the argument spellings (``x0``, ``t3``, a literal, None for an absent
optional input) and returns the kernel expressions of the step (None: these arguments do not
fit); ``{p<k>}`` in a later expression names the step's own k-th expression.  Most ops are one
template; the ones here need a parameter turned into an attribute or literal, several
expressions, or optional inputs.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from dsl import bf16, f16, f32, f64
from dsl.lang.expr_tree import Const

Spell = Callable[[Sequence[Optional[str]], Dict[str, float]], Optional[List[str]]]
FLOATS = (f16, bf16, f32, f64)


def _all_given(node, args):
    return None if any(a is None for a in args) else (tuple(args), {})


@dataclass(frozen=True)
class Fusion:
    """One row's fusion.  ``arity``: how many arguments a step takes (from, to); ``attrs``: the
    attribute names it needs; ``conditions``: arguments that are bool conditions (the others are
    values of the step's dtype); ``converts``: the step changes its value's dtype (Cast)."""

    spell: Spell
    arity: Tuple[int, int]
    build: Callable = _all_given
    attrs: Tuple[str, ...] = ()
    conditions: Tuple[int, ...] = ()
    converts: bool = False

    def usage(self, op: str) -> str:
        lo, hi = self.arity
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        attrs = f" and the attributes {', '.join(self.attrs)}" if self.attrs else ""
        return f"{op} takes {count} argument(s){attrs}"


def _placeholders(steps: Sequence[str]) -> int:
    """How many arguments a template reads: its highest ``{k}`` + 1 (``{p<k>}`` are its own steps)."""
    found = [int(f) for s in steps for _, f, _, _ in string.Formatter().parse(s) if f and f.isdigit()]
    return 1 + max(found, default=-1)


def template(steps, conditions: Tuple[int, ...] = ()) -> Fusion:
    """The fusion of a template: one expression, or a tuple of expressions, over ``{0}``, ``{1}``...
    (the step's arguments) and ``{p0}``, ``{p1}``... (its earlier expressions, filled in later)."""
    steps = (steps,) if isinstance(steps, str) else tuple(steps)
    later = {f"p{k}": f"{{p{k}}}" for k in range(len(steps))}
    n = _placeholders(steps)

    def spell(a, attrs):
        if len(a) != n or any(x is None for x in a):
            return None
        return [s.format(*a, **later) for s in steps]
    return Fusion(spell, (n, n), conditions=conditions)


def literal(value: float, dtype) -> Optional[float]:
    """``value`` as ``dtype`` holds it (as the unfused op's f32 param or dtype-typed bound holds
    it), None when it is not finite."""
    v = float(np.asarray(value, dtype=np.float64).astype(dtype.np if hasattr(dtype, "np") else dtype))
    return v if np.isfinite(v) else None


def max_min(cmp: str) -> Fusion:
    """NaN in either input gives NaN (np.maximum / np.minimum), as the op's kernel."""
    return template(f"{{0}} if {{0}} {cmp} {{1}} or {{0}} != {{0}} else {{1}}")


def _leaky_build(node, args):
    alpha = literal(node.op.alpha, np.float32)  # the kernel's alpha param is f32
    return None if alpha is None else (tuple(args), {"alpha": alpha})


def _leaky_spell(a, attrs):
    if len(a) != 1 or a[0] is None or "alpha" not in attrs:
        return None
    return [f"{a[0]} if {a[0]} >= 0 else {a[0]} * {float(attrs['alpha'])!r}"]


leaky_relu = Fusion(_leaky_spell, (1, 1), _leaky_build, attrs=("alpha",))


def _clip_spell(a, attrs):
    if not 1 <= len(a) <= 3 or a[0] is None:
        return None
    x, lo, hi = (list(a) + [None, None])[:3]
    steps = [f"{lo} if {x} < {lo} else {x}"] if lo is not None else []
    if hi is not None:
        last = "{p0}" if steps else x
        steps.append(f"{hi} if {last} > {hi} else {last}")
    return steps or [x]


def _clip_v6_build(node, args):
    """Clip-6's bounds are attributes: they become the step's constant arguments."""
    dt = node.inputs[0].spec.dtype
    lo, hi = literal(node.op.min, dt), literal(node.op.max, dt)
    return None if lo is None or hi is None else ((args[0], Const(lo), Const(hi)), {})


def _clip_build(node, args):
    return ((tuple(args) + (None, None))[:3], {}) if args and args[0] is not None else None


clip_v6 = Fusion(_clip_spell, (1, 3), _clip_v6_build)
clip = Fusion(_clip_spell, (1, 3), _clip_build)


def _cast_build(node, args):
    return ((args[0],), {}) if node.op.to in FLOATS else None


cast = Fusion(lambda a, attrs: [a[0]] if len(a) == 1 and a[0] is not None else None, (1, 1), _cast_build,
              converts=True)
