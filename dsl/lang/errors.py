"""Source locations and every error opdsl raises on purpose: one hierarchy, rooted at ``Error``.

Each class also subclasses the built-in exception a user would try first where it behaves like
one (``VerifyError`` is a ``ValueError``, ``LaunchError`` a ``RuntimeError``), so ``except
ValueError`` keeps working while ``except dsl.Error`` catches everything opdsl raises.  The
table in docs/language.md (Errors) lists them.  They live here, at the bottom of the layers, so
every layer raises the same classes; the modules that raised them first re-export them.

Every frontend, type, uniformity and backend-build error is a ``CompileError`` that points at the
user's kernel source (file:line:col, the line, a caret) and is raised ``from None`` so no compiler
frames reach the user.
"""
from __future__ import annotations

import linecache
import sys
from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class SourceLoc:
    """A position in the user's source; ``line`` is absolute in ``file``, col 1-based."""

    file: str
    line: int
    col: int = 1
    text: Optional[str] = None  # the source line, kept for Jupyter cells and exec'd code

    def source_line(self) -> str:
        if self.text is not None:
            return self.text
        return linecache.getline(self.file, self.line).rstrip("\n")

    def __str__(self) -> str:
        return f"{_cell_name(self.file)}:{self.line}:{self.col}"


def _cell_name(file: str) -> str:
    """A Jupyter cell's code lives in a temporary file (/tmp/ipykernel_.../123.py); the reader
    knows the cell as ``In[7]``, which is what IPython's own tracebacks call it too."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    number = getattr(getattr(shell, "compile", None), "_filename_map", {}).get(file)
    return file if number is None else f"In[{number}]"


UNKNOWN = SourceLoc("<unknown>", 0, 0, "")


class Error(Exception):
    """The root of every error opdsl raises on purpose (``except dsl.Error``)."""


class CompileError(Error):
    """A kernel that cannot be compiled, with where and why.

    ``str(err)`` reads::

        kernel.py:12:9: error: writing to 'x', which is In[f32]: only Out/InOut tensors are writable
            x[i] = 0.0
            ^
    """

    def __init__(self, message: str, loc: Optional[SourceLoc] = None, note: Optional[str] = None):
        self.message = message
        self.loc = loc
        self.note = note
        super().__init__(self.render())

    def render(self) -> str:
        if self.loc is None or self.loc is UNKNOWN:
            text = f"error: {self.message}"
        else:
            text = f"{self.loc}: error: {self.message}"
            line = self.loc.source_line()
            if line:
                stripped = line.lstrip()
                indent = len(line) - len(stripped)
                caret = " " * max(self.loc.col - 1 - indent, 0) + "^"
                text += f"\n    {stripped}\n    {caret}"
        if self.note:
            text += f"\nnote: {self.note}"
        return text

    def _render_traceback_(self):
        """IPython/Jupyter show these lines instead of a traceback: the message already points at
        the kernel's source line, and the compiler's own frames would only bury it."""
        return [f"{type(self).__name__}: {line}" if k == 0 else line
                for k, line in enumerate(str(self).splitlines())]

    def __reduce__(self):  # picklable across processes, subclass kept
        return (type(self), (self.message, self.loc, self.note))


class UnsupportedSyntax(CompileError):
    """A Python construct the kernel language does not have (a ``with``, a slice, a generator...)."""


class TypeMismatch(CompileError):
    """Values whose types do not fit where they are used (a float index, a bool negated...)."""


class NotDifferentiable(CompileError):
    """``dsl.grad`` of a kernel that cannot be differentiated: the message says what, where and why
    (a ``sync()``, scratch, atomics...)."""


class LaunchError(Error, RuntimeError):
    """A kernel failed while running (interpreter thread errors, deadlocks at sync())."""


class KernelIndexError(LaunchError, IndexError):
    """An out-of-range index in a debug-mode launch: both a ``dsl.LaunchError`` and an ``IndexError``.

    Attributes: ``tensor``, ``index`` (tuple), ``shape``, ``loc`` (the SourceLoc of the access),
    ``thread_id``, ``tile_id``."""


class KernelValueError(LaunchError, ValueError):
    """A run-time argument a kernel builtin refuses (a ``range`` step of 0, a ``dsl.split`` align
    below 1), on every backend: both a ``dsl.LaunchError`` and a ``ValueError``.

    Attributes: ``what`` ('range_step' | 'split_align'), ``value``, ``loc`` (the SourceLoc of the
    loop or call), ``thread_id``, ``tile_id``."""


class VerifyError(Error, ValueError):
    """An op rejects its inputs or params (raised by ``Op.verify``)."""


class TensorSizeError(Error, ValueError):
    """A tensor the graph would make opdsl allocate is larger than the configured cap."""


class UnknownOpError(Error, LookupError):
    """No registered op for a (domain, op_type, opset); the message lists the closest ones."""

    def __init__(self, message: str, domain: str = "", op_type: str = "", opset: Optional[int] = None):
        super().__init__(message)
        self.domain, self.op_type, self.opset = domain, op_type, opset

    def __str__(self) -> str:
        return self.args[0]


class OnnxImportError(Error, ValueError):
    """The ONNX model cannot be turned into a graph; the message says which part and why.
    ``missing``: the ``coverage.MissingOp`` list when the cause is ops no registered op answers."""

    missing: List = []


class PackageError(Error, ValueError):
    """An op package cannot be loaded; ``manifest``, ``line`` and ``key`` say where.

    The message always starts ``<manifest path>:<line>: `` (line 0: the file as a whole) so an
    editor or a terminal can jump to the place, then names the key and what is accepted."""

    def __init__(self, manifest: str, line: int, key: Optional[str], problem: str):
        self.manifest, self.line, self.key, self.problem = str(manifest), int(line), key, problem
        where = f"{self.manifest}:{self.line}: "
        super().__init__(where + (f"{key}: {problem}" if key else problem))


class NoDevice(Error, RuntimeError):
    """No OpenCL device can be used here; the message says why, device by device."""


class DriverError(NoDevice):
    """The OpenCL driver failed on a program it should build or run: not the user's fault."""


class BuildError(Error, RuntimeError):
    """The OpenCL compiler rejected a program; ``log`` holds its output."""

    def __init__(self, log: str):
        self.log = log
        super().__init__(log)
