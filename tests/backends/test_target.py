"""dsl.target(backend): each backend's facts agree with an independent reading of the hardware
(numba's codegen for the CPU it compiles for, pyopencl for the chosen OpenCL device), and an op's select hook can
pick a kernel by them."""
import dataclasses

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32


def _llvm_host():
    """The enabled features of the CPU numba compiles for, as numba's codegen reads them, parsed
    here (not by backends.host): llvmlite's host, or NUMBA_CPU_FEATURES (which OPDSL_CPU fills)."""
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    flat = config.CPU_FEATURES if config.CPU_FEATURES is not None else get_host_cpu_features()
    return {f[1:].lower() for f in flat.split(",") if f.startswith("+")}


def _llvm_cpu_name():
    from llvmlite import binding
    from numba.core import config
    return config.CPU_NAME or binding.get_host_cpu_name()


@pytest.fixture(scope="module")
def opencl_target():
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")
    return dsl.target("opencl")


def test_numba_features_are_llvms_host_features():
    from backends.host import amx_granted
    t = dsl.target("numba")
    host = _llvm_host()
    assert host, "llvmlite reports no enabled feature"
    assert host <= t.features
    # everything else is one of the documented derived names
    assert t.features - host <= {"fp64", "f16", "bf16", "f16_arith", "bf16_arith", "amx"}
    assert ("amx" in t) == ({"amx-tile", "amx-int8"} <= host and amx_granted(frozenset(host)))
    assert "fp64" in t
    if host & {"f16c", "avx512fp16"}:
        assert "f16" in t
    if "avx512bf16" in host:
        assert "bf16" in t and "bf16_arith" in t
    if "avx512fp16" not in host and "fullfp16" not in host:
        assert "f16_arith" not in t
    assert t.cpu == _llvm_cpu_name()
    assert t.device and t.compute_units >= 1 and t.local_mem_bytes == 0


def test_vector_bits_follow_the_features():
    t = dsl.target("numba")
    host = _llvm_host()
    expected = 512 if "avx512f" in host else 256 if host & {"avx", "avx2"} else 128
    assert t.vector_bits == expected
    assert t.vector_width(dsl.f32) == expected // 32
    assert t.vector_width(dsl.f64) == expected // 64
    assert t.vector_width(dsl.i8) == expected // 8
    assert t.vector_width(dsl.bool_) == expected // 8
    assert t.vector_width(dsl.f16) == expected // 16


def test_interpreter_has_the_same_host_facts_as_numba():
    a, b = dsl.target("interpreter"), dsl.target("numba")
    assert a.backend == "interpreter" and b.backend == "numba"
    same_code = dict(parallel=b.parallel, packed_kernels=b.packed_kernels,
                     fastmath_keeps_inf_nan=b.fastmath_keeps_inf_nan)  # what each backend's code makes of it
    assert dataclasses.replace(a, backend="numba", **same_code) == b


def test_opencl_facts_are_the_chosen_devices(opencl_target):
    from backends.opencl import runtime as rt
    dev = rt.device()
    cl_dev = dev.device
    t = opencl_target
    ext = {e.lower() for e in cl_dev.extensions.split()}
    assert ext <= t.features
    assert ("fp64" in t) == ("cl_khr_fp64" in ext)
    assert ("f16" in t) == ("cl_khr_fp16" in ext)
    assert ("int64_atomics" in t) == ("cl_khr_int64_base_atomics" in ext)
    assert ("subgroups" in t) == bool(ext & {"cl_khr_subgroups", "cl_intel_subgroups"})
    assert t.vector_bits == max(1, cl_dev.preferred_vector_width_float) * 32
    assert t.compute_units == cl_dev.max_compute_units
    assert t.local_mem_bytes == cl_dev.local_mem_size
    assert cl_dev.name.strip() in t.device and cl_dev.platform.name.strip() in t.device
    assert "avx512f" not in t  # a device's features are the device's, never the host's ISA


def test_opencl_without_a_device_raises_the_backends_error(monkeypatch):
    from backends.opencl import runtime as rt
    from backends import base

    def no_device():
        raise rt.NoDevice("no usable OpenCL device: (test)")

    monkeypatch.setattr(rt, "device", no_device)
    with pytest.raises(rt.NoDevice, match=r"\(test\)"):
        base.get("opencl").target()
    with pytest.raises(rt.NoDevice, match=r"\(test\)"):
        dsl.target("opencl")


def test_unknown_backend_names_the_known_ones():
    from backends import base
    with pytest.raises(ValueError) as expected:
        base.get("no-such-backend")
    with pytest.raises(ValueError) as got:
        dsl.target("no-such-backend")
    assert str(got.value) == str(expected.value)
    assert "numba" in str(got.value) and "opencl" in str(got.value)


def test_default_backend(monkeypatch):
    from dsl import config
    assert dsl.target().backend == config.default_backend()
    monkeypatch.setattr(config, "_default_backend", "interpreter")
    assert dsl.target().backend == "interpreter"


def test_target_is_frozen_hashable_and_readable():
    t = dsl.target("numba")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.vector_bits = 1
    assert hash(t) == hash(dsl.target("numba"))
    assert {t: 1}[dsl.target("numba")] == 1
    assert isinstance(t, dsl.Target)
    assert t.cores == t.compute_units
    assert ("AVX2" in t) == ("avx2" in t.features) and 3 not in t
    text = repr(t)
    assert text.startswith("Target(backend='numba'") and f"vector_bits={t.vector_bits}" in text
    assert "fp64" in text


def test_the_host_probe_is_cached():
    from backends import host
    assert host.host() is host.host()
    assert dsl.target("numba") is dsl.target("numba")


# --------------------------------------------------------------------------- select by target


@dsl.kernel
def add_one(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + 1.0


@dsl.kernel
def add_two(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + 2.0


class ByTarget(dsl.Op):
    """Two kernels that differ on purpose, so the output tells which one select picked."""
    kernels = {"avx512": add_one, "portable": add_two}

    def infer(self, x):
        return x.spec

    def select(self, x, backend):
        return "avx512" if "avx512f" in dsl.target(backend) else "portable"


@pytest.mark.parametrize("backend", ["interpreter", "numba", "opencl"])
def test_an_op_selects_its_kernel_by_target(backend, request):
    if backend == "opencl":
        request.getfixturevalue("opencl_target")
    x = np.arange(10, dtype=np.float32)
    if backend == "opencl":
        wide = False  # an OpenCL device lists extensions, not the host's ISA
    else:
        wide = "avx512f" in _llvm_host()
    y = ByTarget()(x, backend=backend)
    np.testing.assert_array_equal(y, x + (1 if wide else 2))
