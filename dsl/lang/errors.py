"""Source locations and the user-facing compile error.

Every frontend, type, uniformity and backend-build error is a ``CompileError``
that points at the user's kernel source (file:line:col, the line, a caret) and
is raised ``from None`` so no compiler frames reach the user.
"""
from __future__ import annotations

import linecache
import sys
from dataclasses import dataclass
from typing import Optional


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


class CompileError(Exception):
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

    def __reduce__(self):  # picklable across processes
        return (CompileError, (self.message, self.loc, self.note))


class LaunchError(RuntimeError):
    """A kernel failed while running (interpreter thread errors, deadlocks at sync())."""


class NotDifferentiable(CompileError):
    """``dsl.grad`` of a kernel that cannot be differentiated: the message says what, where and why."""

    def __reduce__(self):
        return (NotDifferentiable, (self.message, self.loc, self.note))
