"""RecurrentScan as standard ONNX: the RNN, GRU or LSTM node it is the time loop of.

opdsl runs an ONNX RNN/GRU/LSTM as two nodes (ops/recurrent.py): the input projection of every
step at once, ``xw = X·Wᵀ`` (a MatMul), and ``com.opdsl::RecurrentScan``, which takes ``xw`` and
does the rest.  A compiled graph holds both; the RecurrentScan is written as the standard cell op
applied to ``xw`` itself: its X is ``xw`` laid out as (steps, batch, directions·gates·hidden) (or
batch first for ``layout=1``) and its W a constant 0/1 matrix that picks each direction's block,
so X·Wᵀ gives back ``xw`` exactly and every other input and attribute passes through.  A
batch-major one (``layout=1``) is written sequence-major between Transposes, since ONNX Runtime
does not run ``layout=1``.

Registered through ``dsl.onnx.lower.register`` (ops/recurrent.py imports this module).
"""
from __future__ import annotations

import numpy as np

from dsl.onnx.lower import register

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction")


@register("com.opdsl", "RecurrentScan", everywhere=True)
def lower_recurrent_scan(node, opset: int, emit) -> bool:
    op = node.op
    specs = [None if t is None else t.spec for t in node.inputs]
    names = [None if t is None else t.name for t in node.inputs]
    x, xw, r = names[:3]
    rest = (names[3:] + [None] * 5)[:5 if op.cell == "LSTM" else 3]
    if op.cell not in _GATES or opset < 7:
        return False
    dirs, gh, hidden = specs[2].shape  # R: (directions, gates·hidden, hidden)
    if None in (dirs, gh, hidden):
        return False
    dtype = specs[1].dtype.np
    # X' = xw as (steps, batch, dirs·gh); xw's rows are in X's order, (batch, steps) for layout 1
    moved, lead, shape, x2 = emit.temp("xw_rows"), emit.temp("x_lead"), emit.temp("x2_shape"), emit.temp("x")
    emit("Transpose", [xw], [moved], perm=[1, 0, 2])
    dims = emit.temp("x_dims")
    emit("Shape", [x], [dims])
    emit("Gather", [dims, emit.constant(np.array([0, 1], np.int64), "lead_axes")], [lead], axis=0)
    emit("Concat", [lead, emit.constant(np.array([-1], np.int64), "minus_one")], [shape], axis=0)
    emit("Reshape", [moved, shape], [x2])
    outs = [t.name for t in node.outputs]
    if op.layout:  # written sequence-major (ONNX Runtime runs no layout=1): transpose in and out
        x2 = _transposed(emit, x2, [1, 0, 2], "x_seq_major")
        rest = [n if n is None or k < 2 else _transposed(emit, n, [1, 0, 2], "state_dir_major")
                for k, n in enumerate(rest)]  # initial_h, initial_c: (batch, dirs, hidden) -> (dirs, batch, hidden)
        outs = [emit.temp(f"out{k}") for k in range(len(outs))]
    pick = np.zeros((dirs, gh, dirs * gh), dtype)
    for d in range(dirs):
        pick[d, :, d * gh:(d + 1) * gh] = np.eye(gh, dtype=dtype)
    w = emit.constant(pick, "W")
    attrs = {k: _attribute_value(getattr(op, k)) for k in _ATTRS}
    attrs["hidden_size"] = int(hidden)
    if op.cell == "GRU" and op.linear_before_reset:
        attrs["linear_before_reset"] = 1
    if op.cell == "LSTM" and op.input_forget:
        attrs["input_forget"] = 1
    if attrs["direction"] == "forward":
        del attrs["direction"]
    while rest and rest[-1] is None:
        rest.pop()
    emit(op.cell, [x2, w, r] + ["" if n is None else n for n in rest], outs,
         **{k: v for k, v in attrs.items() if v is not None and v != []})
    if op.layout:  # Y (steps, dirs, batch, hidden) -> (batch, steps, dirs, hidden); states batch first
        for k, (tmp, t) in enumerate(zip(outs, node.outputs)):
            emit("Transpose", [tmp], [t.name], perm=[2, 0, 1, 3] if k == 0 else [1, 0, 2])
    return True


def _transposed(emit, name: str, perm, hint: str) -> str:
    out = emit.temp(hint)
    emit("Transpose", [name], [out], perm=perm)
    return out


def _attribute_value(v):
    if isinstance(v, tuple):
        return [float(a) if isinstance(a, float) else a for a in v]
    return float(v) if isinstance(v, float) else v
