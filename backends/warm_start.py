"""Front-end records: a warm process goes from a launch's specialization straight to the
compiled entry, without parsing, checking, specializing or generating code again.

A record is keyed by the kernel's front-end key (dsl/runtime/warm_key.py: source text and
captures, hashed without parsing) and everything else the code cache key holds; it holds
what the backend needs to rebuild the launcher (``Backend.warm_record``), for the numba backend
the generated module and the compile-cache key naming its machine code.  Records are JSON (no
pickles: reading one runs nothing), framed by ``backends.cache.store`` with the digest of their
name and data.  A record of another key, or one whose contents do not hold together, is a miss
with one ``CacheEntryWarning`` and is removed; a truncated one is a silent miss (docs/cache.md).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable, Optional

from backends import cache

if TYPE_CHECKING:  # backends.base imports dsl, whose kernel runtime imports this module
    from backends.base import Backend, CompileRequest, Launcher

FOLDER_SUFFIX = "-frontend"  # <cache>/<backend cache_tag>-frontend/<key>.json
FORMAT = 1

# counters for tests and benchmarks: records used and written in this process
hits = 0
writes = 0


def _entry_key(backend: Backend, key: str) -> str:
    """``key`` with the backend's code-generator version: the front-end key hashes the front end's
    own sources, not the backend's, and a record holds code that backend generated."""
    version = backend.generator_version
    return f"{key}-{version}" if version else key


def _folder(backend: Backend) -> str:
    tag = backend.cache_tag
    folder = tag + FOLDER_SUFFIX if tag else ""
    return folder if folder in cache.KNOWN_FOLDERS else ""


def lookup(backend: Backend, key: str, pyfunc: Callable, log_gate) -> Optional[Launcher]:
    """The launcher a record under ``key`` rebuilds, or None (no record, no disk cache, or a bad one)."""
    global hits
    folder = _folder(backend)
    if not folder or not cache.enabled():
        return None
    key = _entry_key(backend, key)
    name = key + ".json"
    data = cache.load(folder, name)
    if data is None:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
        if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("key") != key:
            raise ValueError("it is not a record of this key and format")
        launcher = backend.warm_launcher(record, pyfunc, log_gate)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        _bad(folder, name, str(e) or type(e).__name__)
        return None
    if launcher is not None:
        hits += 1
    return launcher


def _bad(folder: str, name: str, why: str) -> None:
    try:
        p = cache.path(folder, name)
    except (cache.CacheUnusable, ValueError):
        return
    cache.entry_warning(p, f"front-end record: {why}")
    cache.discard(p)


def remember(backend: Backend, key: str, request: CompileRequest, launcher: Launcher) -> None:
    """Write the record of a launcher just compiled, if its backend has one for it."""
    global writes
    folder = _folder(backend)
    if not folder or not cache.enabled():
        return
    record = backend.warm_record(request, launcher)
    if record is None:
        return
    key = _entry_key(backend, key)
    record = {"format": FORMAT, "key": key, **record}
    if cache.store(folder, key + ".json", json.dumps(record, sort_keys=True).encode("utf-8")) is not None:
        writes += 1
