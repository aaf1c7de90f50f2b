"""Classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (ONNX 12+).

Training graphs exported for evaluation keep these nodes, so a model that computes its
validation loss loads as it is.  One kernel serves both: scores viewed as (N, C, D) with
targets (N, D); for the cross-entropy it first takes the row's log-softmax over C (written
out as the optional ``log_prob``).  Per-element losses are ``-score[target] · weight[target]``,
0 where the target is ``ignore_index``; ``sum`` adds them and ``mean`` divides by the sum of
the weights used (the count of non-ignored targets when unweighted), reduced across the team
through scratch.  Targets outside [0, C) that are not ignored are an error before launch.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS

T = dsl.TypeVar("T")
I = dsl.TypeVar("I")

NONE = 0
SUM = 1
MEAN = 2
REDUCTIONS = {"none": NONE, "sum": SUM, "mean": MEAN}
MAX_TEAM = 64


@dsl.kernel
def class_loss_kernel(x: In[T, 3], target: In[I, 2], weight: In[T, 1], loss: Out[T], log_prob: Out[T, 3],
                      softmax: bool_, weighted: bool_, ignore_index: i64, reduction: i64):
    """See the module docstring; ``loss`` is (N·D) elements for reduction none, else one."""
    part = dsl.scratch((2, MAX_TEAM), f32)
    classes = x.shape[1]
    inner = x.shape[2]
    lo, hi = dsl.split(target.size)
    total = f32(0)
    weights = f32(0)
    for r in range(lo, hi):
        n = r // inner
        d = r - n * inner
        base = n * classes * inner + d
        lse = f32(0)
        if softmax:
            top = f32(x.flat[base])
            for c in range(1, classes):
                top = max(top, f32(x.flat[base + c * inner]))
            s = f32(0)
            for c in range(classes):
                s += dsl.exp(f32(x.flat[base + c * inner]) - top)
            lse = top + dsl.log(s)
            for c in range(classes):
                log_prob.flat[base + c * inner] = f32(x.flat[base + c * inner]) - lse
        t = i64(target.flat[r])
        value = f32(0)
        w = f32(0)
        if t != ignore_index:
            w = f32(weight.flat[t]) if weighted else f32(1)
            value = -(f32(x.flat[base + t * inner]) - lse) * w
        if reduction == NONE:
            loss.flat[r] = value
        total += value
        weights += w
    part[0, dsl.thread_id()] = total
    part[1, dsl.thread_id()] = weights
    dsl.sync()
    if reduction != NONE and dsl.thread_id() == 0:
        total = f32(0)
        weights = f32(0)
        for k in range(dsl.num_threads()):
            total += part[0, k]
            weights += part[1, k]
        loss.flat[0] = total / weights if reduction == MEAN else total


class _ClassLoss(dsl.Op):
    reduction: str = "mean"
    ignore_index: Optional[int] = None
    kernels = {"default": class_loss_kernel}
    replay = False  # run() checks the targets' values at every run
    softmax = False

    def verify(self, scores, target, weight=None):
        op = self.op_type
        if self.reduction not in REDUCTIONS:
            raise VerifyError(f"{op} reduction {self.reduction!r} is not one of {', '.join(REDUCTIONS)}")
        if scores.dtype not in FLOATS:
            raise VerifyError(f"{op} scores must be a float tensor, got {scores}")
        if target.dtype not in (dsl.i32, dsl.i64):
            raise VerifyError(f"{op} target must be int32 or int64, got {target}")
        if scores.ndim < 2 or target.ndim != scores.ndim - 1:
            raise VerifyError(f"{op} needs scores (N, C, d1..dk) and target (N, d1..dk), got {scores} and {target}")
        want = (scores.shape[0],) + tuple(scores.shape[2:])
        if any(a is not None and b is not None and a != b for a, b in zip(want, target.shape)):
            raise VerifyError(f"{op} target {target} must have shape (N, d1..dk) = {want} of scores {scores}")
        if weight is not None and (weight.ndim != 1 or weight.dtype != scores.dtype or
                                   weight.shape[0] not in (None, scores.shape[1])):
            raise VerifyError(f"{op} weight must be ({scores.shape[1]},) of {scores.dtype}, got {weight}")

    def _loss_spec(self, scores, target):
        shape = tuple(target.shape) if self.reduction == "none" else ()
        return TensorSpec(shape, scores.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, target = inputs[0], inputs[1]
        weight = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        n, c = x.shape[0], x.shape[1]
        inner = int(np.prod(x.shape[2:], dtype=np.int64))
        used = target if self.ignore_index is None else target[target != self.ignore_index]
        if used.size and (used.min() < 0 or used.max() >= c):
            bad = used[(used < 0) | (used >= c)][0]
            raise ValueError(f"{self.op_type} target value {bad} is outside the classes [0, {c}) of scores "
                             f"{x.shape}" + ("" if self.ignore_index is None else
                                             f" and is not ignore_index ({self.ignore_index})"))
        log_prob = outputs[1] if len(outputs) > 1 else np.empty((1, 1, 1), x.dtype)
        impl(x.reshape(n, c, inner), target.reshape(n, inner),
             np.ones(1, x.dtype) if weight is None else weight,
             outputs[0], log_prob.reshape(n, c, inner) if self.softmax else log_prob.reshape(1, 1, -1),
             self.softmax, weight is not None,
             -(1 << 62) if self.ignore_index is None else int(self.ignore_index), REDUCTIONS[self.reduction],
             backend=backend)


@dsl.op("NegativeLogLikelihoodLoss", since=12)
class NegativeLogLikelihoodLoss(_ClassLoss):
    """loss = -input[n, target[n, d], d] · weight[target], reduced by ``reduction``."""

    def infer(self, scores, target, weight=None):
        return self._loss_spec(scores, target)


@dsl.op("SoftmaxCrossEntropyLoss", since=12)
class SoftmaxCrossEntropyLoss(_ClassLoss):
    """NegativeLogLikelihoodLoss of log_softmax(scores, axis=1); outputs (loss, log_prob)."""

    softmax = True

    def infer(self, scores, labels, weights=None):
        return self._loss_spec(scores, labels), scores.spec.with_()

    def verify(self, scores, labels, weights=None):
        super().verify(scores, labels, weights)
