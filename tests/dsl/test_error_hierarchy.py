"""One hierarchy of errors rooted at ``dsl.Error`` (dsl/lang/errors.py): each class is also the
built-in exception it behaves like, the modules that raised them first name the same classes,
and compile errors say what kind they are."""
import pickle

import numpy as np
import pytest

import dsl
from dsl import In, Out, f32

HIERARCHY = {
    "CompileError": (), "UnsupportedSyntax": ("CompileError",), "TypeMismatch": ("CompileError",),
    "NotDifferentiable": ("CompileError",), "LaunchError": (RuntimeError,),
    "KernelIndexError": ("LaunchError", IndexError), "VerifyError": (ValueError,), "TensorSizeError": (ValueError,),
    "UnknownOpError": (LookupError,), "OnnxImportError": (ValueError,), "PackageError": (ValueError,),
    "NoDevice": (RuntimeError,), "DriverError": ("NoDevice",), "BuildError": (RuntimeError,),
}


@pytest.mark.parametrize("name", sorted(HIERARCHY))
def test_every_error_is_a_dsl_error_and_the_builtin_it_behaves_like(name):
    cls = getattr(dsl, name)
    assert issubclass(cls, dsl.Error)
    for base in HIERARCHY[name]:
        assert issubclass(cls, getattr(dsl, base) if isinstance(base, str) else base)


def test_the_modules_that_raised_them_first_name_the_same_classes():
    from backends.bounds import KernelIndexError
    from backends.opencl.devices import DriverError, NoDevice
    from backends.opencl.runtime import BuildError
    from dsl.onnx.errors import OnnxImportError
    from dsl.opgraph.limits import TensorSizeError
    from dsl.opgraph.registry import UnknownOpError
    from dsl.opgraph.spec import VerifyError
    from dsl.package.errors import PackageError
    assert (KernelIndexError, NoDevice, DriverError, BuildError, OnnxImportError, TensorSizeError, UnknownOpError,
            VerifyError, PackageError) == (dsl.KernelIndexError, dsl.NoDevice, dsl.DriverError, dsl.BuildError,
                                           dsl.OnnxImportError, dsl.TensorSizeError, dsl.UnknownOpError,
                                           dsl.VerifyError, dsl.PackageError)


def sliced(x: In[f32], y: Out[f32]):
    y[0:2] = x[0:2]


def float_index(x: In[f32], y: Out[f32]):
    y[x[0]] = 1.0


@pytest.mark.parametrize("fn, kind, words", [(sliced, dsl.UnsupportedSyntax, "slices are not supported"),
                                             (float_index, dsl.TypeMismatch, "must be an integer, got f32")])
def test_compile_errors_say_their_kind_and_keep_it_through_pickling(fn, kind, words):
    x, y = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(kind, match=words) as info:
        dsl.kernel(fn)(x, y, backend="interpreter")
    err = info.value
    assert type(err) is kind and err.loc.line > 0
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is kind and str(again) == str(err)


def test_a_verify_error_is_caught_by_except_value_error_and_except_dsl_error():
    with pytest.raises(ValueError):
        raise dsl.VerifyError("bad input")
    with pytest.raises(dsl.Error):
        raise dsl.PackageError("ops.yaml", 3, "inputs", "must be a list")
