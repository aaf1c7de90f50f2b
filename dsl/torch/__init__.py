"""opdsl ops in PyTorch (docs/torch.md).

* ``dsl.torch.register(OpClass)`` -> the op's ``torch.library`` custom operator (namespace
  ``opdsl``): eager kernel, fake implementation from ``infer`` for ``torch.compile``, autograd,
  ONNX translation.  An op called on torch tensors uses it without this call.
* ``dsl.torch.export(module, args, f, **kwargs)`` wraps ``torch.onnx.export``: opdsl ops in
  their own domains, composed ops with their FunctionProto.

Importing this package imports torch; ``import dsl`` does not.
"""
from dsl.torch.custom_op import register  # noqa: F401
from dsl.torch.export import export  # noqa: F401

__all__ = ["register", "export"]
