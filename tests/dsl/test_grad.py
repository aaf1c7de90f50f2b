"""``dsl.grad``: gradients of kernels on every backend, in f64, against central finite
differences of the forward kernel and against torch autograd (skipped without torch).

Each case runs the gradient kernel with a random incoming gradient ``grad_<out>`` and compares
the gradient added into every ``grad_<in>`` with d(sum(grad_out * out))/d(in)."""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from tests.dsl import grad_kernels as K

RNG = np.random.default_rng(7)


def _outputs(kernel, args):
    """Run the forward (numba) and return its float outputs."""
    outs = {p.name: np.zeros_like(args[p.name]) for p in kernel.params
            if p.kind == "tensor" and p.annotation.access == "out"}
    kernel(**{**args, **outs}, backend="numba")
    return outs


def _loss(kernel, args, seeds):
    outs = _outputs(kernel, args)
    return sum(float((seeds[n] * outs[n]).sum()) for n in seeds)


def finite_differences(kernel, args, seeds, wrt, h=1e-6):
    grads = {}
    for name in wrt:
        x = args[name]
        g = np.zeros_like(x)
        for k in range(x.size):
            old = x.flat[k]
            x.flat[k] = old + h
            up = _loss(kernel, args, seeds)
            x.flat[k] = old - h
            down = _loss(kernel, args, seeds)
            x.flat[k] = old
            g.flat[k] = (up - down) / (2 * h)
        grads[name] = g
    return grads


def run_grad(kernel, args, backend, twice=False):
    """-> (incoming gradients by output, gradients by input) from dsl.grad(kernel)."""
    g = dsl.grad(kernel)
    outs = {p.name: np.zeros_like(args[p.name]) for p in kernel.params
            if p.kind == "tensor" and p.annotation.access == "out" and args[p.name].dtype.kind == "f"}
    seeds = {f"grad_{n}": RNG.standard_normal(a.shape) for n, a in outs.items()}
    grads = {p.name: np.zeros_like(args[p.name[5:]]) for p in g.params[len(kernel.params):]
             if p.annotation.access == "inout"}
    for _ in range(2 if twice else 1):
        g(**args, **seeds, **grads, backend=backend)
    return {n[5:]: s for n, s in seeds.items()}, {n[5:]: v for n, v in grads.items()}


def check(kernel, args, backend, torch_fn=None, rtol=1e-6, atol=1e-7):
    seeds, grads = run_grad(kernel, args, backend)
    fd = finite_differences(kernel, args, seeds, grads)
    for name in grads:
        np.testing.assert_allclose(grads[name], fd[name], rtol=1e-5, atol=1e-6, err_msg=f"grad_{name} vs FD")
    if torch_fn is not None:
        torch = pytest.importorskip("torch")
        tens = {n: torch.tensor(a, requires_grad=n in grads) for n, a in args.items()
                if isinstance(a, np.ndarray)}
        scal = {n: a for n, a in args.items() if not isinstance(a, np.ndarray)}
        outs = torch_fn(**tens, **scal)
        loss = sum((torch.tensor(seeds[n]) * outs[n]).sum() for n in seeds)
        loss.backward()
        for name in grads:
            np.testing.assert_allclose(grads[name], tens[name].grad.numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"grad_{name} vs torch")
    return seeds, grads


def test_elementwise(backend):
    x = RNG.uniform(-1, 1, 11)
    check(K.elementwise, dict(x=x, y=np.zeros(11), alpha=0.7), backend,
          lambda x, y, alpha: {"y": x.exp() * x + alpha * x.sin() / (1 + x * x)})


def test_row_softmax(backend):
    x = RNG.standard_normal((3, 5))
    check(K.row_softmax, dict(x=x, y=np.zeros((3, 5))), backend, lambda x, y: {"y": x.softmax(1)})


def test_layer_norm_shares_gamma_and_beta_between_rows(backend):
    x, g, b = RNG.standard_normal((5, 4)), RNG.standard_normal(4), RNG.standard_normal(4)

    def ref(x, gamma, beta, y, eps):
        import torch
        return {"y": torch.nn.functional.layer_norm(x, (4,), gamma, beta, eps)}
    check(K.layer_norm, dict(x=x, gamma=g, beta=b, y=np.zeros((5, 4)), eps=1e-5), backend, ref)


def test_matvec_shares_the_vector(backend):
    a, v = RNG.standard_normal((6, 4)), RNG.standard_normal(4)
    check(K.matvec, dict(a=a, v=v, y=np.zeros(6)), backend, lambda a, v, y: {"y": a @ v})


def test_gather_with_repeated_indices(backend):
    table = RNG.standard_normal(4)
    idx = np.array([0, 2, 2, 1, 2, 0, 3, 2, 2], np.int32)
    w = RNG.standard_normal(9)

    def ref(table, idx, w, y):
        t = table[idx.long()]
        return {"y": t * w + t ** 2}
    seeds, grads = check(K.gather, dict(table=table, idx=idx, w=w, y=np.zeros(9)), backend, ref)
    assert "idx" not in grads  # integer tensors get no gradient


def test_func_helper(backend):
    x = np.concatenate([RNG.uniform(-2, 2, 7), [10.5, 11.0]])

    def ref(x, y):
        import torch
        z = 2 * x
        return {"y": torch.where(z > 20, z, torch.log1p(torch.exp(z))) * x}
    check(K.with_func, dict(x=x, y=np.zeros(9)), backend, ref)


def test_if_else_where_and_conditional(backend):
    x = np.array([-0.4, -0.05, 0.1, 0.3, 0.45, 0.62, 0.8, 1.3])
    b = np.array([0.01])

    def ref(x, b, y):
        import torch
        v = x + b[0]
        w = torch.where(v > 0.5, v * v, -3.0 * v)
        return {"y": torch.where(v < 0.2, torch.sqrt(v + 1.0), w) + torch.where(v > 0.7, v, 2.0 * v)}
    check(K.branches, dict(x=x, b=b, y=np.zeros(8)), backend, ref)


def test_static_range(backend):
    x, c = RNG.uniform(-1, 1, 5), RNG.standard_normal(4)

    def ref(x, c, y):
        p = x * 0
        for k in range(4):
            p = p * x + c[k]
        return {"y": p}
    check(K.polynomial, dict(x=x, c=c, y=np.zeros(5)), backend, ref)


def test_max_accumulation_and_recomputed_carry(backend):
    x = RNG.standard_normal((3, 6))

    def ref(x, y, z):
        import torch
        h = x[:, 0] * 0
        for j in range(1, 6):
            h = h * 0.5 + torch.tanh(x[:, j]) * h + x[:, j]
        return {"y": x.amax(1), "z": h}
    check(K.row_max_horner, dict(x=x, y=np.zeros(3), z=np.zeros(3)), backend, ref)


def test_grid(backend):
    x, s = RNG.standard_normal((4, 2)), RNG.standard_normal((2, 2))
    check(K.grid_scale, dict(x=x, s=s, y=np.zeros((4, 2))), backend,
          lambda x, s, y: {"y": x * s[0] - s[1] * x * x})


def test_every_float_math_builtin(backend):
    x = np.array([0.04, 0.12, 0.21, 0.27, 0.36, 0.44, 0.58, 0.61])

    def ref(x, y):
        import torch
        v, p, h = x, x + 2, x * 0.5
        t = v.exp() + p.log() + p.sqrt() + p.rsqrt() + v.tanh() + torch.erf(v) + torch.erfc(v)
        t = t + v.sin() + v.cos() + torch.floor(v * 3) + torch.ceil(v * 3) + torch.round(v * 3)
        t = t + h.tan() + h.asin() + h.acos() + v.atan() + v.sinh() + v.cosh()
        t = t + v.asinh() + p.acosh() + h.atanh() + v.expm1() + p.log1p() + (v - 0.3).abs()
        t = t + torch.clamp(v, max=0.25) + torch.maximum(torch.maximum(v, h), torch.full_like(v, 0.2))
        t = t + torch.clamp(v, 0.15, 0.3) + v * p + h + p ** v
        return {"y": t + p ** 1.5 + torch.remainder(v, 0.7) + torch.div(v, 0.3, rounding_mode="floor")}
    check(K.builtins_all, dict(x=x, y=np.zeros(8)), backend, ref)


def test_gradients_add_into_the_inout_tensors():
    x = RNG.uniform(-1, 1, 6)
    args = dict(x=x, y=np.zeros(6), alpha=0.3)
    seeds, once = run_grad(K.elementwise, args, "numba")
    g = dsl.grad(K.elementwise)
    acc = once["x"].copy()
    g(**args, grad_y=seeds["y"], grad_x=acc)
    np.testing.assert_allclose(acc, 2 * once["x"])


def test_parameter_convention():
    g = dsl.grad(K.int_and_scalar)
    assert [p.name for p in g.params] == ["x", "k", "y", "count", "scale", "grad_y", "grad_x"]
    assert [repr(p.annotation) for p in g.params[-2:]] == ["In[dsl.f64]", "InOut[dsl.f64]"]
    assert dsl.grad(K.int_and_scalar) is g  # one gradient kernel per kernel
    x, k = RNG.standard_normal(5), np.arange(5, dtype=np.int64)
    gx = np.zeros(5)
    gy = RNG.standard_normal(5)
    count = np.full(5, -7, np.int64)
    g(x, k, np.zeros(5), count, 2.5, gy, gx)
    np.testing.assert_allclose(gx, 2.5 * gy)
    assert (count == -7).all()  # the gradient kernel writes only the gradients


def test_continue_nested_max_integer_while_and_a_backward_range(backend):
    x = RNG.uniform(0.2, 1.0, 5)
    check(K.skip_self, dict(x=x, y=np.zeros(5)), backend)
    check(K.max_2d, dict(x=RNG.standard_normal((3, 4)), y=np.zeros(1)), backend,
          lambda x, y: {"y": (2 * x).amax().reshape(1)})
    check(K.integer_while_then_backwards, dict(x=x, y=np.zeros(1)), backend)
