"""The kernel as the body of a ``@dsl.func`` specialization sees it, for the code generators.

Generators address tensors through ``kernel.buffer(name)``; inside a function the names are the
function's tensor parameters (a ``TensorParam`` for a kernel tensor, a ``Scratch`` for team
scratch), so the same tensor code serves kernels and functions."""
from __future__ import annotations

from dsl.lang import ir


class FuncView:
    """``kernel`` with ``buffer()`` answering for function ``f``'s tensor parameters."""

    def __init__(self, kernel: ir.Kernel, f: ir.Function):
        self._kernel, self._f = kernel, f
        # debug-mode sites name the function whose parameter failed a check, as the user wrote it
        self.func_name = f.origin.qualname if f.origin is not None else f.name

    def buffer(self, name: str):
        return self._f.buffer(name)

    def __getattr__(self, name):
        return getattr(self._kernel, name)
