"""Forward kernels the dsl.grad tests differentiate, shared by tests/dsl/test_grad*.py."""
from __future__ import annotations

import dsl
from dsl import In, Out, f64, i32, i64


@dsl.kernel(threads=3)
def elementwise(x: In[f64], y: Out[f64], alpha: f64):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        v = x[i]
        y[i] = dsl.exp(v) * v + alpha * dsl.sin(v) / (1.0 + v * v)


@dsl.kernel(threads=2)
def row_softmax(x: In[f64, 2], y: Out[f64, 2]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        m = -1e300
        for j in range(x.shape[1]):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(x.shape[1]):
            s += dsl.exp(x[r, j] - m)
        for j in range(x.shape[1]):
            y[r, j] = dsl.exp(x[r, j] - m) / s


@dsl.kernel(threads=2, grid=3)
def layer_norm(x: In[f64, 2], gamma: In[f64], beta: In[f64], y: Out[f64, 2], eps: f64):
    r = dsl.thread_id() + dsl.num_threads() * dsl.tile_id()
    if r >= x.shape[0]:
        return
    n = x.shape[1]
    mean = 0.0
    for j in range(n):
        mean += x[r, j]
    mean = mean / n
    var = 0.0
    for j in range(n):
        d = x[r, j] - mean
        var += d * d
    inv = dsl.rsqrt(var / n + eps)
    for j in range(n):
        y[r, j] = (x[r, j] - mean) * inv * gamma[j] + beta[j]


@dsl.kernel(threads=4)
def matvec(a: In[f64, 2], v: In[f64], y: Out[f64]):
    lo, hi = dsl.split(a.shape[0])
    for i in range(lo, hi):
        acc = 0.0
        for j in range(a.shape[1]):
            acc += a[i, j] * v[j]
        y[i] = acc


@dsl.kernel(threads=4, grid=2)
def gather(table: In[f64], idx: In[i32], w: In[f64], y: Out[f64]):
    lo, hi = dsl.split(idx.shape[0], grid=True)
    for i in range(lo, hi):
        y[i] = table[idx[i]] * w[i] + table[idx[i]] ** 2


@dsl.func
def softplus(z):
    if z > 20.0:
        return z
    return dsl.log1p(dsl.exp(z))


@dsl.kernel(threads=4)
def with_func(x: In[f64], y: Out[f64]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        y[i] = softplus(2.0 * x[i]) * x[i]


@dsl.kernel(threads=4)
def branches(x: In[f64], b: In[f64], y: Out[f64]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        v = x[i] + b[0]
        if v > 0.5:
            w = v * v
        else:
            w = -3.0 * v
        y[i] = dsl.where(v < 0.2, dsl.sqrt(v + 1.0), w) + (v if v > 0.7 else 2.0 * v)


@dsl.kernel(threads=2)
def polynomial(x: In[f64], c: In[f64], y: Out[f64]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        p = 0.0
        for k in dsl.static_range(4):
            p = p * x[i] + c[k]
        y[i] = p


@dsl.kernel(threads=2)
def row_max_horner(x: In[f64, 2], y: Out[f64], z: Out[f64]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        m = x[r, 0]
        h = 0.0
        for j in range(1, x.shape[1]):
            m = max(m, x[r, j])
            h = h * 0.5 + dsl.tanh(x[r, j]) * h + x[r, j]  # carried, not an accumulation: recomputed
        y[r] = m
        z[r] = h


@dsl.kernel(threads=2, grid=(2, 2))
def grid_scale(x: In[f64, 2], s: In[f64, 2], y: Out[f64, 2]):
    r = dsl.tile_id(0) * dsl.num_threads() + dsl.thread_id()
    c = dsl.tile_id(1)
    if r < x.shape[0] and c < x.shape[1]:
        y[r, c] = x[r, c] * s[0, c] - s[1, c] * x[r, c] * x[r, c]


@dsl.kernel(threads=2)
def builtins_all(x: In[f64], y: Out[f64]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        v = x[i]
        p = v + 2.0
        h = v * 0.5
        t = dsl.exp(v) + dsl.log(p) + dsl.sqrt(p) + dsl.rsqrt(p) + dsl.tanh(v) + dsl.erf(v) + dsl.erfc(v)
        t += dsl.sin(v) + dsl.cos(v) + dsl.floor(v * 3.0) + dsl.ceil(v * 3.0) + dsl.rint(v * 3.0)
        t += dsl.tan(h) + dsl.asin(h) + dsl.acos(h) + dsl.atan(v) + dsl.sinh(v) + dsl.cosh(v)
        t += dsl.asinh(v) + dsl.acosh(p) + dsl.atanh(h) + dsl.expm1(v) + dsl.log1p(p) + abs(v - 0.3)
        t += min(v, 0.25) + max(v, h, 0.2) + dsl.clamp(v, 0.15, 0.3) + dsl.fma(v, p, h) + dsl.pow(p, v)
        y[i] = t + p ** 1.5 + v % 0.7 + v // 0.3


@dsl.kernel(threads=2)
def int_and_scalar(x: In[f64], k: In[i64], y: Out[f64], count: Out[i64], scale: f64):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        y[i] = x[i] * scale + k[i]
        count[i] = k[i] + 1


@dsl.kernel(threads=2)
def skip_self(x: In[f64], y: Out[f64]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        acc = 0.0
        for j in range(x.shape[0]):
            if j == i:
                continue
            acc += x[j] * x[i]
        y[i] = acc


@dsl.kernel(threads=1)
def max_2d(x: In[f64, 2], y: Out[f64]):
    m = -1e300
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            m = max(m, x[i, j] * 2.0)
    y[0] = m


@dsl.kernel(threads=1)
def integer_while_then_backwards(x: In[f64], y: Out[f64]):
    k = 0
    while k < x.shape[0]:  # integers only: replayed, not differentiated
        k += 2
    h = 0.0
    for i in range(k // 2 - 1, -1, -1):
        h = h * x[i] + x[i] * x[i]
    y[0] = h
