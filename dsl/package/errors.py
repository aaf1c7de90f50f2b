"""``PackageError``: every problem with an op package, located in its manifest.

The message always starts ``<manifest path>:<line>: `` (line 0: the file as a whole) so an
editor or a terminal can jump to the place, then names the key and what is accepted.
"""
from __future__ import annotations

from dsl.lang.errors import PackageError  # noqa: F401  (defined with every error: dsl/lang/errors.py)
