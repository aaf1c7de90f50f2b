"""``PackageError``: every problem with an op package, located in its manifest.

The message always starts ``<manifest path>:<line>: `` (line 0: the file as a whole) so an
editor or a terminal can jump to the place, then names the key and what is accepted.
"""
from __future__ import annotations

from typing import Optional


class PackageError(ValueError):
    """An op package cannot be loaded; ``manifest``, ``line`` and ``key`` say where."""

    def __init__(self, manifest: str, line: int, key: Optional[str], problem: str):
        self.manifest, self.line, self.key, self.problem = str(manifest), int(line), key, problem
        where = f"{self.manifest}:{self.line}: "
        super().__init__(where + (f"{key}: {problem}" if key else problem))
