"""opdsl: a JIT-compiled operator DSL.  ``import dsl`` gives the whole public API.

The kernel language and kernel objects load now; the op/graph compiler, ONNX I/O and raw
OpenCL load on first use of one of their names (``_LAZY``), so ``import dsl`` stays fast and
this package never imports the layers above the kernel runtime (docs/architecture.md).
"""
import importlib

from dsl.lang.types import (  # noqa: F401
    DType, TypeVar, In, Out, InOut, Zeroed, Vec, const,
    bool_, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64,
)
from dsl.lang.errors import (  # noqa: F401  (the whole hierarchy: docs/language.md, Errors)
    Error, CompileError, UnsupportedSyntax, TypeMismatch, NotDifferentiable, LaunchError, KernelIndexError,
    KernelValueError, VerifyError, TensorSizeError, UnknownOpError, OnnxImportError, PackageError, NoDevice,
    DriverError, BuildError,
    SourceLoc,
)
from dsl.lang.builtins import BUILTINS as _BUILTINS

# Every builtin of the registry under its dsl name (dsl.exp, dsl.min, dsl.thread_id, dsl.log, ...):
# registering one in dsl/lang/builtins.py is all it takes to export it.
globals().update({_name: _b.runtime for _name, _b in _BUILTINS.items()})
from dsl.runtime.kernel import kernel, func, Kernel  # noqa: F401
from dsl.version import __version__  # noqa: F401

# public name -> the module that defines it
_LAZY = {
    "Op": "dsl.opgraph.op",
    "op": "dsl.opgraph.op",
    "TensorSpec": "dsl.opgraph.spec",
    "SequenceSpec": "dsl.opgraph.host_values",
    "OptionalSpec": "dsl.opgraph.host_values",
    "Quant": "dsl.opgraph.spec",
    "Graph": "dsl.opgraph.graph",
    "Tensor": "dsl.opgraph.graph",
    "composed": "dsl.opgraph.composed",
    "Model": "dsl.opgraph.model",
    "Launch": "dsl.opgraph.launch_plan", "Scratch": "dsl.opgraph.launch_plan",
    "recorded_plan": "dsl.opgraph.recorded_plan", "recorded_plan_when_constant": "dsl.opgraph.recorded_plan",
    "load_onnx": "dsl.onnx.load",
    "load_model": "dsl.opgraph.artifact_load",
    "ArtifactError": "dsl.opgraph.artifact_format", "ArtifactWarning": "dsl.opgraph.artifact_format",
    "register_package": "dsl.package", "check_package": "dsl.package",
    "RawOpenCL": "dsl.runtime.raw_opencl",
    "target": "dsl.runtime.target", "Target": "dsl.runtime.target",
    "autotune": "dsl.runtime.autotune",
    "grad": "dsl.runtime.grad",
}


_LAZY_MODULES = {"onnx": "dsl.onnx", "dask": "dsl.dask", "torch": "dsl.torch"}  # dsl.onnx.to_graph without importing dsl.onnx first


def __getattr__(name):
    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name])
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dsl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))
