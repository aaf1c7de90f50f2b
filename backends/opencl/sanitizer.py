"""Oclgrind's checks as errors: invalid memory accesses, work-group divergence, data races.

Oclgrind (the OpenCL simulator opdsl falls back to, or forced with
``OPDSL_OPENCL_DEVICE=oclgrind``) checks every memory access and barrier of a
kernel and prints what it finds; left alone, a bad access is a line on stderr
and the launch "succeeds".  opdsl points Oclgrind's log (``OCLGRIND_LOG``) at a
private file while it creates its context, reads what each launch added, and
raises ``SanitizerError`` naming the kernel, the report and -- for generated
kernels -- the user's Python line.  Oclgrind's own switches turn on the slower
checks: ``OCLGRIND_DATA_RACES=1``, ``OCLGRIND_UNINITIALIZED=1``.

Oclgrind reads ``OCLGRIND_LOG`` when a context is created, so the variable is
set only around that call: child processes do not inherit opdsl's log file.  A
log the user names with ``OCLGRIND_LOG`` is read the same way (from its end).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional

from dsl.lang.errors import LaunchError, SourceLoc

_AT_LINE = re.compile(r"At line (\d+) \(column (\d+)\)")
_KERNEL = re.compile(r"^\s*Kernel:\s*(\S+)", re.M)


@dataclass(frozen=True)
class Report:
    """One finding of Oclgrind: its headline, the kernel, the program line and the full text."""

    headline: str           # "Invalid write of size 4 at global memory address 0x...", "Work-group divergence ..."
    kernel: str
    line: Optional[int]     # 1-based line of the OpenCL program, when Oclgrind knows it
    col: Optional[int]
    text: str


def parse(text: str) -> List[Report]:
    """The reports in a chunk of Oclgrind's log: each starts at an unindented line, details are indented."""
    blocks: List[List[str]] = []
    for raw in text.splitlines():
        if raw.strip() and not raw[:1].isspace():
            blocks.append([raw])
        elif blocks:
            blocks[-1].append(raw)
    out = []
    for lines in blocks:
        body = "\n".join(lines).rstrip()
        at = _AT_LINE.search(body)
        kernel = _KERNEL.search(body)
        out.append(Report(lines[0].strip(), kernel.group(1) if kernel else "?",
                          int(at.group(1)) if at else None, int(at.group(2)) if at else None, body))
    return out


class SanitizerError(LaunchError):
    """Oclgrind reported invalid memory accesses, divergence or races in a launch; ``reports`` has each one."""

    def __init__(self, reports: List[Report], where: Optional[Callable[[int], Optional[SourceLoc]]] = None):
        self.reports = reports
        lines = [f"Oclgrind reported {len(reports)} problem(s) in kernel {reports[0].kernel}:"]
        for r in reports[:8]:
            lines.append(f"  - {r.headline}")
            loc = where(r.line) if (where is not None and r.line) else None
            if loc is not None:
                lines.append(f"    at {loc}: {loc.source_line().strip()}")
            if r.line:
                lines.append(f"    OpenCL line {r.line}, column {r.col}")
        if len(reports) > 8:
            lines.append(f"  ... and {len(reports) - 8} more")
        lines.append("full reports:\n" + "\n\n".join(r.text for r in reports[:4]))
        super().__init__("\n".join(lines))

    def located(self, where: Callable[[int], Optional[SourceLoc]]) -> "SanitizerError":
        """The same reports with OpenCL lines mapped to the user's Python lines."""
        return SanitizerError(self.reports, where)


class OclgrindLog:
    """The log file of this process's Oclgrind context, read launch by launch."""

    def __init__(self):
        given = os.environ.get("OCLGRIND_LOG")
        if given:
            self.path, self.owned = given, False
        else:
            fd, self.path = tempfile.mkstemp(prefix="opdsl-oclgrind-", suffix=".log")
            os.close(fd)
            self.owned = True
            atexit.register(self.close)
        self.offset = _size(self.path)

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        """Around context creation: Oclgrind picks up ``OCLGRIND_LOG`` then; nobody else sees it."""
        before = os.environ.get("OCLGRIND_LOG")
        os.environ["OCLGRIND_LOG"] = self.path
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("OCLGRIND_LOG", None)
            else:
                os.environ["OCLGRIND_LOG"] = before

    def new_reports(self) -> List[Report]:
        """What Oclgrind logged since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        self.offset += len(chunk)
        return parse(chunk.decode("utf-8", "replace")) if chunk.strip() else []

    def check(self) -> None:
        reports = self.new_reports()
        if reports:
            raise SanitizerError(reports)

    def close(self) -> None:
        if self.owned:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
