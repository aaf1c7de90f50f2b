"""Arrays of other libraries as kernel arguments: a zero-copy numpy view of any CPU array that
exposes ``__dlpack__`` (PyTorch, JAX, CuPy's host arrays...) or the buffer protocol
(``array.array``, ``memoryview``, ``bytearray``).  JAX arrays are immutable, so they bind as
inputs only.

The launch fast path only knows ``np.ndarray``; anything else falls back to ``Kernel.bind``,
which calls ``as_numpy`` here, so a numpy launch never pays for this.  The view shares the
caller's memory, so a kernel writes straight into a torch tensor, and the numpy checks
(dtype, rank, contiguity, read-only outputs) then apply unchanged.  Nothing here imports torch:
a tensor (or a JAX array) is recognised by the module its type comes from.
"""
from __future__ import annotations

from typing import Any

import numpy as np

# DLPack's DLDeviceType numbers (dlpack.h) -> the name users know them by
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
                 10: "rocm", 11: "rocm_host", 13: "cuda_managed", 14: "oneapi", 15: "webgpu", 16: "hexagon"}
_CPU_DEVICES = (1, 3, 11)  # host memory: kDLCPU, kDLCUDAHost, kDLROCMHost (pinned, readable by the CPU)


def is_foreign(value: Any) -> bool:
    """Whether ``value`` is an array of another library that ``as_numpy`` can view."""
    if isinstance(value, np.ndarray):
        return False
    if hasattr(value, "__dlpack__"):
        return True
    if isinstance(value, (str, int, float, complex, bool)):
        return False
    try:
        memoryview(value).release()
        return True
    except TypeError:
        return False


def _library(value: Any) -> str:
    return type(value).__module__.split(".", 1)[0]


def _is_torch(value: Any) -> bool:
    return _library(value) == "torch"


def _is_jax(value: Any) -> bool:
    return _library(value) in ("jax", "jaxlib")


def device_of(value: Any) -> str:
    """'cpu', 'cuda:0', ... for a DLPack array (torch's own spelling for torch tensors)."""
    if _is_torch(value) and hasattr(value, "device"):
        return str(value.device)
    try:
        kind, index = value.__dlpack_device__()
    except Exception:
        return "cpu"
    name = _DEVICE_NAMES.get(int(kind), f"DLPack device type {int(kind)}")
    return name if int(kind) in _CPU_DEVICES and name == "cpu" else f"{name}:{int(index)}"


def as_numpy(kname: str, pname: str, annotation, value: Any) -> np.ndarray:
    """A numpy view of ``value`` (no copy) for parameter ``pname`` of kernel ``kname``.

    Raises TypeError for an array on another device, for writing into a torch tensor that
    requires grad or into a JAX array, for a JAX tracer, and for an object that is neither DLPack
    nor a buffer."""
    writable = annotation.writable
    where = f"{kname}(): argument '{pname}' ({annotation!r})"
    if hasattr(value, "__dlpack__"):
        if _is_jax(value):
            _check_jax(where, pname, writable, value)
        torch_tensor = _is_torch(value)
        if torch_tensor:
            off_host = value.device.type != "cpu"
        else:
            try:
                off_host = int(value.__dlpack_device__()[0]) not in _CPU_DEVICES
            except Exception:
                off_host = False
        if off_host:
            raise TypeError(f"{where} is a {type(value).__name__} on device '{device_of(value)}'; kernels run on "
                            f"host memory: pass a CPU array (for torch: {pname}.cpu())")
        if torch_tensor:
            return _torch_view(where, pname, writable, value)
        try:
            return np.from_dlpack(value)
        except (BufferError, TypeError, RuntimeError) as e:
            if _is_jax(value):  # bfloat16: DLPack's numpy importer does not know it
                return _jax_host_view(where, value)
            raise TypeError(f"{where}: a {type(value).__name__} could not be shared through DLPack ({e})") from None
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"{where} must be an array: numpy, or any CPU array with __dlpack__ or the buffer "
                        f"protocol (torch.Tensor, array.array...), got {type(value).__name__}") from None
    try:
        return np.asarray(view)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: its buffer has no numpy equivalent ({e})") from None


def _torch_view(where: str, pname: str, writable: bool, t) -> np.ndarray:
    """A torch tensor's memory as numpy.  Tensors that require grad export only detached
    (their data, for reading); bfloat16 goes through its 16-bit pattern, which DLPack's numpy
    importer does not know."""
    if t.requires_grad:
        if writable:
            raise TypeError(f"{where} would be written, but the torch tensor requires grad: autograd cannot see "
                            f"a kernel's writes. Write into a tensor without requires_grad (torch.empty_like(...)), "
                            f"or call the op through dsl.torch so the write is recorded")
        t = t.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()  # lazy views: DLPack refuses them (a copy; fine for reading)
        if writable:
            raise TypeError(f"{where} is a lazily conjugated/negated torch view; pass a materialized tensor")
    import torch  # already imported: the value is a torch tensor
    if t.dtype == torch.bfloat16:
        from dsl.lang.types import bf16
        return np.from_dlpack(t.view(torch.int16)).view(bf16.np)
    try:
        return t.numpy()  # zero-copy, and cheaper than the DLPack round trip
    except (BufferError, TypeError, RuntimeError) as e:
        raise TypeError(f"{where}: torch dtype {t.dtype} has no kernel dtype ({e})") from None


def _check_jax(where: str, pname: str, writable: bool, a) -> None:
    """A JAX array binds read-only: it is immutable, and a tracer (inside ``jax.jit``, ``jax.grad``,
    ``jax.vmap``) has no values yet."""
    import jax  # already imported: the value is a JAX array
    if isinstance(a, jax.core.Tracer):
        raise TypeError(f"{where} is a JAX tracer ({type(a).__name__}): a kernel runs on concrete arrays, not "
                        f"inside jax.jit/grad/vmap; call it outside the traced function, or through "
                        f"jax.pure_callback")
    if writable:
        raise TypeError(f"{where} would be written, but JAX arrays are immutable: pass a numpy array for "
                        f"'{pname}' (np.empty(shape, dtype)) and make a JAX array of the result (jnp.asarray)")


def _jax_host_view(where: str, a) -> np.ndarray:
    """A CPU JAX array of a dtype DLPack cannot carry (bfloat16), through its ``__array__`` (no copy
    on CPU), as the kernel's dtype."""
    try:
        view = np.asarray(a)
    except Exception as e:
        raise TypeError(f"{where}: a {type(a).__name__} could not be shared ({e})") from None
    if view.dtype.itemsize == 2 and view.dtype.name == "bfloat16":
        from dsl.lang.types import bf16
        view = view.view(bf16.np)
    return view


def contiguity_hint(value: Any, pname: str) -> str:
    """How to make ``value`` C-contiguous in its own library."""
    if _is_torch(value):
        return f"{pname}.contiguous()"
    return f"np.ascontiguousarray({pname})"


def torch_numpy(t) -> np.ndarray:
    """A torch CPU tensor's memory as a numpy array (detached; bfloat16 as ml_dtypes' bfloat16)."""
    return _torch_view("tensor", "tensor", False, t.detach())
