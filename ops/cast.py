"""Cast and CastLike: convert a tensor to another dtype.

One kernel, specialized by the input dtype T and the output dtype U: the conversion is
the language's own store semantics (docs/language.md, *Semantics*): floats to integers
truncate toward zero (as numpy's ``astype`` for in-range values; out-of-range values,
undefined in ONNX, saturate and NaN gives 0), integers to narrower integers wrap,
anything to bool is ``!= 0`` (NaN is True), bool to numbers is 0/1, f16/bf16 round to
nearest even.  float8, int4 and string tensors are not opdsl dtypes, so ``to`` naming
them is refused when the model is loaded.
"""
from __future__ import annotations

import numpy as np

import dsl
from dsl import In, Out
from dsl.lang.types import DType
from dsl.opgraph.spec import VerifyError
from ops import elementwise_table as table

T = dsl.TypeVar("T")
U = dsl.TypeVar("U")

ALL = (dsl.bool_, dsl.i8, dsl.u8, dsl.i16, dsl.u16, dsl.i32, dsl.u32, dsl.i64, dsl.u64,
       dsl.f16, dsl.bf16, dsl.f32, dsl.f64)


@dsl.kernel
def cast_kernel(x: In[T], y: Out[U]):
    """y = x converted element by element (shape-agnostic: a flat loop)."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i]


def _check(what: str, dtype: DType, allowed, name: str) -> None:
    if dtype not in allowed:
        raise VerifyError(f"{what} {name} has dtype {dtype}; accepted: {', '.join(map(str, allowed))}")


class _Cast(dsl.Op):
    allowed = ALL
    formats = ("plain", "nchwc16")
    keeps_padding = True  # 0 converts to 0 (False) in every dtype
    kernels = {"default": cast_kernel}

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only


@table.implements
@dsl.op("Cast", since=6, until=12)
class CastV6(_Cast):
    """Cast of opsets 6-12: every opdsl dtype but bf16."""
    to: DType
    allowed = tuple(t for t in ALL if t != dsl.bf16)

    def verify(self, x):
        _check("Cast", x.dtype, self.allowed, "input")
        _check("Cast", self.to, self.allowed, "attribute 'to'")

    def infer(self, x):
        return x.spec.with_(dtype=self.to, quant=None)


@table.implements
@dsl.op("Cast", since=13)
class Cast(_Cast):
    """Cast of opset 13+ (bf16).  ``saturate`` (19+) and ``round_mode`` (24+) only affect
    float8 targets, which opdsl does not have: accepted and ignored."""
    to: DType
    saturate: int = 1
    round_mode: str = "up"

    def verify(self, x):
        _check("Cast", x.dtype, self.allowed, "input")
        _check("Cast", self.to, self.allowed, "attribute 'to'")

    def infer(self, x):
        return x.spec.with_(dtype=self.to, quant=None)


@dsl.op("CastLike", since=15)
class CastLike(_Cast):
    """Cast ``x`` to the dtype of ``target_type`` (only its dtype is read)."""
    saturate: int = 1
    round_mode: str = "up"
    formats = ("plain",)

    def verify(self, x, target_type):
        _check("CastLike", x.dtype, self.allowed, "input")
        _check("CastLike", target_type.dtype, self.allowed, "target_type")

    def infer(self, x, target_type):
        return x.spec.with_(dtype=target_type.dtype, quant=None)


# the unsigned type of each width: BitCast moves bits through it
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dsl.op("BitCast", since=26)
class BitCast(dsl.Op):
    """The same bytes read as dtype ``to`` of the same width (no value conversion); the copy
    runs on unsigned views of that width, so any pair of equal-width dtypes shares a kernel."""
    to: DType
    kernels = {"default": cast_kernel}

    def verify(self, x):
        _check("BitCast", x.dtype, ALL, "input")
        _check("BitCast", self.to, ALL, "attribute 'to'")
        if x.dtype.np.itemsize != self.to.np.itemsize:
            raise VerifyError(f"BitCast needs dtypes of one width: input {x.dtype} has {x.dtype.np.itemsize * 8} "
                              f"bits, 'to' {self.to} has {self.to.np.itemsize * 8}")

    def infer(self, x):
        return x.spec.with_(dtype=self.to, quant=None)

    def run(self, impl, inputs, outputs, backend):
        bits = _BITS[inputs[0].dtype.itemsize]
        impl(inputs[0].reshape(-1).view(bits), outputs[0].reshape(-1).view(bits), backend=backend)

    plan = dsl.recorded_plan  # launches from shapes and params only
