"""The fusion spellings of the elementwise ops that a one-line template cannot say (a parameter
turned into a literal, several steps, an optional input), named by rows of
ops/elementwise_table.py.

An emitter gets the node and its argument names (None for an absent optional input) and returns
the expressions of its steps; ``{p<k>}`` names the node's own k-th step.  None: this node cannot
be fused (e.g. a bound that is not finite).  Spellings matter twice: the fused kernel computes
them, and dsl/onnx/lower_program.py recognises Relu, LeakyRelu, Sigmoid, Max and Min by them when
a fused graph is exported.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np

from dsl import bf16, f16, f32, f64

Emitter = Callable[[object, List[Optional[str]]], Optional[List[str]]]
FLOATS = (f16, bf16, f32, f64)


def template(steps) -> Emitter:
    """The emitter of a template: one expression, or a tuple of steps, over ``{0}``, ``{1}``...
    (the node's arguments) and ``{p0}``, ``{p1}``... (its earlier steps, filled in later)."""
    steps = (steps,) if isinstance(steps, str) else tuple(steps)
    later = {f"p{k}": f"{{p{k}}}" for k in range(len(steps))}

    def emit(node, a):
        if any(x is None for x in a):
            return None
        return [s.format(*a, **later) for s in steps]
    return emit


def literal(value: float, dtype) -> Optional[str]:
    """A number literal with the value ``value`` has in ``dtype`` (as the unfused op's f32
    param or dtype-typed bound holds it), None when it is not finite."""
    v = float(np.asarray(value, dtype=np.float64).astype(dtype.np if hasattr(dtype, "np") else dtype))
    return repr(v) if np.isfinite(v) else None


def max_min(cmp: str) -> Emitter:
    def emit(node, a):  # NaN in either input gives NaN (np.maximum / np.minimum), as the op's kernel
        if len(a) != 2:
            return None
        return [f"{a[0]} if {a[0]} {cmp} {a[1]} or {a[0]} != {a[0]} else {a[1]}"]
    return emit


def leaky_relu(node, a):
    alpha = literal(node.op.alpha, np.float32)  # the kernel's alpha param is f32
    return None if alpha is None else [f"{a[0]} if {a[0]} >= 0 else {a[0]} * {alpha}"]


def _clip_steps(x: str, lo: Optional[str], hi: Optional[str]) -> List[str]:
    steps = [f"{lo} if {x} < {lo} else {x}"] if lo is not None else []
    if hi is not None:
        last = "{p0}" if steps else x
        steps.append(f"{hi} if {last} > {hi} else {last}")
    return steps or [x]


def clip_v6(node, a):
    dt = node.inputs[0].spec.dtype
    lo, hi = literal(node.op.min, dt), literal(node.op.max, dt)
    return None if lo is None or hi is None else _clip_steps(a[0], lo, hi)


def clip(node, a):
    a = list(a) + [None, None]
    return _clip_steps(a[0], a[1], a[2])


def cast(node, a):
    return [a[0]] if node.op.to in FLOATS else None
