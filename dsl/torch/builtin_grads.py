"""Backwards of common built-in ops (ai.onnx and com.opdsl), written with torch operations on the
saved tensors, so a composed op whose body uses them trains in PyTorch.  A user op states its
own (``Op.backward``) or gets one from ``dsl.grad``; these cover the library's arithmetic,
activations and matrix products, whose kernels have their own ``run``.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch

Grad = Callable  # (op, grads, inputs, outputs) -> tuple of input gradients


def unbroadcast(g: torch.Tensor, shape) -> torch.Tensor:
    """``g`` summed over the dims numpy broadcasting added or stretched to reach it from ``shape``."""
    shape = tuple(shape)
    while g.dim() > len(shape):
        g = g.sum(0)
    for axis, n in enumerate(shape):
        if n == 1 and g.shape[axis] != 1:
            g = g.sum(axis, keepdim=True)
    return g


def _binary(fa, fb) -> Grad:
    def grad(op, grads, inputs, outputs):
        (g,), (a, b) = grads, inputs
        return unbroadcast(fa(g, a, b), a.shape), unbroadcast(fb(g, a, b), b.shape)
    return grad


def _unary(f) -> Grad:
    def grad(op, grads, inputs, outputs):
        return (f(grads[0], inputs[0], outputs[0], op),)
    return grad


def _gemm(op, grads, inputs, outputs):
    (g,), (a, b, *c) = grads, inputs
    a_ = a.t() if op.transA else a
    b_ = b.t() if op.transB else b
    ga, gb = op.alpha * (g @ b_.t()), op.alpha * (a_.t() @ g)
    out = [ga.t() if op.transA else ga, gb.t() if op.transB else gb]
    if c and c[0] is not None:
        out.append(unbroadcast(op.beta * g, c[0].shape))
    return tuple(out) + (None,) * (len(inputs) - len(out))


def _fully_connected(op, grads, inputs, outputs):
    (g,), (x, w, *b) = grads, inputs       # y = x @ w.T + b
    out = [g @ w, g.reshape(-1, g.shape[-1]).t() @ x.reshape(-1, x.shape[-1])]
    if b and b[0] is not None:
        out.append(unbroadcast(g, b[0].shape))
    return tuple(out) + (None,) * (len(inputs) - len(out))


def _matmul(op, grads, inputs, outputs):
    (g,), (a, b) = grads, inputs
    if a.dim() == 1 or b.dim() == 1:
        raise RuntimeError("MatMul backward: 1-D operands are not differentiated here; reshape them to 2-D")
    return unbroadcast(g @ b.transpose(-1, -2), a.shape), unbroadcast(a.transpose(-1, -2) @ g, b.shape)


GRADS: Dict[Tuple[str, str], Grad] = {
    ("", "Add"): _binary(lambda g, a, b: g, lambda g, a, b: g),
    ("", "Sub"): _binary(lambda g, a, b: g, lambda g, a, b: -g),
    ("", "Mul"): _binary(lambda g, a, b: g * b, lambda g, a, b: g * a),
    ("", "Div"): _binary(lambda g, a, b: g / b, lambda g, a, b: -g * a / (b * b)),
    ("", "Neg"): _unary(lambda g, x, y, op: -g),
    ("", "Relu"): _unary(lambda g, x, y, op: g * (x > 0).to(g.dtype)),
    ("", "Tanh"): _unary(lambda g, x, y, op: g * (1 - y * y)),
    ("", "Sigmoid"): _unary(lambda g, x, y, op: g * y * (1 - y)),
    ("", "Exp"): _unary(lambda g, x, y, op: g * y),
    ("", "Log"): _unary(lambda g, x, y, op: g / x),
    ("", "Sqrt"): _unary(lambda g, x, y, op: g / (2 * y)),
    ("", "Identity"): _unary(lambda g, x, y, op: g),
    ("", "Gemm"): _gemm,
    ("", "MatMul"): _matmul,
    ("com.opdsl", "FullyConnected"): _fully_connected,
}


def builtin_grad(cls) -> Optional[Grad]:
    """The backward of a built-in op class (a user op registered under the same name overrides it)."""
    if not (cls.__module__ == "ops" or cls.__module__.startswith("ops.")):
        return None
    return GRADS.get((cls.domain, cls.op_type))
