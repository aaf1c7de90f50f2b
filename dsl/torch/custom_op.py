"""``dsl.torch.register(OpClass)``: an opdsl op as a ``torch.library`` custom operator in the
``opdsl`` namespace, with its eager kernel, a fake implementation from ``infer`` (so
``torch.compile`` traces it, symbolic batch sizes included), autograd (autograd.py) and an
ONNX translation (onnx_symbolic.py).  Registrations are made once per (op class, number of
outputs) and reused by every eager call on torch tensors.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from dsl.opgraph.op import _EAGER_BACKEND, Op
from dsl.opgraph.spec import VerifyError, describe
from dsl.torch import autograd, onnx_symbolic, tensors
from dsl.torch.schema import Signature, signature


@dataclass
class Registration:
    """An op class's torch operator and how to call it."""
    cls: type
    num_outputs: int
    signature: Signature
    custom_op: Any  # torch.library.CustomOpDef

    def __call__(self, op: Op, inputs, backend: Optional[str]):
        return self.custom_op(*inputs, **self.signature.encode(op), backend=backend)


_REGISTERED: Dict[Tuple[type, int], Registration] = {}
_LOCK = threading.RLock()


def register(cls, num_outputs: int = 1):
    """The ``torch.library`` custom op of op class ``cls`` (namespace ``opdsl``), called as
    ``f(*tensors, **params, backend=None)``.  ``num_outputs``: how many tensors it returns."""
    return registration(cls, num_outputs).custom_op


def registration(cls, num_outputs: int = 1) -> Registration:
    if not (isinstance(cls, type) and issubclass(cls, Op)) or cls is Op:
        raise TypeError(f"dsl.torch.register expects a dsl.Op subclass, got {cls!r}")
    if not isinstance(num_outputs, int) or num_outputs < 1:
        raise ValueError(f"dsl.torch.register({cls.__name__}, num_outputs={num_outputs!r}): expected an int >= 1")
    key = (cls, num_outputs)
    with _LOCK:
        reg = _REGISTERED.get(key)
        if reg is None:
            reg = _REGISTERED[key] = _define(cls, num_outputs)
        return reg


def registered() -> Tuple[Registration, ...]:
    """Every registration made in this process (the ONNX exporter reads their domains)."""
    return tuple(_REGISTERED.values())


def _define(cls, num_outputs: int) -> Registration:
    sig = signature(cls, num_outputs)
    taken = {r.signature.name: r for r in _REGISTERED.values()}
    if sig.name in taken and taken[sig.name].cls is not cls:  # another class of the same (domain, op_type)
        raise TypeError(f"dsl.torch.register({cls.__name__}): opdsl::{sig.name} is already the operator of "
                        f"{taken[sig.name].cls.__qualname__}; a torch operator cannot be redefined in a process")
    reg = Registration(cls, num_outputs, sig, None)

    def forward(*args, **kwargs):
        backend = kwargs.get("backend")
        return _forward(reg, reg.signature.decode(cls, kwargs), args, backend)

    def fake(*args, **kwargs):
        op = reg.signature.decode(cls, kwargs)
        specs, shapes = tensors.symbolic_specs(op, args)
        _check_count(reg, op, len(specs))
        outs = [args[0].new_empty(shape, dtype=tensors.torch_dtype(s.dtype)) if args and args[0] is not None
                else torch.empty(shape, dtype=tensors.torch_dtype(s.dtype)) for s, shape in zip(specs, shapes)]
        return outs[0] if num_outputs == 1 else tuple(outs)

    reg.custom_op = torch.library.custom_op(f"opdsl::{sig.name}", forward, mutates_args=(), schema=sig.schema)
    reg.custom_op.register_fake(fake)
    autograd.attach(reg)
    onnx_symbolic.attach(reg)
    return reg


def _check_count(reg: Registration, op: Op, count: int) -> None:
    if count != reg.num_outputs:
        raise VerifyError(f"{describe(op)}: infer gives {count} output(s) here but its torch operator "
                          f"opdsl::{reg.signature.name} was registered with num_outputs={reg.num_outputs}")


def _device_of(t: torch.Tensor) -> str:
    return str(t.device)


def _forward(reg: Registration, op: Op, args, backend: Optional[str]):
    """The eager kernel: numpy views of the inputs, outputs allocated by torch and written in place."""
    for name, t in zip(reg.signature.inputs, args):
        if t is not None and _device_of(t) != "cpu":
            raise TypeError(f"{describe(op)}: input {reg.signature.inputs.index(name)} ({name}) is on device "
                            f"'{_device_of(t)}'; opdsl ops run on the CPU: pass {name}.cpu()")
    arrays = [None if t is None else tensors.as_numpy(t) for t in args]
    token = _EAGER_BACKEND.set(backend or _EAGER_BACKEND.get())
    try:
        if getattr(type(op), "composed", False):  # the body's ops run on the arrays
            result = op.apply_eager(arrays, backend)
            result = result if isinstance(result, tuple) else (result,)
            outs = [tensors.as_torch(a) for a in result]
            # a torch operator's outputs never alias its inputs (a body may return an input as is)
            outs = [o.clone() if any(t is not None and o.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
                                     for t in args) else o for o in outs]
        else:
            outs = []

            def allocate(spec):
                t = tensors.empty(spec)
                outs.append(t)
                return tensors.as_numpy(t)
            op.apply_eager(arrays, backend, allocate=allocate)
    finally:
        _EAGER_BACKEND.reset(token)
    _check_count(reg, op, len(outs))
    return outs[0] if reg.num_outputs == 1 else tuple(outs)
