"""DSL kernels of the example package: one kernel per op, specialized per dtype by TypeVars
(f16 loads give f32, so the f16 variants compute in f32)."""
import dsl
from dsl import In, Out, f32

T = dsl.TypeVar("T")
W = dsl.TypeVar("W")


@dsl.kernel
def custom_relu(x: In[T], y: Out[T], alpha: f32, beta: f32):
    """HardSigmoid: y = clamp(alpha * x + beta, 0, 1)."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.clamp(alpha * x.flat[i] + beta, f32(0.0), f32(1.0))


@dsl.kernel
def rms_norm(x: In[T], w: In[W, 1], y: Out[T], epsilon: f32):
    """Each thread normalizes whole rows of the last axis, summing x^2 in f32."""
    n = w.shape[0]
    rows = x.size // n if n > 0 else 0
    lo, hi = dsl.split(rows)
    for r in range(lo, hi):
        base = r * n
        acc = f32(0.0)
        for j in range(n):
            v = f32(x.flat[base + j])
            acc += v * v
        scale = dsl.rsqrt(acc / f32(n) + epsilon)
        for j in range(n):
            y.flat[base + j] = f32(w[j]) * f32(x.flat[base + j]) * scale


@dsl.kernel
def copy(x: In[T], y: Out[T]):
    """y = x, bit for bit: quantized i8/u8 values keep their scale and offset (the op's output
    spec carries the input's quantization)."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]
