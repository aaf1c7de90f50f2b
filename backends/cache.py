"""The on-disk compile cache shared by the compiled backends.

Layout: ``cache_root()/<backend>/<name>``.  Every write goes to a temporary
file in the same folder and is renamed into place, so a reader never sees a
half-written entry; ``lock(backend, key)`` serializes compiling one key across
threads and processes, so two processes asking for the same kernel at once
compile it once.  Blobs written with ``store`` carry a checksum: a truncated or
corrupt entry reads as missing (and is removed), which makes the caller rebuild.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Dict, Iterator, Optional, Union

from dsl import config

try:  # POSIX advisory locks; Windows falls back to msvcrt byte-range locks
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - not on Linux
    _fcntl = None
    import msvcrt as _msvcrt

_MAGIC = b"OPDSL-CACHE-1\n"
_DIGEST = 32  # sha256 bytes after the magic line
_thread_locks: Dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def cache_root() -> Path:
    """The cache folder (``OPDSL_CACHE_DIR``, default ``~/.cache/opdsl``)."""
    return config.cache_dir()


def enabled() -> bool:
    """False when ``OPDSL_NO_DISK_CACHE=1``: backends keep code in memory only."""
    return config.disk_cache_enabled()


def backend_dir(backend: str, create: bool = True) -> Path:
    """``cache_root()/backend``, created on demand."""
    if not backend or os.sep in backend or backend.startswith("."):
        raise ValueError(f"cache backend folder must be a plain name, got {backend!r}")
    d = cache_root() / backend
    if create:
        d.mkdir(parents=True, exist_ok=True)
    return d


def path(backend: str, name: str) -> Path:
    """Where entry ``name`` of ``backend`` lives (it may not exist)."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"cache entry name must be a plain file name, got {name!r}")
    return backend_dir(backend) / name


def atomic_write(target: Union[str, Path], data: Union[bytes, str]) -> Path:
    """Write ``data`` to ``target`` via a temp file + ``os.replace`` (readers see old or new, never half)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix="." + target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def store(backend: str, name: str, data: bytes) -> Path:
    """Save a blob with a checksum header (read it back with ``load``)."""
    digest = hashlib.sha256(data).digest()
    return atomic_write(path(backend, name), _MAGIC + digest + data)


def load(backend: str, name: str) -> Optional[bytes]:
    """The blob saved by ``store``, or None when missing or corrupt (a corrupt file is removed)."""
    p = path(backend, name)
    try:
        raw = p.read_bytes()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    head = len(_MAGIC) + _DIGEST
    if (len(raw) < head or not raw.startswith(_MAGIC)
            or hashlib.sha256(raw[head:]).digest() != raw[len(_MAGIC):head]):
        discard(p)
        return None
    return raw[head:]


def discard(p: Union[str, Path]) -> None:
    """Remove a cache file or folder if present (a corrupt or stale entry)."""
    p = Path(p)
    with contextlib.suppress(FileNotFoundError):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink()


@contextlib.contextmanager
def lock(backend: str, key: str) -> Iterator[None]:
    """Exclusive lock on ``key`` for this backend, across threads and processes.

    Hold it while checking for, building and writing an entry, so a second
    compiler of the same key waits and then finds the finished entry.
    """
    lock_path = path(backend, key + ".lock")
    ident = str(lock_path)
    with _thread_locks_guard:
        tlock = _thread_locks.setdefault(ident, threading.Lock())
    with tlock:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if _fcntl is not None:
                _fcntl.flock(fd, _fcntl.LOCK_EX)
            else:  # pragma: no cover
                _msvcrt.locking(fd, _msvcrt.LK_LOCK, 1)
            yield
        finally:
            if _fcntl is not None:
                _fcntl.flock(fd, _fcntl.LOCK_UN)
            os.close(fd)


def _folder_size(d: Path) -> tuple:
    files = total = 0
    for root, _dirs, names in os.walk(d):
        for n in names:
            if n.endswith(".lock"):
                continue
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, n))
                files += 1
    return files, total


def info() -> Dict[str, Dict[str, int]]:
    """Size report: ``{backend: {"files": n, "bytes": b}}`` for every backend folder present."""
    root = cache_root()
    report: Dict[str, Dict[str, int]] = {}
    if not root.is_dir():
        return report
    for d in sorted(root.iterdir()):
        if d.is_dir():
            files, total = _folder_size(d)
            report[d.name] = {"files": files, "bytes": total}
    return report


def format_info(report: Optional[Dict[str, Dict[str, int]]] = None) -> str:
    """``info()`` as the lines ``opdsl cache info`` prints."""
    report = info() if report is None else report
    lines = [f"opdsl cache: {cache_root()}"]
    if not report:
        lines.append("  (empty)")
    for name, r in report.items():
        lines.append(f"  {name:<12} {r['files']:>6} files {_human(r['bytes']):>10}")
    return "\n".join(lines)


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def clear(backend: Optional[str] = None) -> Dict[str, int]:
    """Delete cached entries of one backend (or all); returns ``{"files": n, "bytes": b}`` removed.

    Lock files are kept (another process may hold one); everything else goes.
    """
    root = cache_root()
    folders = [backend_dir(backend, create=False)] if backend else (
        [d for d in root.iterdir() if d.is_dir()] if root.is_dir() else [])
    files = total = 0
    for d in folders:
        if not d.is_dir():
            continue
        f, b = _folder_size(d)
        files += f
        total += b
        for entry in d.iterdir():
            if entry.name.endswith(".lock"):
                continue
            discard(entry)
    return {"files": files, "bytes": total}
