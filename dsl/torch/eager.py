"""An op applied to torch tensors (``op(x)`` with ``x`` a ``torch.Tensor``): the call goes
through the op's torch operator (custom_op.py), so it returns torch tensors and, when an input
requires grad, records autograd.  ``Op.__call__`` reaches this module by name, on first use.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from dsl.opgraph.op import _EAGER_BACKEND, Op, check_and_infer
from dsl.opgraph.spec import describe
from dsl.torch import custom_op, tensors


def call(op: Op, inputs: Sequence, backend: Optional[str] = None):
    """``op(*inputs)`` for inputs among which is a torch tensor."""
    first = next(x for x in inputs if isinstance(x, torch.Tensor))
    values = []
    for i, x in enumerate(inputs):
        if x is None or isinstance(x, torch.Tensor):
            values.append(x)
        elif isinstance(x, np.ndarray):
            values.append(tensors.as_torch(x))
        elif isinstance(x, (bool, int, float)):
            values.append(torch.tensor(x, dtype=first.dtype))
        else:
            raise TypeError(f"{describe(op)} input {i}: expected a torch tensor, numpy array or number, got "
                            f"{type(x).__name__}")
    reg = custom_op.registration(type(op), _count_outputs(op, values))
    return reg(op, values, backend or _EAGER_BACKEND.get())


def _tracing(values) -> bool:
    return torch.compiler.is_compiling() or any(
        isinstance(t, torch._subclasses.fake_tensor.FakeTensor) for t in values if t is not None)


def _count_outputs(op: Op, values) -> int:
    if _tracing(values) or any(t is not None and t.device.type != "cpu" for t in values):  # no data to read
        return len(tensors.symbolic_specs(op, values)[0])
    return len(check_and_infer(op, tensors.concrete_specs(op, values), where="eager call"))
