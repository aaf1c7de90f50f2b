"""The interface every backend implements, and the lookup by name.

A backend turns one checked specialization (``CompileRequest``) into a
``Launcher``; ``dsl.kernel`` owns argument checking, specialization keys and
the in-memory cache, so a backend never sees a wrong argument.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Dict, Sequence

from dsl import ir


@dataclass(frozen=True)
class CompileRequest:
    kernel: ir.Kernel        # typed, checked IR of this specialization
    pyfunc: Callable         # the user's Python function (the interpreter runs it)
    key: str                 # hex digest naming this specialization for on-disk caches
    log_level: str = "warn"  # dsl.log calls below this level were removed by the frontend
    fastmath: bool = False   # @dsl.kernel(fastmath=True): reassociation and approximate math allowed
    debug: bool = False      # @dsl.kernel(debug=True) / OPDSL_DEBUG=1: bounds-check every access
    interrupt: bool = True   # poll the Ctrl-C flag at loop back-edges (backends/interrupt.py)


class Launcher(ABC):
    """A compiled specialization, ready to run."""

    @abstractmethod
    def __call__(self, args: Sequence, grid: int) -> None:
        """Run ``grid`` teams.  ``args`` follow ``kernel.params``: C-contiguous numpy
        arrays of the param dtype for tensors, 1-D arrays for Vec params, numpy
        scalars of the param dtype for scalars.  Outputs are written in place."""


class Backend(ABC):
    name: str = ""

    @abstractmethod
    def compile(self, request: CompileRequest) -> Launcher:
        """Build (or load from the disk cache) the code for one specialization."""

    @abstractmethod
    def source(self, request: CompileRequest) -> str:
        """The generated code, as a user would read it."""

    def available(self) -> str:
        """'' when usable here, else the reason (e.g. no OpenCL device)."""
        return ""


_MODULES: Dict[str, str] = {
    "interpreter": "backends.interpreter",
    "numba": "backends.numba",
    "opencl": "backends.opencl",
}
_LOADED: Dict[str, Backend] = {}


def get(name: str) -> Backend:
    """The backend called ``name``; each module exposes ``BACKEND``."""
    if name not in _LOADED:
        if name not in _MODULES:
            raise ValueError(f"unknown backend {name!r}; known: {', '.join(sorted(_MODULES))}")
        _LOADED[name] = importlib.import_module(_MODULES[name]).BACKEND
    return _LOADED[name]


def names() -> list:
    return list(_MODULES)
