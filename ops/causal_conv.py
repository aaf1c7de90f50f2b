"""ONNX CausalConvWithState (opset 27): the stateful causal depthwise 1-D convolution of
Mamba and Gated DeltaNet blocks, with its carry state for incremental decoding.

The padded sequence is past_state (k-1 positions, zeros when absent) followed by the input;
output[b, c, t] = bias[c] + Σ_j weight[c, 0, j] · padded[b, c, t + j], optionally through SiLU,
and present_state is the last k-1 positions of the padded sequence.  One kernel writes both:
a work item is one output position, or one state position.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out, bool_, f32
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.activations import stable_sigmoid
from ops.elementwise import FLOATS

T = dsl.TypeVar("T")


@dsl.kernel
def causal_conv_kernel(x: In[T, 3], w: In[T, 3], bias: In[T, 1], past: In[T, 3], y: Out[T, 3], state: Out[T, 3],
                       biased: bool_, silu: bool_):
    ch = x.shape[1]
    n = x.shape[2]
    k = w.shape[2]
    rows = x.shape[0] * ch
    lo, hi = dsl.split(rows * (n + k - 1))
    for i in range(lo, hi):
        row = i // (n + k - 1)
        t = i - row * (n + k - 1)
        b = row // ch
        c = row - b * ch
        if t < n:
            acc = f32(0)
            for j in range(k):  # position t + j of past ‖ x
                p = t + j
                v = f32(past[b, c, p]) if p < k - 1 else f32(x[b, c, p - (k - 1)])
                acc += f32(w[c, 0, j]) * v
            if biased:
                acc += f32(bias[c])
            if silu:
                acc = acc * stable_sigmoid(acc)
            y[b, c, t] = acc
        else:  # the carry: positions n .. n + k - 2 of the padded sequence
            state[b, c, t - n] = past[b, c, t] if t < k - 1 else x[b, c, t - (k - 1)]


@dsl.op("CausalConvWithState", since=27)
class CausalConvWithState(dsl.Op):
    """input (B, C, L), weight (C, 1, k), optional bias (C,) and past_state (B, C, k-1)
    -> output (B, C, L), present_state (B, C, k-1); ``activation`` none, silu or swish."""

    activation: str = "none"
    kernels = {"default": causal_conv_kernel}

    def verify(self, input, weight, bias=None, past_state=None):
        if self.activation not in ("none", "silu", "swish"):
            raise VerifyError(f"CausalConvWithState activation {self.activation!r} is not one of none, silu, swish")
        if input.dtype not in FLOATS or input.ndim != 3:
            raise VerifyError(f"CausalConvWithState input must be a float (batch, channels, length) tensor, got {input}")
        if weight.dtype != input.dtype or weight.ndim != 3 or weight.shape[1] not in (None, 1) or \
                weight.shape[0] not in (None, input.shape[1]):
            raise VerifyError(f"CausalConvWithState weight must be (channels, 1, k) = ({input.shape[1]}, 1, k) of "
                              f"{input.dtype}, got {weight}")
        k = weight.shape[2]
        if bias is not None and (bias.dtype != input.dtype or bias.shape not in ((input.shape[1],), (None,))):
            raise VerifyError(f"CausalConvWithState bias must be ({input.shape[1]},) of {input.dtype}, got {bias}")
        if past_state is not None:
            want = (input.shape[0], input.shape[1], None if k is None else k - 1)
            if past_state.ndim != 3 or any(a is not None and b is not None and a != b
                                           for a, b in zip(past_state.shape, want)):
                raise VerifyError(f"CausalConvWithState past_state must be {want}, got {past_state}")

    def infer(self, input, weight, bias=None, past_state=None):
        k = weight.shape[2]
        state = (input.shape[0], input.shape[1], None if k is None else k - 1)
        return input.spec.with_(), TensorSpec(state, input.dtype)

    def run(self, impl, inputs, outputs, backend):
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        past = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
        k = w.shape[2]
        if past is None:
            past = np.zeros((x.shape[0], x.shape[1], max(k - 1, 1)), x.dtype)
        impl(x, w, np.zeros(1, x.dtype) if bias is None else bias, past, outputs[0],
             outputs[1].reshape(x.shape[0], x.shape[1], k - 1), bias is not None, self.activation != "none",
             backend=backend)
