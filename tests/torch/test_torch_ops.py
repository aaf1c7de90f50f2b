"""opdsl ops in PyTorch: eager calls on torch tensors, autograd (op backward hooks, composed
bodies, built-in ops, dsl.grad), torch.library registration and torch.compile."""
import numpy as np
import pytest

import dsl
import ops
from dsl import In, Out, TypeVar, f32, f64
from lazy_modules import optional  # tests/ is on sys.path; imported on first use, not at collection

torch = optional("torch")

F = TypeVar("F", (f32, f64))


@dsl.kernel
def squareplus_kernel(x: In[F], y: Out[F], b: f64 = 4.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = 0.5 * (v + dsl.sqrt(v * v + b))


@dsl.kernel
def squareplus_grad_kernel(x: In[F], g: In[F], dx: Out[F], b: f64 = 4.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        dx.flat[i] = g.flat[i] * 0.5 * (1.0 + v / dsl.sqrt(v * v + b))


@dsl.op("Squareplus", domain="test.torch")
class Squareplus(dsl.Op):
    """Its backward launches a kernel on the torch tensors it is given."""
    b: float = 4.0
    kernels = {"default": squareplus_kernel}

    def infer(self, x):
        return x.spec

    def backward(self, grad_outputs, inputs, outputs):
        (g,), (x,) = grad_outputs, inputs
        dx = torch.empty_like(x)
        squareplus_grad_kernel(x, g.contiguous(), dx, b=self.b)
        return (dx,)


@dsl.op("Cube", domain="test.torch")
class Cube(dsl.Op):
    """No backward hook: its gradient must come from dsl.grad of its kernel."""
    kernels = {"default": squareplus_kernel}

    def infer(self, x):
        return x.spec


class Opaque(dsl.Op):
    """Its own run and no backward: nothing can differentiate it."""
    op_type = "Opaque"
    domain = "test.torch"
    kernels = {"default": squareplus_kernel}

    def infer(self, x):
        return x.spec

    def run(self, impl, inputs, outputs, backend):
        outputs[0][...] = inputs[0] * 2


@dsl.composed("SoftBias", domain="test.torch")
def soft_bias(x, bias, *, b: float = 1.0):
    return Squareplus(ops.Add(x, bias), b=b)


def squareplus_ref(x, b):
    return 0.5 * (x + torch.sqrt(x * x + b))


def test_eager_call_returns_torch_tensor_of_input_dtype(backend):
    for dtype in (torch.float32, torch.float64):
        x = torch.linspace(-3, 3, 11, dtype=dtype)
        y = Squareplus(x, b=2.0, backend=backend)
        assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.shape == x.shape
        np.testing.assert_allclose(y.numpy(), squareplus_ref(x, 2.0).numpy(), rtol=1e-6)


def test_autograd_from_backward_hook(backend):
    x = torch.linspace(-2, 2, 9, dtype=torch.float64, requires_grad=True)
    y = Squareplus(x, b=3.0, backend=backend)
    assert y.requires_grad
    (y * torch.arange(9.0, dtype=torch.float64)).sum().backward()
    xr = x.detach().clone().requires_grad_()
    (squareplus_ref(xr, 3.0) * torch.arange(9.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-12)


def test_gradcheck_f64():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: Squareplus(t, b=0.5), (x,))


def test_no_grad_inputs_record_nothing():
    y = Squareplus(torch.ones(3))
    assert not y.requires_grad and y.grad_fn is None


def test_composed_op_backpropagates_through_its_body(backend):
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = soft_bias(x, bias, b=2.0, backend=backend)
    w = torch.randn(4, 5, dtype=torch.float64)
    (y * w).sum().backward()
    xr, br = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    (squareplus_ref(xr + br, 2.0) * w).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), squareplus_ref(xr + br, 2.0).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(bias.grad.numpy(), br.grad.numpy(), rtol=1e-12)   # broadcast: summed


@pytest.mark.parametrize("name", ["Add", "Sub", "Mul", "Div", "Tanh", "Sigmoid", "Relu", "MatMul", "FullyConnected"])
def test_builtin_op_gradients_match_torch(name):
    a = torch.randn(3, 4, dtype=torch.float64) + 0.1
    b = torch.rand(4, dtype=torch.float64) + 0.5
    w = torch.randn(2, 4, dtype=torch.float64)
    cases = {
        "Add": (ops.Add, (a, b), lambda a, b: a + b), "Sub": (ops.Sub, (a, b), lambda a, b: a - b),
        "Mul": (ops.Mul, (a, b), lambda a, b: a * b), "Div": (ops.Div, (a, b), lambda a, b: a / b),
        "Tanh": (ops.Tanh, (a,), torch.tanh), "Sigmoid": (ops.Sigmoid, (a,), torch.sigmoid),
        "Relu": (ops.Relu, (a,), torch.relu), "MatMul": (ops.MatMul, (a, w.t().contiguous()), torch.matmul),
        "FullyConnected": (ops.FullyConnected, (a, w, torch.randn(2, dtype=torch.float64)),
                           lambda x, w, b: x @ w.t() + b),
    }
    op, args, ref = cases[name]
    mine = [t.clone().requires_grad_() for t in args]
    theirs = [t.clone().requires_grad_() for t in args]
    out, expected = op(*mine), ref(*theirs)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = torch.randn_like(expected)
    out.backward(g)
    expected.backward(g)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_register_returns_a_torch_library_op():
    f = dsl.torch.register(Squareplus)
    assert f is dsl.torch.register(Squareplus)        # once per class
    assert "opdsl::test_torch__Squareplus" in str(f)
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    np.testing.assert_allclose(f(x, b=1.5).numpy(), squareplus_ref(x, 1.5).numpy(), rtol=1e-12)
    schema = str(torch.ops.opdsl.test_torch__Squareplus.default._schema)
    assert "Tensor x, *, float b=4." in schema and "str? backend=None" in schema


def test_torch_compile_fullgraph_with_dynamic_batch():
    f = dsl.torch.register(Squareplus)

    def model(x):
        return f(x * 2.0, b=1.0).sum(dim=1)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    for batch in (3, 5, 8):
        x = torch.randn(batch, 4, dtype=torch.float64, requires_grad=True)
        y = compiled(x)
        np.testing.assert_allclose(y.detach().numpy(), model(x).detach().numpy(), rtol=1e-12)
        y.sum().backward()
        xr = x.detach().clone().requires_grad_()
        squareplus_ref(xr * 2.0, 1.0).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-12)


def test_fake_impl_follows_infer_for_shape_changing_ops():
    f = dsl.torch.register(ops.FullyConnected)
    compiled = torch.compile(lambda x, w, b: f(x, w, b), fullgraph=True, backend="aot_eager", dynamic=True)
    for batch in (2, 6):
        x, w, b = torch.randn(batch, 3), torch.randn(5, 3), torch.randn(5)
        y = compiled(x, w, b)
        assert y.shape == (batch, 5)
        np.testing.assert_allclose(y.numpy(), (x @ w.t() + b).numpy(), rtol=1e-5, atol=1e-6)


def test_gradient_from_dsl_grad(backend):
    if not hasattr(dsl, "grad"):
        pytest.skip("this opdsl has no dsl.grad")
    x = torch.linspace(-2, 2, 7, dtype=torch.float64, requires_grad=True)
    Cube(x, backend=backend).sum().backward()
    xr = x.detach().clone().requires_grad_()
    squareplus_ref(xr, 4.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-10)


def test_op_without_backward_fails_at_backward_naming_it():
    x = torch.ones(3, requires_grad=True)
    y = Opaque()(x)                                   # the forward runs
    np.testing.assert_array_equal(y.detach().numpy(), [2.0, 2.0, 2.0])
    with pytest.raises(RuntimeError, match=r"test.torch::Opaque|Opaque.* has no backward: define backward\(self, "
                                           r"grad_outputs, inputs, outputs\)"):
        y.sum().backward()


def test_backward_hook_returning_wrong_count_is_an_error():
    class Twice(dsl.Op):
        op_type, domain = "TwiceBadGrad", "test.torch"
        kernels = {"default": squareplus_kernel}

        def infer(self, x):
            return x.spec

        def backward(self, grad_outputs, inputs, outputs):
            return grad_outputs[0], grad_outputs[0]
    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"backward returned 2 gradient\(s\) for 1 input\(s\)"):
        Twice()(x).sum().backward()


def test_meta_tensors_give_shapes_without_running():
    y = ops.FullyConnected(torch.empty(7, 3, device="meta"), torch.empty(5, 3, device="meta"))
    assert y.device.type == "meta" and y.shape == (7, 5)


def test_op_on_another_device_is_a_type_error(monkeypatch):
    from dsl.torch import custom_op
    x = torch.ones(3)
    monkeypatch.setattr(custom_op, "_device_of", lambda t: "cuda:0")   # no CUDA here: pretend
    with pytest.raises(TypeError, match=r"Squareplus.* input 0 \(x\) is on device 'cuda:0'.*x.cpu\(\)"):
        dsl.torch.register(Squareplus)(x)


def test_register_rejects_what_a_torch_schema_cannot_express():
    class Takes(dsl.Op):
        op_type, domain = "TakesArray", "test.torch"
        table: np.ndarray

        def infer(self, x):
            return x.spec
    with pytest.raises(TypeError, match=r"param 'table' has type .*ndarray.*which a torch schema cannot carry"):
        dsl.torch.register(Takes)
    with pytest.raises(TypeError, match=r"variable number of inputs"):
        dsl.torch.register(ops.Concat)
    with pytest.raises(TypeError, match="expects a dsl.Op subclass"):
        dsl.torch.register(squareplus_kernel)


def test_torch_compile_of_a_composed_op_and_its_body_backward():
    f = dsl.torch.register(soft_bias)                  # a composed op class

    def model(x, bias):
        return f(x, bias, b=2.0).sum()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    for batch in (2, 5):
        x = torch.randn(batch, 3, dtype=torch.float64, requires_grad=True)
        bias = torch.randn(3, dtype=torch.float64, requires_grad=True)
        compiled(x, bias).backward()
        xr, br = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
        squareplus_ref(xr + br, 2.0).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(bias.grad.numpy(), br.grad.numpy(), rtol=1e-12)
