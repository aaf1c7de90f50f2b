"""Autotuning winners on disk, so that a new process does not time the configs again.

One small JSON file per (kernel, backend, target, key values), named by a digest of all of
them, kept in the backend's own folder of the compile cache (``<cache>/numba/autotune-<id>.json``):
the winner belongs to the code that backend generates, so ``opdsl cache clear --backend numba``
forgets it together with that code, and the folder's safety checks (docs/cache.md) apply
unchanged.  A backend without a cache folder (the interpreter) keeps winners in memory only.

A file that cannot be parsed (nested too deep for the parser included) or does not carry its
own digest is ignored with a ``TuningCacheWarning`` and overwritten by the next winner; a FIFO,
a device or a file over ``MAX_BYTES`` in its place is a miss with one ``CacheEntryWarning``
(backends/cache.py ``read_private``), never a hang.  Reading or writing never raises.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from backends import cache

FORMAT = 1
PREFIX = "autotune-"
MAX_BYTES = 1 << 20  # a record is a few hundred bytes; anything this large was not written by opdsl


class TuningCacheWarning(UserWarning):
    """An autotuning record on disk was unreadable; it is ignored and will be rewritten."""


@dataclass(frozen=True)
class Record:
    """Where one winner lives and what it must be the winner of."""

    path: Path
    digest: str                # sha256 of ``identity``: the file name and its first field
    identity: Dict[str, Any]   # kernel, backend, target, configs and key values, for people reading the file
    configs: int               # how many configs there are: a stored index must be below it


def record(folder: str, identity: Dict[str, Any], configs: int) -> Optional[Record]:
    """The record for ``identity`` in cache folder ``folder``, or None when the disk is not used
    (no folder, ``OPDSL_NO_DISK_CACHE``, or a cache root that failed its checks)."""
    if not folder or not cache.enabled():
        return None
    text = json.dumps({"format": FORMAT, **identity}, sort_keys=True, default=repr)
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    try:
        path = cache.path(folder, f"{PREFIX}{digest}.json")
    except (OSError, ValueError):  # the folder failed its checks, or is not one opdsl knows
        return None
    return Record(path, digest, json.loads(text), configs)


def load(rec: Optional[Record]) -> Optional[int]:
    """The stored winner's index, or None when there is none (or it was unreadable: one warning)."""
    if rec is None:
        return None
    # None: missing, a symlink, not this user's, a FIFO or device, or over MAX_BYTES (one warning)
    raw = cache.read_private(rec.path, MAX_BYTES)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"it holds a JSON {type(data).__name__}, not an object")
        best = data["best"]
        if data.get("id") != rec.digest:
            raise ValueError(f"it records id {data.get('id')!r}, expected {rec.digest!r}")
        if not isinstance(best, int) or isinstance(best, bool) or not 0 <= best < rec.configs:
            raise ValueError(f"'best' is {best!r}, not the index of one of {rec.configs} configs")
    # JSONDecodeError is a ValueError; a deeply nested record makes the parser raise RecursionError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as e:
        warnings.warn(f"opdsl autotune: ignoring the unreadable record {rec.path} ({type(e).__name__}: {e}); "
                      "the configs are timed again and the record is rewritten", TuningCacheWarning, stacklevel=2)
        return None
    return best


def store(rec: Optional[Record], best: int, seconds: List[float]) -> None:
    """Save the winner; a failed write is the compile cache's business (it may turn the disk off)."""
    if rec is None:
        return
    data = {"id": rec.digest, **rec.identity, "best": best, "seconds": seconds}
    try:
        cache.atomic_write(rec.path, json.dumps(data, indent=1, sort_keys=True, default=repr) + "\n")
    except OSError as e:
        cache.write_failed(e, str(rec.path))
