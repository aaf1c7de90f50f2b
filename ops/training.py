"""Optimizer steps of the ai.onnx.preview.training domain (opset 1): Momentum (standard and
Nesterov), Adagrad and Adam.  A node updates n tensors at once: inputs R (learning rate),
T (step count), then the n X, the n G (gradients) and the optimizer's state tensors
(Momentum/Adagrad: n V or H; Adam: n V then n H); outputs the n new X, then the new states.

Each (X, G, state) triple is one launch of ``optimizer_kernel``, an elementwise update rule
chosen by a run-time code; R and T are read inside the kernel (they change every step), the
arithmetic is f64 for f32 and f64 tensors alike.
"""
from __future__ import annotations

from typing import List

import numpy as np

import dsl
from dsl import In, Out, f32, f64, i32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError

T = dsl.TypeVar("T")
R = dsl.TypeVar("R")
DOMAIN = "ai.onnx.preview.training"
FLOATS = (f32, f64)

MOMENTUM, NESTEROV, ADAGRAD, ADAM = 0, 1, 2, 3


@dsl.kernel
def optimizer_kernel(r: In[R], t: In[i64], x: In[T], g: In[T], v: In[T], h: In[T], x_new: Out[T], v_new: Out[T],
                     h_new: Out[T], algo: i32, norm: f64, alpha: f64, beta: f64, eps: f64, post: f64):
    """One step of ``algo`` for every element (h/h_new are used by Adam only)."""
    rate = f64(r.flat[0])
    step = t.flat[0]
    if algo == ADAGRAD:
        rate = rate / (1 + f64(step) * beta)                  # beta: decay_factor
    elif algo == ADAM and step > 0:
        rate = rate * dsl.sqrt(1 - dsl.pow(beta, f64(step))) / (1 - dsl.pow(alpha, f64(step)))
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        xv = f64(x.flat[i])
        gr = norm * xv + f64(g.flat[i])                        # the regularized gradient
        if algo == MOMENTUM or algo == NESTEROV:
            vn = alpha * f64(v.flat[i]) + (beta if step > 0 else f64(1)) * gr
            v_new.flat[i] = vn
            x_new.flat[i] = xv - rate * (vn if algo == MOMENTUM else gr + alpha * vn)
        elif algo == ADAGRAD:
            hn = f64(v.flat[i]) + gr * gr
            v_new.flat[i] = hn
            x_new.flat[i] = xv - rate * gr / (dsl.sqrt(hn) + eps)
        else:
            vn = alpha * f64(v.flat[i]) + (1 - alpha) * gr
            hn = beta * f64(h.flat[i]) + (1 - beta) * gr * gr
            v_new.flat[i] = vn
            h_new.flat[i] = hn
            x_new.flat[i] = (1 - post) * (xv - rate * vn / (dsl.sqrt(hn) + eps))


class _Optimizer(dsl.Op):
    kernels = {"default": optimizer_kernel}
    states = 1  # state tensors per updated tensor (Adam: 2)

    def _groups(self, n_inputs: int) -> int:
        per = 2 + self.states
        if n_inputs < 2 + per or (n_inputs - 2) % per:
            names = "X, G, " + ", ".join(self.state_names)
            raise VerifyError(f"{self.op_type} takes R, T and n each of {names} (2 + {per}·n inputs), "
                              f"got {n_inputs} inputs")
        return (n_inputs - 2) // per

    def verify(self, r, t, *tensors):
        n = self._groups(2 + len(tensors))
        if r.dtype not in FLOATS or r.size not in (None, 1):
            raise VerifyError(f"{self.op_type} R (learning rate) must be an f32/f64 scalar, got {r}")
        if t.dtype != dsl.i64 or t.size not in (None, 1):
            raise VerifyError(f"{self.op_type} T (step count) must be an i64 scalar, got {t}")
        names = ["X", "G"] + list(self.state_names)
        for k in range(n):
            x = tensors[k]
            if x.dtype not in FLOATS:
                raise VerifyError(f"{self.op_type} X[{k}] must be f32 or f64, got {x}")
            for j, name in enumerate(names[1:], 1):
                other = tensors[j * n + k]
                if other.dtype != x.dtype or any(a is not None and b is not None and a != b
                                                 for a, b in zip(other.shape, x.shape)) or other.ndim != x.ndim:
                    raise VerifyError(f"{self.op_type} {name}[{k}] must match X[{k}] {x}, got {other}")

    def infer(self, r, t, *tensors) -> List[TensorSpec]:
        n = self._groups(2 + len(tensors))
        return [tensors[k].with_() for k in range(n)] + [tensors[(2 + j) * n + k].with_()
                                                         for j in range(self.states) for k in range(n)]

    def launch_args(self):
        raise NotImplementedError

    def run(self, impl, inputs, outputs, backend):
        r, t, tensors = inputs[0], inputs[1], inputs[2:]
        n = len(tensors) // (2 + self.states)
        algo, params = self.launch_args()
        for k in range(n):
            x, g, v = tensors[k], tensors[n + k], tensors[2 * n + k]
            x_new, v_new = outputs[k], outputs[n + k]
            if self.states == 2:
                h, h_new = tensors[3 * n + k], outputs[2 * n + k]
            else:
                h, h_new = np.zeros(1, x.dtype), np.empty(1, x.dtype)
            if x.size:
                impl(r.reshape(1), t.reshape(1), x, g, v, h, x_new, v_new, h_new, algo=algo, backend=backend, **params)


@dsl.op("Momentum", domain=DOMAIN, since=1)
class Momentum(_Optimizer):
    """V' = alpha·V + beta'·(G + norm_coefficient·X) (beta' = 1 at T = 0); X' = X - R·V'
    (standard) or X - R·(G_reg + alpha·V') (nesterov)."""
    alpha: float
    beta: float
    mode: str
    norm_coefficient: float
    state_names = ("V",)

    def verify(self, r, t, *tensors):
        if self.mode not in ("standard", "nesterov"):
            raise VerifyError(f"Momentum mode {self.mode!r} is not one of standard, nesterov")
        super().verify(r, t, *tensors)

    def launch_args(self):
        return (MOMENTUM if self.mode == "standard" else NESTEROV,
                dict(norm=self.norm_coefficient, alpha=self.alpha, beta=self.beta, eps=0.0, post=0.0))


@dsl.op("Adagrad", domain=DOMAIN, since=1)
class Adagrad(_Optimizer):
    """H' = H + G_reg²; X' = X - R/(1 + T·decay_factor)·G_reg/(√H' + epsilon)."""
    decay_factor: float = 0.0
    epsilon: float = 1e-6
    norm_coefficient: float = 0.0
    state_names = ("H",)

    def launch_args(self):
        return ADAGRAD, dict(norm=self.norm_coefficient, alpha=0.0, beta=self.decay_factor, eps=self.epsilon, post=0.0)


@dsl.op("Adam", domain=DOMAIN, since=1)
class Adam(_Optimizer):
    """V' = alpha·V + (1-alpha)·G_reg, H' = beta·H + (1-beta)·G_reg²,
    X' = (1 - norm_coefficient_post)·(X - R·√(1-beta^T)/(1-alpha^T)·V'/(√H' + epsilon))."""
    alpha: float = 0.9
    beta: float = 0.999
    epsilon: float = 1e-6
    norm_coefficient: float = 0.0
    norm_coefficient_post: float = 0.0
    states = 2
    state_names = ("V", "H")

    def launch_args(self):
        return ADAM, dict(norm=self.norm_coefficient, alpha=self.alpha, beta=self.beta, eps=self.epsilon,
                          post=self.norm_coefficient_post)
