"""Optional heavy libraries (torch, dask) imported when a test first uses them, not at collection.

Under ``pytest -n 2`` every worker collects every test module, so a module-level
``torch = pytest.importorskip("torch")`` cost each worker its import (torch ~3.5 s CPU, dask with
distributed ~1.5 s) although only the worker that runs those tests needs it.
``torch = optional("torch")`` binds a stand-in instead: the first public attribute read
(``torch.ones``) imports the library, or skips the running test with pytest's usual reason when
it is not installed.  Private and dunder names are not forwarded, so pytest's collection, which
inspects every module global, never triggers the import.
"""
from __future__ import annotations

import types

import pytest


class _Optional(types.ModuleType):
    """Stands for module ``name`` until a test reads one of its public attributes."""

    def __init__(self, name: str):
        super().__init__(name, f"{name}, imported on first use (tests/lazy_modules.py)")
        self._real = None

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        if self._real is None:
            self._real = pytest.importorskip(self.__name__)
        return getattr(self._real, attr)


def optional(name: str) -> types.ModuleType:
    """A stand-in for the optional module ``name`` (dotted names work: ``optional("dask.array")``)."""
    return _Optional(name)
