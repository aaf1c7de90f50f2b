"""Inference BatchNormalization (ONNX, opset 7+): y = (x - mean[c]) / sqrt(var[c] + ε) · scale[c] + B[c].

Only the inference form exists: ``training_mode=1`` (batch statistics, running-mean
outputs) is refused with an error; ``momentum`` only matters in training and is ignored.
After a Conv with constant weights the graph compiler folds it into the Conv
(ops/conv_fusion.py); this kernel runs the rest, in plain or NCHWc16 layout.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, bool_, f32, i64
from dsl.opgraph.spec import VerifyError
from ops.elementwise import FLOATS, require_dtype, same_dtype

T = dsl.TypeVar("T")
BLOCK = 16  # NCHWc16 channels per block


@dsl.kernel
def batch_norm_kernel(x: In[T], scale: In[T, 1], bias: In[T, 1], mean: In[T, 1], var: In[T, 1], y: Out[T],
                      epsilon: f32, inner: i64, blocked: bool_):
    """Element i has channel (i // inner) % C, or in NCHWc16 (``blocked``; inner = H·W)
    the lane's channel of its block; padding channels are written as 0."""
    channels = scale.shape[0]
    blocks = (channels + BLOCK - 1) // BLOCK
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        c = (i // inner) % channels
        if blocked:
            c = (i // (inner * BLOCK)) % blocks * BLOCK + i % BLOCK
        if c < channels:
            a = scale.flat[c] / dsl.sqrt(var.flat[c] + epsilon)
            y.flat[i] = (x.flat[i] - mean.flat[c]) * a + bias.flat[c]
        else:
            y.flat[i] = 0


@dsl.op("BatchNormalization", since=7)
class BatchNormalization(dsl.Op):
    """ONNX BatchNormalization for inference: X (N, C, ...), scale, B, mean, var (C,)."""

    epsilon: float = 1e-5
    momentum: float = 0.9      # training only: ignored
    training_mode: int = 0     # opset 14+; 1 is refused
    spatial: int = 1           # opsets 7-8; only the per-channel form (1) exists
    formats = ("plain", "nchwc16")
    keeps_padding = True       # padding channels are written as 0
    kernels = {"default": batch_norm_kernel}

    def verify(self, x, scale, b, mean, var):
        if self.training_mode:
            raise VerifyError("BatchNormalization training_mode=1 is not supported: opdsl runs inference only "
                              "(export the model in eval mode, or set training_mode=0)")
        if self.spatial != 1:
            raise VerifyError(f"BatchNormalization spatial={self.spatial} (per-element statistics) is not "
                              "supported; accepted: spatial=1")
        same_dtype("BatchNormalization", x, scale, b, mean, var)
        require_dtype("BatchNormalization", x, FLOATS)
        if x.ndim < 2:
            raise VerifyError(f"BatchNormalization input must be (N, C, ...), got {x}")
        c = x.shape[1]
        for name, p in (("scale", scale), ("B", b), ("mean", mean), ("var", var)):
            if p.ndim != 1 or (c is not None and p.shape[0] is not None and p.shape[0] != c):
                raise VerifyError(f"BatchNormalization {name} must have shape (C,) = ({c},), got {p}")

    def infer(self, x, scale, b, mean, var):
        return x.spec.with_()

    def select_format(self, x, *params):
        fmt = "nchwc16" if x.format == "nchwc16" and x.ndim == 4 else "plain"
        return (fmt,) + ("plain",) * len(params), fmt

    def run(self, impl, inputs, outputs, backend):
        x, y = inputs[0], outputs[0]
        blocked = y.ndim == 5
        inner = int(np.prod(x.shape[2:4] if blocked else x.shape[2:], dtype=np.int64))
        impl(*inputs, y, epsilon=self.epsilon, inner=inner, blocked=blocked, backend=backend)
