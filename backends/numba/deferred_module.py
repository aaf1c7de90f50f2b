"""What a warm launcher knows of its generated module before executing it (backend.py ``_module_ready``).

A model rebuilt from stored launch plans (``dsl.load_model``, a model plan cache hit) creates a
launcher per kernel specialization; executing each one's module creates every numba dispatcher
it defines (light_resnet50: 7 modules, 81 dispatchers) and imports numba's array lowering, though
its first run calls 8 entries.  The launcher reads the entry names, and whether the disk cache
holds an entry's machine code, from the source text and the cache folder instead.
"""
from __future__ import annotations

import sys
from typing import Optional, Tuple

from backends import cache

CACHE_TAG = "numba"
_ENTRIES = ("launch_parallel", "launch_serial_nd", "launch_parallel_nd")


def entry_names(source: str) -> Tuple[str, ...]:
    """The entry points besides ``launch_serial`` the module defines (``launch_team`` when a team syncs)."""
    return _ENTRIES + (("launch_team",) if "\ndef launch_team(" in source else ())


def first_line(source: str, name: str) -> Optional[int]:
    """The line numba's cache names a top-level function by: its code object's first line (its
    first decorator's), or None when ``source`` does not define ``name``."""
    at = source.find(f"\ndef {name}(")
    if at < 0:
        return None
    line = source.count("\n", 0, at) + 2  # the def's line
    while True:  # decorators directly above it
        start = source.rfind("\n", 0, at)
        if not source.startswith("@", start + 1):
            return line
        line, at = line - 1, start


_FOUND: set = set()  # (stem, entry) whose index was seen: asked per launch (~70 a model), read once


def on_disk(stem: str, source: str, which: str) -> bool:
    """Whether the cache folder holds an index for entry ``which`` of module ``stem`` (the file
    numba's ``PrivateFunctionCache`` reads, backends/numba/cache.py).  A yes is a hint: an index
    without this signature compiles the entry when it first runs, in this process."""
    if (stem, which) in _FOUND:
        return True
    line = first_line(source, which)
    if line is None or not cache.enabled():
        return False
    name = f"{stem}.{which}-{line}.py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}.nbi"
    try:
        found = cache.path(CACHE_TAG, name).is_file()
    except (OSError, ValueError):
        return False
    if found:
        _FOUND.add((stem, which))
    return found
