"""Values of small shape-like tensors, computed while a graph is built or planned.

A graph often computes a shape from shapes and constants: Shape -> Gather -> Concat ->
Reshape, or the expanded LayerNormalization's Slice / Neg / ConstantOfShape / Concat.  Their
consumers' ``infer`` needs the *value* (Reshape's output rank, ConstantOfShape's shape), so a
node whose inputs all have values and whose outputs are small is evaluated on the spot and
its outputs carry ``spec.value``.  ``dsl.Graph`` does this as nodes are added for integer
outputs (shapes, axes, counts; on the interpreter: the tensors are tiny), the model for any
small output while it plans a run's shapes; folding computes the rest at compile time.  The node stays
in the graph; folding removes it later.
"""
from __future__ import annotations

from dsl.opgraph.host_values import is_host
from dsl.opgraph.op import Op

SHAPE_VALUE_ELEMENTS = 64  # node outputs at most this large get values while planning


def shape_values(op: Op, in_specs, outs, backend: str, integers_only: bool = False):
    """``outs`` with values, when every input of ``op`` has one (so it depends on shapes and
    constants only, never on input contents) and its outputs have at most
    SHAPE_VALUE_ELEMENTS elements (and, with ``integers_only``, are integer or bool tensors:
    shapes, axes, counts, and tests on them such as an If's condition); otherwise ``outs``
    unchanged."""
    if any(is_host(s) for s in list(in_specs) + list(outs)):  # sequences / optionals: values at run time only
        return outs
    if integers_only and any(s.dtype.np.kind not in "iub" for s in outs):
        return outs
    if (not outs or not type(op).foldable or all(s.value is not None for s in outs)
            or not any(s is not None for s in in_specs)
            or any(s is not None and (s.value is None or s.format != "plain") for s in in_specs)
            or any(s.size is None or s.size > SHAPE_VALUE_ELEMENTS or s.format != "plain" for s in outs)):
        return outs
    values = op.apply_eager([None if s is None else s.value for s in in_specs], backend)
    values = values if isinstance(values, tuple) else (values,)
    return tuple(s.with_(value=v) for s, v in zip(outs, values))
