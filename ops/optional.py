"""Optional ops: Optional, OptionalHasElement and OptionalGetElement.

An optional is ``None`` or a value (a tensor or a sequence) when the model runs, a host value
(dsl/opgraph/host_values.py): these ops only wrap, test and unwrap references, so they are
``run_host`` only and compute nothing.  From opset 18 OptionalHasElement and
OptionalGetElement also take a plain tensor or sequence (always "present").
"""
from __future__ import annotations

from typing import Any

import numpy as np

import dsl
from dsl.opgraph.host_values import HOST, OptionalSpec, SequenceSpec, is_host, kind_name
from dsl.opgraph.spec import TensorSpec, VerifyError


class _OptionalOp(dsl.Op):
    host_values = "always"  # even on tensors they run on the host: they test and pass references
    kernels = {"host": HOST}
    foldable = False
    replay = False


@dsl.op("Optional", since=15)
class Optional(_OptionalOp):
    """An optional holding ``input``, or an empty one of ``type`` (a TensorSpec or
    SequenceSpec; ONNX's TypeProto attribute) when the input is absent."""

    type: Any = None

    def verify(self, x=None):
        if x is None and not isinstance(self.type, (TensorSpec, SequenceSpec)):
            raise VerifyError(f"Optional without an input needs its 'type' attribute (a tensor or sequence "
                              f"type), got {self.type!r}")
        if isinstance(x, OptionalSpec):
            raise VerifyError(f"Optional input must be a tensor or a sequence, got {kind_name(x)} ({x})")
        if x is not None and self.type is not None and getattr(self.type, "dtype", None) != x.dtype:
            raise VerifyError(f"Optional input is {x} but its 'type' attribute says {self.type}")

    def infer(self, x=None):
        return OptionalSpec(x if x is not None else self.type)

    def run_host(self, inputs, backend):
        return [inputs[0] if inputs else None]


class _HasElement(_OptionalOp):
    """Whether the optional input holds a value (a bool scalar); an absent input has none."""

    def infer(self, x=None):
        return TensorSpec((), dsl.bool_)

    def run_host(self, inputs, backend):
        return [np.array(bool(inputs) and inputs[0] is not None)]


@dsl.op("OptionalHasElement", since=15, until=17)
class OptionalHasElement15(_HasElement):
    def verify(self, x=None):
        if not isinstance(x, OptionalSpec):
            raise VerifyError(f"OptionalHasElement (opset 15) input must be an optional, got "
                              f"{'nothing' if x is None else kind_name(x)}; opset 18 also takes tensors and sequences")


@dsl.op("OptionalHasElement", since=18)
class OptionalHasElement(_HasElement):
    pass


class _GetElement(_OptionalOp):
    """The value inside the optional input (a tensor or a sequence passes through)."""

    def infer(self, x):
        return x.elem if isinstance(x, OptionalSpec) else x.with_()

    def run_host(self, inputs, backend):
        if inputs[0] is None:
            raise VerifyError("OptionalGetElement of an empty optional: it holds no value (test it with "
                              "OptionalHasElement first)")
        return [inputs[0]]


@dsl.op("OptionalGetElement", since=15, until=17)
class OptionalGetElement15(_GetElement):
    def verify(self, x):
        if not isinstance(x, OptionalSpec):
            raise VerifyError(f"OptionalGetElement (opset 15) input must be an optional, got {kind_name(x)} ({x}); "
                              f"opset 18 also takes tensors and sequences")


@dsl.op("OptionalGetElement", since=18)
class OptionalGetElement(_GetElement):
    def verify(self, x):
        if x is None:
            raise VerifyError("OptionalGetElement needs its input")
        if not (is_host(x) or isinstance(x, TensorSpec)):
            raise VerifyError(f"OptionalGetElement input must be an optional, tensor or sequence, got {x!r}")
