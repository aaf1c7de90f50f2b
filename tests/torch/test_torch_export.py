"""Train in PyTorch through opdsl ops, export with dsl.torch.export, run back with dsl.load_onnx
(and onnxruntime where the model is standard ONNX plus functions)."""
import importlib.util

import numpy as np
import pytest

import dsl
import ops
from dsl import In, Out, TypeVar, f32, f64
from lazy_modules import optional  # tests/ is on sys.path; imported on first use, not at collection

torch = optional("torch")
onnx = pytest.importorskip("onnx")

F = TypeVar("F", (f32, f64))


@dsl.kernel
def softsign_kernel(x: In[F], y: Out[F], scale: f64 = 1.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = x.flat[i]
        y.flat[i] = scale * v / (1.0 + abs(v))


@dsl.op("ScaledSoftsign", domain="test.export", since=2)
class ScaledSoftsign(dsl.Op):
    scale: float = 1.0
    kernels = {"default": softsign_kernel}

    def infer(self, x):
        return x.spec

    def backward(self, grad_outputs, inputs, outputs):
        (g,), (x,) = grad_outputs, inputs
        return (g * self.scale / (1 + x.abs()) ** 2,)


@dsl.composed("TanhShift", domain="test.export")
def tanh_shift(x, shift):
    """Standard ops only: onnxruntime runs it through its FunctionProto."""
    return ops.Tanh(ops.Add(x, shift))


def two_layer():
    """The network (its class is made here, not at import: torch loads when a test first needs it)."""
    class TwoLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.l1 = torch.nn.Linear(4, 16)
            self.l2 = torch.nn.Linear(16, 1)
            self.shift = torch.nn.Parameter(torch.zeros(16))

        def forward(self, x):
            h = ScaledSoftsign(self.l1(x), scale=1.5)
            return self.l2(tanh_shift(h, self.shift))
    return TwoLayer()


@pytest.fixture(scope="module")
def trained():
    """A two-layer network with an opdsl activation and a composed op, trained on y = sin(x0) + x1 x2."""
    net = two_layer()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, 4, generator=gen)
    y = (torch.sin(x[:, 0]) + x[:, 1] * x[:, 2]).unsqueeze(1)
    optim = torch.optim.Adam(net.parameters(), lr=0.02)
    losses = []
    for _ in range(60):
        optim.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return net, x, losses


def test_network_with_opdsl_ops_trains(trained):
    net, _, losses = trained
    assert losses[-1] < 0.5 * losses[0]
    assert net.shift.grad is not None and net.shift.grad.abs().sum() > 0   # through the composed body


def test_export_writes_ops_in_their_domains(trained, tmp_path):
    net, x, _ = trained
    model = dsl.torch.export(net, (x[:8],), tmp_path / "net.onnx", input_names=["x"], output_names=["y"],
                             dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    nodes = {(n.domain, n.op_type): n for n in model.graph.node}
    assert ("test.export", "ScaledSoftsign") in nodes and ("test.export", "TanhShift") in nodes
    attr = {a.name: onnx.helper.get_attribute_value(a) for a in nodes[("test.export", "ScaledSoftsign")].attribute}
    assert attr == {"scale": pytest.approx(1.5)}
    assert {o.domain: o.version for o in model.opset_import}["test.export"] == 2     # highest since
    assert [(f.domain, f.name) for f in model.functions] == [("test.export", "TanhShift")]
    onnx.checker.check_model(model)
    assert (tmp_path / "net.onnx").exists()


def test_load_onnx_reproduces_pytorch(trained, tmp_path, backend):
    net, x, _ = trained
    path = tmp_path / "net.onnx"
    dsl.torch.export(net, (x[:8],), path, input_names=["x"], output_names=["y"],
                     dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    model = dsl.load_onnx(str(path), backend=backend)
    for batch in (x[:5], x[:32]):                                    # a dynamic batch
        got = model.run({"x": batch.numpy()})["y"]
        np.testing.assert_allclose(got, net(batch).detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
def test_onnxruntime_runs_a_composed_op_through_its_function(tmp_path):
    import onnxruntime as ort

    class Shifted(torch.nn.Module):
        def forward(self, x, s):
            return tanh_shift(x, s) * 2

    x, s = torch.randn(3, 5), torch.randn(5)
    path = tmp_path / "shift.onnx"
    dsl.torch.export(Shifted(), (x, s), path, input_names=["x", "s"], output_names=["y"])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x.numpy(), "s": s.numpy()})[0]
    np.testing.assert_allclose(got, (torch.tanh(x + s) * 2).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dsl.load_onnx(str(path)).run({"x": x.numpy(), "s": s.numpy()})["y"], got,
                               rtol=1e-5, atol=1e-6)


def test_export_passes_torch_keywords_through(trained, tmp_path):
    net, x, _ = trained
    model = dsl.torch.export(net, (x[:2],), None, input_names=["features"], output_names=["score"],
                             opset_version=18)
    assert [i.name for i in model.graph.input] == ["features"]
    assert [o.name for o in model.graph.output] == ["score"]
    assert {o.domain: o.version for o in model.opset_import}[""] == 18


@pytest.mark.skipif(importlib.util.find_spec("onnxscript") is None, reason="dynamo=True needs onnxscript")
def test_dynamo_exporter(trained, tmp_path):
    net, x, _ = trained
    path = tmp_path / "dynamo.onnx"
    model = dsl.torch.export(net, (x[:8],), path, dynamo=True, input_names=["x"], output_names=["y"])
    assert {(n.domain, n.op_type) for n in model.graph.node} >= {("test.export", "ScaledSoftsign"),
                                                                ("test.export", "TanhShift")}
    assert [(f.domain, f.name) for f in model.functions if f.domain == "test.export"] == [("test.export", "TanhShift")]
    assert {o.domain: o.version for o in model.opset_import}["test.export"] == 2
    got = dsl.load_onnx(str(path)).run({"x": x[:8].numpy()})["y"]
    np.testing.assert_allclose(got, net(x[:8]).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_dynamo_without_onnxscript_says_what_to_install(trained):
    if importlib.util.find_spec("onnxscript") is not None:
        pytest.skip("onnxscript is installed")
    net, x, _ = trained
    with pytest.raises(ImportError, match="needs onnxscript"):
        dsl.torch.export(net, (x[:2],), None, dynamo=True)
