"""Kernel arguments from other libraries: torch tensors (DLPack) and buffer-protocol objects bind
zero-copy, with numpy's checks; other devices and writes into requires-grad tensors are errors."""
import array
import subprocess
import sys

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, f32, f64
from lazy_modules import optional  # tests/ is on sys.path; imported on first use, not at collection

torch = optional("torch")


@dsl.kernel
def axpy(x: In[f32], y: InOut[f32], a: f32 = 2.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] += a * x.flat[i]


@dsl.kernel
def row_sums(x: In[f64, 2], s: Out[f64, 1]):
    lo, hi = dsl.split(x.shape[0])
    for r in range(lo, hi):
        acc = 0.0
        for c in range(x.shape[1]):
            acc += x[r, c]
        s[r] = acc


def test_torch_tensors_bind_zero_copy(backend):
    x = torch.linspace(-1, 1, 37)
    y = torch.ones(37)
    axpy(x, y, a=3.0, backend=backend)      # written in place: y's own memory
    np.testing.assert_allclose(y.numpy(), 1 + 3 * x.numpy(), rtol=1e-6, atol=1e-6)


def test_torch_2d_reads_and_mixes_with_numpy(backend):
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    s = np.zeros(3)
    row_sums(x, s, backend=backend)
    np.testing.assert_allclose(s, x.numpy().sum(axis=1))


def test_requires_grad_tensor_may_be_read(backend):
    x = torch.linspace(0, 1, 8, requires_grad=True)
    y = torch.zeros(8)
    axpy(x, y, backend=backend)
    np.testing.assert_allclose(y.numpy(), 2 * x.detach().numpy(), rtol=1e-6)


def test_buffer_protocol_arrays_bind(backend):
    x = array.array("f", [1.0, 2.0, 3.0])
    y = array.array("f", [0.5, 0.5, 0.5])
    axpy(x, y, a=1.0, backend=backend)
    assert list(y) == [1.5, 2.5, 3.5]


def test_writing_into_requires_grad_tensor_is_an_error():
    y = torch.zeros(4, requires_grad=True)
    with pytest.raises(TypeError, match=r"argument 'y' \(InOut\[dsl.f32\]\) would be written, but the torch "
                                        r"tensor requires grad"):
        axpy(torch.ones(4), y)


def test_tensor_on_another_device_names_parameter_and_device():
    with pytest.raises(TypeError, match=r"axpy\(\): argument 'x' .* on device 'meta'.*x.cpu\(\)"):
        axpy(torch.empty(4, device="meta"), torch.zeros(4))


def test_numpy_checks_apply_to_torch_tensors():
    with pytest.raises(TypeError, match=r"argument 'x' has dtype f64 .*expected f32"):
        axpy(torch.ones(4, dtype=torch.float64), torch.zeros(4))
    with pytest.raises(ValueError, match=r"argument 'x' has 2 dimension\(s\); expected 2|'s' has 2 dimension"):
        row_sums(torch.ones(2, 2, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"argument 'x' is not C-contiguous; pass x.contiguous\(\)"):
        row_sums(torch.ones(3, 2, dtype=torch.float64).t(), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"argument 'y' is InOut\[dsl.f32\] but the array is read-only"):
        axpy(array.array("f", [1.0]), memoryview(bytes(4)).cast("f"))


def test_overlapping_torch_views_are_rejected():
    buf = torch.zeros(8)
    with pytest.raises(ValueError, match="overlap in memory"):
        axpy(buf[:4], buf[2:6])


def test_import_dsl_does_not_import_torch():
    code = "import sys, dsl, dsl.runtime.foreign; dsl.Op; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_repeated_torch_launches_keep_every_check(backend):
    """The second launch takes the fast path through numpy views: results and errors stay the same."""
    for k in range(3):
        x, y = torch.full((5,), float(k)), torch.zeros(5)
        axpy(x, y, a=2.0, backend=backend)
        assert y.tolist() == [2.0 * k] * 5
    with pytest.raises(TypeError, match="requires grad"):
        axpy(torch.ones(5), torch.zeros(5, requires_grad=True), backend=backend)
    buf = torch.zeros(8)
    with pytest.raises(ValueError, match="overlap in memory"):
        axpy(buf[:4], buf[2:6], backend=backend)


class DLPackOnly:
    """Another library's array: only the DLPack protocol (as JAX's CPU arrays expose it)."""

    def __init__(self, array, device=(1, 0)):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


def test_any_dlpack_array_binds(backend):
    x = DLPackOnly(np.arange(6, dtype=np.float32))
    target = np.zeros(6, np.float32)
    y = DLPackOnly(target)
    axpy(x, y, a=0.5, backend=backend)
    np.testing.assert_allclose(target, 0.5 * np.arange(6))


def test_dlpack_array_on_a_device_names_it():
    with pytest.raises(TypeError, match=r"argument 'x' \(In\[dsl.f32\]\) is a DLPackOnly on device 'cuda:1'"):
        axpy(DLPackOnly(np.zeros(2, np.float32), device=(2, 1)), np.zeros(2, np.float32))
