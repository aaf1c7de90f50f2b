"""Activation ops: Gelu, Elu, Selu, Celu, Softplus, Softsign, HardSigmoid, HardSwish, Mish,
ThresholdedRelu (floats), PRelu (slope broadcast to x) and Shrink (every numeric dtype).
Relu, LeakyRelu, Sigmoid and Tanh live in ops/elementwise.py.

The float activations share ``activation_kernel`` (the function a run-time code, the
attributes two scalars), computed in f32 for f16/bf16/f32 and in f64 for f64, written so
large |x| neither overflows nor cancels: Softplus is ``max(x, 0) + log1p(exp(-|x|))``,
Elu/Selu/Celu use ``expm1``, Gelu ``erfc``.  NaN passes through every function but
ThresholdedRelu and Shrink, which give 0 for it (as ONNX's reference does).
"""
from __future__ import annotations

import dsl
from dsl import In, Out, f32, f64, i32
from dsl.opgraph.spec import VerifyError
from ops.elementwise import FLOATS, NUMERIC, broadcast_shape, launch_broadcast, require_dtype, same_dtype

F = dsl.TypeVar("F")
T = dsl.TypeVar("T")

# operation codes of activation_kernel (module constants fold into kernels)
GELU = 0
GELU_TANH = 1
ELU = 2
SELU = 3
CELU = 4
SOFTPLUS = 5
SOFTSIGN = 6
HARD_SIGMOID = 7
MISH = 8
THRESHOLDED_RELU = 9
HARD_SWISH = 10
SWISH = 11

SQRT_HALF = 0.7071067811865476    # 1 / sqrt(2)
SQRT_2_OVER_PI = 0.7978845608028654
GELU_CUBIC = 0.044715


@dsl.kernel
def activation_kernel(x: In[F], y: Out[F], op: i32, alpha: f32, beta: f32):
    """y = f(x) for a float dtype, f chosen by ``op`` (once, outside the loops, so each loop
    can vectorize); ``alpha``/``beta`` are its attributes (ONNX float attributes are f32, so
    f64 tensors see them exactly)."""
    lo, hi = dsl.split(x.size)
    if op == GELU:  # x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2: no cancellation for x << 0
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = 0.5 * v * dsl.erfc(-v * SQRT_HALF)
    elif op == GELU_TANH:  # 1 + tanh(u) = 2 / (1 + exp(-2u)), again without cancellation
        for i in range(lo, hi):
            v = x.flat[i]
            u = SQRT_2_OVER_PI * (v + GELU_CUBIC * v * v * v)
            y.flat[i] = v / (1.0 + dsl.exp(-2.0 * u))
    elif op == ELU:
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = alpha * dsl.expm1(v) if v < 0 else v
    elif op == SELU:  # alpha, gamma
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = beta * (alpha * dsl.expm1(v) if v <= 0 else v)
    elif op == CELU:
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = alpha * dsl.expm1(v / alpha) if v < 0 else v
    elif op == SOFTPLUS:
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = max(v, 0.0) + dsl.log1p(dsl.exp(-abs(v)))
    elif op == SOFTSIGN:
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = v / (1.0 + abs(v))
    elif op == HARD_SIGMOID or op == HARD_SWISH:
        swish = op == HARD_SWISH
        for i in range(lo, hi):
            v = x.flat[i]
            h = alpha * v + beta
            h = 0.0 if h < 0 else (1.0 if h > 1 else h)  # NaN stays NaN
            y.flat[i] = v * h if swish else h
    elif op == MISH:
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = v * dsl.tanh(max(v, 0.0) + dsl.log1p(dsl.exp(-abs(v))))
    elif op == SWISH:
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = v * stable_sigmoid(alpha * v)
    else:  # THRESHOLDED_RELU
        for i in range(lo, hi):
            v = x.flat[i]
            y.flat[i] = v if v > alpha else 0.0


@dsl.func
def stable_sigmoid(v):
    """1 / (1 + exp(-v)) without overflow: exp of -|v| only."""
    e = dsl.exp(-abs(v))
    s = 1.0 / (1.0 + e)
    return s if v >= 0 else e * s


@dsl.kernel
def swiglu_kernel(a: In[F], b: In[F], y: Out[F], alpha: f32):
    """y = a · sigmoid(alpha · a) · b (SwiGLU's gate times its value)."""
    lo, hi = dsl.split(a.size)
    for i in range(lo, hi):
        v = a.flat[i]
        y.flat[i] = v * stable_sigmoid(alpha * v) * b.flat[i]


@dsl.kernel
def prelu_kernel(x: In[T, 4], slope: In[T, 4], y: Out[T, 4]):
    """y = x if x >= 0 else slope * x; slope's axes of size 1 are broadcast along y (4-D views
    prepared by launch_broadcast)."""
    n1 = y.shape[1]
    n2 = y.shape[2]
    n3 = y.shape[3]
    s3 = 1 if slope.shape[3] > 1 else 0  # element strides of slope, 0 along broadcast axes
    s2 = slope.shape[3] if slope.shape[2] > 1 else 0
    s1 = slope.shape[2] * slope.shape[3] if slope.shape[1] > 1 else 0
    s0 = slope.shape[1] * slope.shape[2] * slope.shape[3] if slope.shape[0] > 1 else 0
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        v = x.flat[i]
        if v < 0:
            i3 = i % n3
            r = i // n3
            i2 = r % n2
            r = r // n2
            y.flat[i] = v * slope.flat[(r // n1) * s0 + (r % n1) * s1 + i2 * s2 + i3 * s3]
        else:
            y.flat[i] = v


@dsl.kernel
def shrink_kernel(x: In[T], y: Out[T], bias: f64, lambd: f64):
    """x + bias below -lambd, x - bias above lambd, else 0; computed in f64 and stored in
    x's dtype (integers truncate toward zero, as ONNX's reference casts)."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        if v < -lambd:
            y.flat[i] = v + bias
        elif v > lambd:
            y.flat[i] = v - bias
        else:
            y.flat[i] = 0


# --------------------------------------------------------------------------- ops

class _Activation(dsl.Op):
    """A float activation: ``code`` picks the function; ``alpha``/``beta`` the params it uses."""

    code = GELU
    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    keeps_padding = True  # f(0) == 0; ops where it is not say False
    kernels = {"default": activation_kernel}

    def verify(self, x):
        require_dtype(self.op_type, x, FLOATS)

    def infer(self, x):
        return x.spec.with_()

    def scalars(self):
        """(alpha, beta) as the kernel reads them."""
        return 0.0, 0.0

    def run(self, impl, inputs, outputs, backend):
        alpha, beta = self.scalars()
        impl(inputs[0], outputs[0], op=self.code, alpha=alpha, beta=beta, backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        alpha, beta = self.scalars()
        return [dsl.Launch(impl, (inputs[0], outputs[0]), {"op": self.code, "alpha": alpha, "beta": beta},
                           backend=backend)]


@dsl.op("Gelu", since=20)
class Gelu(_Activation):
    """x * Phi(x): exact (erf) or the tanh approximation."""
    approximate: str = "none"

    def verify(self, x):
        super().verify(x)
        if self.approximate not in ("none", "tanh"):
            raise VerifyError(f"Gelu approximate must be 'none' or 'tanh', got {self.approximate!r}")

    def run(self, impl, inputs, outputs, backend):
        code = GELU_TANH if self.approximate == "tanh" else GELU
        impl(inputs[0], outputs[0], op=code, alpha=0.0, beta=0.0, backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        code = GELU_TANH if self.approximate == "tanh" else GELU
        return [dsl.Launch(impl, (inputs[0], outputs[0]), {"op": code, "alpha": 0.0, "beta": 0.0}, backend=backend)]


@dsl.op("Elu", since=6)
class Elu(_Activation):
    """x if x >= 0 else alpha * (exp(x) - 1)."""
    alpha: float = 1.0
    code = ELU

    def scalars(self):
        return self.alpha, 0.0


@dsl.op("Selu", since=6)
class Selu(_Activation):
    """gamma * (x if x > 0 else alpha * (exp(x) - 1))."""
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875
    code = SELU

    def scalars(self):
        return self.alpha, self.gamma


@dsl.op("Celu", since=12)
class Celu(_Activation):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    alpha: float = 1.0
    code = CELU

    def verify(self, x):
        super().verify(x)
        if self.alpha == 0:
            raise VerifyError("Celu alpha must not be 0 (it divides x)")

    def scalars(self):
        return self.alpha, 0.0


@dsl.op("Softplus", since=1)
class Softplus(_Activation):
    """log(exp(x) + 1), without overflow for large x."""
    code = SOFTPLUS
    keeps_padding = False  # softplus(0) = log 2


@dsl.op("Softsign", since=1)
class Softsign(_Activation):
    """x / (1 + |x|)."""
    code = SOFTSIGN


@dsl.op("HardSigmoid", since=6)
class HardSigmoid(_Activation):
    """max(0, min(1, alpha * x + beta))."""
    alpha: float = 0.2
    beta: float = 0.5
    code = HARD_SIGMOID
    keeps_padding = False

    def scalars(self):
        return self.alpha, self.beta


@dsl.op("HardSwish", since=14)
class HardSwish(_Activation):
    """x * max(0, min(1, x / 6 + 1 / 2))."""
    code = HARD_SWISH

    def scalars(self):
        return 1.0 / 6.0, 0.5


@dsl.op("Mish", since=18)
class Mish(_Activation):
    """x * tanh(softplus(x))."""
    code = MISH


@dsl.op("Swish", since=24)
class Swish(_Activation):
    """x * sigmoid(alpha * x) (SiLU for alpha = 1)."""
    alpha: float = 1.0
    code = SWISH

    def scalars(self):
        return self.alpha, 0.0


@dsl.op("SwiGLU", since=28)
class SwiGLU(dsl.Op):
    """Swish(A) * B for same-shape gate A and value B (no broadcasting, as ONNX says)."""
    alpha: float = 1.0
    kernels = {"default": swiglu_kernel}

    def verify(self, a, b):
        require_dtype("SwiGLU", a, FLOATS, "A")
        same_dtype("SwiGLU", a, b)
        if a.ndim != b.ndim or any(x is not None and y is not None and x != y for x, y in zip(a.shape, b.shape)):
            raise VerifyError(f"SwiGLU gate A {a} and value B {b} must have the same shape (no broadcasting)")

    def infer(self, a, b):
        return a.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], inputs[1], outputs[0], self.alpha, backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@dsl.op("ThresholdedRelu", since=10)
class ThresholdedRelu(_Activation):
    """x if x > alpha else 0."""
    alpha: float = 1.0
    code = THRESHOLDED_RELU
    keeps_padding = False  # alpha < 0 lets 0 through: still 0, but keep it simple

    def scalars(self):
        return self.alpha, 0.0


PRELU_TYPES = FLOATS + (dsl.i32, dsl.i64, dsl.u32, dsl.u64)


@dsl.op("PRelu", since=7)
class PRelu(dsl.Op):
    """x if x >= 0 else slope * x; slope broadcasts to x (ONNX unidirectional broadcasting)."""
    inplace = {0: 0}
    kernels = {"default": prelu_kernel}

    def slope_shape(self, x_shape, slope_shape):
        """The shape slope is read with (numpy-broadcast against x's)."""
        return tuple(slope_shape)

    def verify(self, x, slope):
        same_dtype(self.op_type, x, slope)
        require_dtype(self.op_type, x, PRELU_TYPES)
        shape = self.slope_shape(x.shape, slope.shape)
        out = broadcast_shape(x.shape, shape, what="PRelu x and slope")
        if len(out) != x.ndim or any(o is not None and d is not None and o != d for o, d in zip(out, x.shape)):
            raise VerifyError(f"PRelu slope of shape {slope.shape} must broadcast to x's shape {x.shape} "
                              f"(unidirectionally: x's shape is the output's)")

    def infer(self, x, slope):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        x, slope = inputs
        slope = slope.reshape(self.slope_shape(x.shape, slope.shape))
        launch_broadcast(impl, [x, slope], outputs[0], 4, backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@dsl.op("PRelu", since=6, until=6)
class PReluV6(PRelu):
    """Opset 6 (Caffe2's PRelu): a 1-D slope with one value per channel applies along axis 1
    (x of shape (N, C, ...), slope (C,)); other slopes broadcast as in opset 7."""

    def slope_shape(self, x_shape, slope_shape):
        if len(slope_shape) == 1 and len(x_shape) >= 2 and slope_shape[0] not in (None, 1) and slope_shape[0] == x_shape[1]:
            return (slope_shape[0],) + (1,) * (len(x_shape) - 2)
        return tuple(slope_shape)


@dsl.op("Shrink", since=9)
class Shrink(dsl.Op):
    """x + bias if x < -lambd, x - bias if x > lambd, else 0; every numeric dtype."""
    bias: float = 0.0
    lambd: float = 0.5
    formats = ("plain", "nchwc16")
    inplace = {0: 0}
    kernels = {"default": shrink_kernel}

    def verify(self, x):
        require_dtype("Shrink", x, NUMERIC)

    def infer(self, x):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], bias=self.bias, lambd=self.lambd, backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only
