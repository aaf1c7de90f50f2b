"""ONNX random generators: RandomUniform, RandomNormal (opset 1+), RandomUniformLike,
RandomNormalLike (1+), Multinomial (7+) and Bernoulli (15+).

Numbers come from a counter-based generator written in the DSL: element i of a draw is a
hash (SplitMix64's finalizer) of (key, i), the key derived from the ``seed`` attribute, so
every backend, thread count and split of the work gives the same numbers for a seed.  A
uniform is the top 53 bits of the hash scaled to [0, 1); a normal is Box-Muller of the
uniforms of two counters (2i, 2i+1).  Without a ``seed`` each run draws a fresh key from the
operating system, so these ops are neither folded at compile time nor replayed.
Multinomial draws sample s of row b as the first class whose cumulative softmax probability
exceeds the uniform of counter b·sample_size + s.

ONNX does not pin the numbers a seed gives (onnx's own cases say implementations differ),
so opdsl's sequences are its own: stable across opdsl's backends, not equal to numpy's or
onnxruntime's.
"""
from __future__ import annotations

import math
import struct
from typing import Optional, Tuple

import numpy as np

import dsl
from dsl import In, Out, f64, i32, u64
from dsl.opgraph.spec import TensorSpec, VerifyError
from ops.elementwise import FLOATS, INTEGERS
from ops.quant import ONNX_DTYPES

P = dsl.TypeVar("P")
T = dsl.TypeVar("T")

UNIFORM, NORMAL, BERNOULLI = 0, 1, 2
TWO_PI = 2 * math.pi
GOLDEN = 0x9E3779B97F4A7C15


@dsl.func
def mix64(z: u64):
    """SplitMix64's finalizer: a bijection of u64 whose outputs pass BigCrush for counters."""
    z = (z ^ (z >> 30)) * u64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> 27)) * u64(0x94D049BB133111EB)
    return z ^ (z >> 31)


@dsl.func
def uniform01(key: u64, counter: u64):
    """A uniform f64 in [0, 1) for (key, counter)."""
    return f64(mix64(key + (counter + u64(1)) * u64(GOLDEN)) >> u64(11)) * f64(1.0 / 9007199254740992.0)


@dsl.kernel
def random_kernel(p: In[P], y: Out[T], key: u64, dist: i32, a: f64, b: f64):
    """UNIFORM: a + (b - a)·u; NORMAL: a + b·z (Box-Muller); BERNOULLI: 1 where u < p[i], else 0."""
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        if dist == NORMAL:
            u1 = uniform01(key, u64(2 * i))
            u2 = uniform01(key, u64(2 * i + 1))
            y.flat[i] = a + b * dsl.sqrt(-2 * dsl.log1p(-u1)) * dsl.cos(TWO_PI * u2)
        elif dist == BERNOULLI:
            y.flat[i] = 1 if uniform01(key, u64(i)) < f64(p.flat[i]) else 0
        else:
            y.flat[i] = a + (b - a) * uniform01(key, u64(i))


@dsl.kernel
def multinomial_kernel(logits: In[P, 2], y: Out[T, 2], key: u64):
    """y[b, s]: a class drawn from softmax(logits[b]) (unnormalized log-probabilities)."""
    classes = logits.shape[1]
    samples = y.shape[1]
    lo, hi = dsl.split(y.size)
    for i in range(lo, hi):
        b = i // samples
        top = f64(logits[b, 0])
        for c in range(1, classes):
            top = max(top, f64(logits[b, c]))
        total = f64(0)
        for c in range(classes):
            total += dsl.exp(f64(logits[b, c]) - top)
        target = uniform01(key, u64(i)) * total
        pick = classes - 1
        run = f64(0)
        for c in range(classes):
            run += dsl.exp(f64(logits[b, c]) - top)
            if run > target:
                pick = c
                break
        y.flat[i] = pick


def seed_key(seed: Optional[float]) -> int:
    """The generator key of a seed: its f64 bits (a fresh OS-random key when absent)."""
    if seed is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
    return struct.unpack("<Q", struct.pack("<d", float(seed)))[0]


class _Random(dsl.Op):
    seed: Optional[float] = None
    kernels = {"default": random_kernel}
    foldable = False  # a draw is not a constant (and without a seed differs per run)
    replay = False    # a seedless draw takes a new key at every run
    dist = UNIFORM

    def out_dtype(self, like: Optional[TensorSpec]) -> dsl.DType:
        if self.dtype is not None:
            dt = ONNX_DTYPES.get(self.dtype)
            if dt is None or dt not in self.allowed_out:
                raise VerifyError(f"{self.op_type} dtype {self.dtype} is not accepted; accepted: "
                                  f"{', '.join(map(str, self.allowed_out))} (ONNX TensorProto codes)")
            return dt
        if like is None or like.dtype not in self.allowed_out:
            raise VerifyError(f"{self.op_type} without a dtype attribute takes the input's dtype, which must be one of "
                              f"{', '.join(map(str, self.allowed_out))}; got {like}")
        return like.dtype

    def dist_params(self) -> Tuple[float, float]:
        return 0.0, 1.0

    def launch(self, impl, p, y, backend):
        if y.size == 0:
            return
        a, b = self.dist_params()
        impl(p, y, key=seed_key(self.seed), dist=self.dist, a=a, b=b, backend=backend)


class _Generator(_Random):
    """RandomUniform / RandomNormal: shape and dtype from attributes, no inputs."""
    dtype: int = 1
    shape: Tuple[int, ...] = ()
    allowed_out = FLOATS

    def verify(self):
        self.out_dtype(None)
        if any(d < 0 for d in self.shape):
            raise VerifyError(f"{self.op_type} shape must hold non-negative dims, got {list(self.shape)}")

    def infer(self):
        return TensorSpec(tuple(self.shape), self.out_dtype(None))

    def run(self, impl, inputs, outputs, backend):
        self.launch(impl, np.zeros(1, np.float32), outputs[0], backend)


class _Like(_Random):
    """RandomUniformLike / RandomNormalLike: the input's shape, its dtype unless ``dtype``."""
    dtype: Optional[int] = None
    allowed_out = FLOATS

    def verify(self, x):
        if x.dtype not in INTEGERS + FLOATS + (dsl.bool_,):
            raise VerifyError(f"{self.op_type} input dtype {x.dtype} is not supported")
        self.out_dtype(x)

    def infer(self, x):
        return TensorSpec(x.shape, self.out_dtype(x))

    def run(self, impl, inputs, outputs, backend):
        self.launch(impl, np.zeros(1, np.float32), outputs[0], backend)


@dsl.op("RandomUniform", since=1)
class RandomUniform(_Generator):
    """Uniform in [low, high)."""
    low: float = 0.0
    high: float = 1.0

    def dist_params(self):
        return float(self.low), float(self.high)


@dsl.op("RandomNormal", since=1)
class RandomNormal(_Generator):
    """Normal with ``mean`` and standard deviation ``scale``."""
    mean: float = 0.0
    scale: float = 1.0
    dist = NORMAL

    def dist_params(self):
        return float(self.mean), float(self.scale)


@dsl.op("RandomUniformLike", since=1)
class RandomUniformLike(_Like):
    low: float = 0.0
    high: float = 1.0

    def dist_params(self):
        return float(self.low), float(self.high)


@dsl.op("RandomNormalLike", since=1)
class RandomNormalLike(_Like):
    mean: float = 0.0
    scale: float = 1.0
    dist = NORMAL

    def dist_params(self):
        return float(self.mean), float(self.scale)


@dsl.op("Bernoulli", since=15)
class Bernoulli(_Random):
    """1 with probability input[i], else 0, in the input's dtype unless ``dtype``."""
    dtype: Optional[int] = None
    allowed_out = INTEGERS + FLOATS + (dsl.bool_,)
    dist = BERNOULLI

    def verify(self, x):
        if x.dtype not in FLOATS:
            raise VerifyError(f"Bernoulli input must hold float probabilities ({', '.join(map(str, FLOATS))}), "
                              f"got {x}")
        self.out_dtype(x)

    def infer(self, x):
        return TensorSpec(x.shape, self.out_dtype(x))

    def run(self, impl, inputs, outputs, backend):
        self.launch(impl, inputs[0], outputs[0], backend)


@dsl.op("Multinomial", since=7)
class Multinomial(_Random):
    """(batch, classes) float log-probabilities -> (batch, sample_size) class indices (i32 or i64)."""
    dtype: int = 6
    sample_size: int = 1
    allowed_out = (dsl.i32, dsl.i64)
    kernels = {"default": multinomial_kernel}

    def verify(self, x):
        if x.dtype not in FLOATS or x.ndim != 2:
            raise VerifyError(f"Multinomial input must be (batch_size, class_size) float log-probabilities, got {x}")
        if x.shape[1] == 0:
            raise VerifyError(f"Multinomial needs at least one class, got {x}")
        if self.sample_size < 1:
            raise VerifyError(f"Multinomial sample_size must be >= 1, got {self.sample_size}")
        self.out_dtype(None)

    def infer(self, x):
        return TensorSpec((x.shape[0], self.sample_size), self.out_dtype(None))

    def run(self, impl, inputs, outputs, backend):
        if outputs[0].size:
            impl(inputs[0], outputs[0], key=seed_key(self.seed), backend=backend)
