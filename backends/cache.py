"""The on-disk compile cache shared by the compiled backends: private, crash-safe, never fatal.

Layout: ``cache_root()/<folder>/<name>`` with the folder names in ``FOLDERS`` and a
``.opdsl-cache`` marker file in the root.  The cache holds code this process will
run (numba's pickles, OpenCL binaries), so it is used only when the root is a
directory owned by this user that nobody else can write to (see docs/cache.md).
That is decided once per process by ``enabled()``; anything else (a foreign or
world-writable folder, a read-only or full disk, a path too long) gives one
``CacheWarning`` and the process compiles in memory.  ``store``/``load``/``lock``
never raise on a bad disk, so every backend gets that fallback by calling them.

Writes go to a 0600 temporary file in the same folder that is renamed into
place (readers see old or new, never half, and a failed write leaves nothing);
folders are created 0700; files are opened without following symlinks and
read only if this user owns them and they are regular files (a FIFO or device in
their place is a miss with one ``CacheEntryWarning``, never a hang: dsl/files.py).
Blobs written with ``store`` carry a checksum and the digest of their own name (key): a
truncated or corrupt entry reads as missing, another key's entry (a swapped file) as
missing with one warning; both are removed.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import stat
import threading
import warnings
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

from dsl import config, files

try:  # POSIX advisory locks; Windows falls back to msvcrt byte-range locks
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - not on Linux
    _fcntl = None
    import msvcrt as _msvcrt

# Every folder opdsl keeps in the cache root: a backend's ``cache_tag`` (backends/base.py) and any
# further folders of that backend.  ``clear`` deletes these and nothing else, so this stays a
# table that needs no backend imported; a new folder name must be added here first
# (``backend_dir`` refuses names not listed).
FOLDERS: Dict[str, Tuple[str, ...]] = {
    "numba": ("numba", "numba-frontend"),
    "opencl": ("opencl", "opencl-probe"),
    "models": ("plans",),  # compiled models' plans (dsl/opgraph/plan_cache.py)
}
KNOWN_FOLDERS: Tuple[str, ...] = tuple(f for fs in FOLDERS.values() for f in fs)

MARKER = ".opdsl-cache"
_MARKER_TEXT = ("This folder is an opdsl compile cache. `opdsl cache clear` deletes the folders "
                + ", ".join(KNOWN_FOLDERS) + " in it and nothing else.\n")

_MAGIC = b"OPDSL-CACHE-2\n"
_DIGEST = 32  # sha256 bytes: after the magic line, the digest of the entry's name, then of its data
MAX_ENTRY_BYTES = 1 << 30  # a cache file larger than this is not one opdsl wrote
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                errno.ENAMETOOLONG, errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EFBIG)

_thread_locks: Dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


class CacheWarning(UserWarning):
    """The disk cache cannot be used safely; this process compiles in memory."""


class CacheEntryWarning(UserWarning):
    """One cache entry was not what its name says (another key's entry, a FIFO, too large): a miss."""


class CacheUnusable(OSError):
    """Raised by ``backend_dir``/``path`` when the cache root or a folder failed the checks."""


class NotACache(Exception):
    """``clear`` was pointed at a folder opdsl did not create; nothing was deleted."""


# --------------------------------------------------------------------------- the one decision

class _State:
    """What this process decided about its cache root (keyed by the configured path)."""

    def __init__(self):
        self.lock = threading.RLock()
        # (root, reason): reason "" means usable; one tuple, so a reader without the lock never
        # pairs one root with another root's reason
        self.decision: Optional[Tuple[Path, str]] = None


_state = _State()


def reset() -> None:
    """Forget this process's decision and the resolved path (tests that change OPDSL_CACHE_DIR)."""
    with _state.lock:
        _state.decision = None
    config.reset_cache_dir()


def cache_root() -> Path:
    """The cache folder, absolute (``OPDSL_CACHE_DIR`` resolved at first use, default ``~/.cache/opdsl``)."""
    return config.cache_dir()


def enabled() -> bool:
    """Whether compiled code may be kept on disk: not ``OPDSL_NO_DISK_CACHE`` and the root passed
    the checks (made once per process; a failure warns once and means memory only)."""
    return config.disk_cache_enabled() and not _unusable_reason()


def unusable_reason() -> str:
    """Why the disk cache is not used ("" when it is)."""
    if not config.disk_cache_enabled():
        return "OPDSL_NO_DISK_CACHE is set"
    return _unusable_reason()


def _unusable_reason() -> str:
    root = cache_root()
    decision = _state.decision
    if decision is not None and decision[0] == root:  # the per-call fast path
        return decision[1]
    with _state.lock:
        decision = _state.decision
        if decision is None or decision[0] != root:
            decision = _state.decision = (root, _decide(root))
            if decision[1]:
                _warn(root, decision[1])
        return decision[1]


def disable(reason: str) -> None:
    """Stop using the disk for the rest of the process (a write failed), with one warning."""
    root = cache_root()
    with _state.lock:
        if _state.decision is not None and _state.decision[0] == root and _state.decision[1]:
            return  # already off: warned once
        _state.decision = (root, reason)
    _warn(root, reason, "from now on ")


def _warn(root: Path, reason: str, when: str = "") -> None:
    warnings.warn(f"opdsl: the compile cache {root} is not used {when}({reason}); compiled code stays in memory "
                  f"for this process (set OPDSL_CACHE_DIR to a folder only you can write, see docs/cache.md)",
                  CacheWarning, stacklevel=4)


def _uid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else -1


def _private_problem(st: os.stat_result, what: str) -> str:
    """Why a folder with this stat may not hold code we run ("" if it may)."""
    uid = _uid()
    if uid >= 0 and st.st_uid != uid:
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("its group", 0o020), ("other users", 0o002)) if st.st_mode & bit)
        return f"{what} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _ancestors_problem(root: Path) -> str:
    """A world-writable parent without the sticky bit lets anyone swap the whole cache folder."""
    for parent in Path(os.path.realpath(root)).parents:
        try:
            st = os.stat(parent)
        except OSError:
            continue
        if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
            return f"its parent {parent} is writable by everyone and not sticky (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _make_dirs(root: Path) -> bool:
    """Create the missing components of ``root`` as 0700 folders; True if ``root`` itself was made."""
    missing: List[Path] = []
    p = root
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        _mkdir_private(d)
    return bool(missing)


def _mkdir_private(d: Path) -> None:
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        return  # another process made it first: the checks that follow judge it
    os.chmod(d, 0o700)  # mkdir's mode is masked by the umask: make it exactly 0700


def _decide(root: Path) -> str:
    """"" if ``root`` may hold code we run, else the reason (creating it, and its marker, if missing)."""
    try:
        created = _make_dirs(root)
        st = os.stat(root)  # a symlinked root is fine if what it points to passes
        if not stat.S_ISDIR(st.st_mode):
            return "it is not a directory"
        problem = _private_problem(st, "it") or _ancestors_problem(root)
        if problem:
            return problem
        try:
            _probe_writable(root)
        except OSError as e:
            return f"it cannot be written ({e.strerror or e})"
        if created or _adoptable(root):
            _write_marker(root)
    except OSError as e:
        return _describe(e)
    return ""


def _probe_writable(root: Path) -> None:
    """Create and remove a file: the only test that catches a read-only mount even for root."""
    probe = root / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    os.close(fd)
    os.unlink(probe)


def _adoptable(root: Path) -> bool:
    """An unmarked root gets the marker only if it is empty, or it is the default location and
    holds nothing but opdsl's folders (a cache made before the marker existed)."""
    if os.path.lexists(root / MARKER):
        return False
    entries = set(os.listdir(root))
    return not entries or (root == config.default_cache_dir() and entries <= set(KNOWN_FOLDERS))


def _write_marker(root: Path) -> None:
    atomic_write(root / MARKER, _MARKER_TEXT)


def _describe(e: OSError) -> str:
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}"


def backend_dir(backend: str, create: bool = True) -> Path:
    """``cache_root()/backend``: a private folder (created 0700), never a symlink.

    Raises ValueError for a name not in ``KNOWN_FOLDERS`` and CacheUnusable when the cache
    is off or the folder fails the checks (which also turns the cache off, with a warning).
    """
    if backend not in KNOWN_FOLDERS:
        raise ValueError(f"cache folder must be one of {', '.join(KNOWN_FOLDERS)} "
                         f"(backends/cache.py FOLDERS), got {backend!r}")
    reason = unusable_reason()
    if reason:
        raise CacheUnusable(f"the disk cache is not used: {reason}")
    d = cache_root() / backend
    try:
        if create and not os.path.lexists(d):
            _mkdir_private(d)
        st = os.lstat(d)
    except FileNotFoundError:
        if not create:
            return d
        raise
    except OSError as e:
        disable(f"cannot create its folder {d}: {_describe(e)}")
        raise CacheUnusable(str(e)) from e
    problem = ("it is a symlink" if stat.S_ISLNK(st.st_mode) else
               "it is not a directory" if not stat.S_ISDIR(st.st_mode) else _private_problem(st, "it"))
    if problem:
        disable(f"its folder {d} may not be used: {problem}")
        raise CacheUnusable(f"{d}: {problem}")
    return d


def path(backend: str, name: str) -> Path:
    """Where entry ``name`` of ``backend`` lives (it may not exist)."""
    if not name or "/" in name or "\\" in name or name.startswith(".") or name in (".", ".."):
        raise ValueError(f"cache entry name must be a plain file name, got {name!r}")
    return backend_dir(backend) / name


# --------------------------------------------------------------------------- files

_recorders: List[set] = []  # open ``recording()`` blocks: each collects the files read or written


@contextlib.contextmanager
def recording() -> Iterator[set]:
    """The cache files (absolute paths) read or written inside the block, by any thread: an
    ahead-of-time artifact (dsl/opgraph/artifact_save.py) carries exactly the entries its model used."""
    seen: set = set()
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


def _note(p) -> None:
    for seen in list(_recorders):
        seen.add(os.path.abspath(p))


def atomic_write(target: Union[str, Path], data: Union[bytes, str]) -> Path:
    """Write ``data`` to ``target`` (mode 0600) via a temporary file and ``os.replace``.

    Readers see the old or the new content, never half; on any failure (a full disk) the
    temporary file is removed and the error is raised.  The folder must exist.
    """
    target = Path(target)
    if _recorders:
        _note(target)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY, 0o600)
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def read_private(p: Union[str, Path], limit: int = MAX_ENTRY_BYTES) -> Optional[bytes]:
    """The bytes of a regular file this user owns and only this user can write; None otherwise
    (missing, a symlink, foreign, unreadable).  Opened once without blocking and checked on the
    open file (dsl/files.py): a FIFO, a device or a file over ``limit`` bytes is a miss with one
    ``CacheEntryWarning`` naming it, never a hang."""
    if _recorders:
        _note(p)
    try:
        fd, st = files.open_regular(p, follow_symlinks=False)
    except files.NotARegularFile as e:
        entry_warning(p, f"it is {e.kind}, not a regular file")
        return None
    except OSError:
        return None
    try:
        if _private_problem(st, "it"):
            return None
        return files.read_fd(fd, limit, str(p), st.st_size)
    except files.FileTooLarge:
        entry_warning(p, f"it holds more than {limit} bytes")
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


_warned_entries: set = set()


def entry_warning(p: Union[str, Path], why: str) -> None:
    """One ``CacheEntryWarning`` per entry and reason in this process: the entry is used as a miss."""
    key = (str(p), why)
    with _thread_locks_guard:
        if key in _warned_entries:
            return
        _warned_entries.add(key)
    warnings.warn(f"opdsl: ignoring the cache entry {p} ({why}); it counts as a miss and is rebuilt",
                  CacheEntryWarning, stacklevel=3)


def write_failed(err: OSError, what: str) -> None:
    """A write into the cache failed: turn the cache off for the process if the disk is the problem."""
    if err.errno in _DISK_ERRORS or isinstance(err, CacheUnusable):
        disable(f"writing {what} failed: {_describe(err)}")


def frame(label: str, data: bytes) -> bytes:
    """``data`` with the header ``unframe`` checks: the digest of ``label`` (what the entry is
    the entry of: its key) and the digest of ``data`` (a truncated or damaged file)."""
    return _MAGIC + hashlib.sha256(label.encode("utf-8")).digest() + hashlib.sha256(data).digest() + data


def unframe(label: str, raw: bytes, p: Union[str, Path]) -> Optional[bytes]:
    """The data ``frame(label, ...)`` wrapped, or None: a damaged entry silently, another key's
    entry (a swapped or copied file) with one ``CacheEntryWarning``; either way ``p`` is removed
    so that the rebuilt entry replaces it."""
    head = len(_MAGIC) + 2 * _DIGEST
    if (len(raw) < head or not raw.startswith(_MAGIC)
            or hashlib.sha256(raw[head:]).digest() != raw[head - _DIGEST:head]):
        discard(p)
        return None
    if raw[len(_MAGIC):len(_MAGIC) + _DIGEST] != hashlib.sha256(label.encode("utf-8")).digest():
        entry_warning(p, "it is the entry of another key (a swapped or copied file)")
        discard(p)
        return None
    return raw[head:]


def store(backend: str, name: str, data: bytes) -> Optional[Path]:
    """Save a blob that names its own key and carries a checksum (read it back with ``load``);
    None if the cache is off or the write failed (a full disk: one warning, then memory only).
    Never raises OSError."""
    if not enabled():
        return None
    try:
        p = path(backend, name)
        return atomic_write(p, frame(f"{backend}/{name}", data))
    except CacheUnusable:
        return None
    except OSError as e:
        write_failed(e, f"{backend}/{name}")
        return None


def load(backend: str, name: str) -> Optional[bytes]:
    """The blob saved by ``store`` under this name, or None when the cache is off, or the entry
    is missing, foreign, corrupt (removed) or another name's (removed, one warning).  Never
    raises OSError."""
    if not enabled():
        return None
    try:
        p = path(backend, name)
    except CacheUnusable:
        return None
    raw = read_private(p)
    return None if raw is None else unframe(f"{backend}/{name}", raw, p)


def discard(p: Union[str, Path]) -> None:
    """Remove a cache file (or a folder, never following symlinks) if present."""
    p = Path(p)
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(p).st_mode):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.unlink(p)


@contextlib.contextmanager
def lock(backend: str, key: str) -> Iterator[None]:
    """Exclusive lock on ``key`` for this backend, across threads and processes.

    Hold it while checking for, building and writing an entry, so a second compiler of the
    same key waits and then finds the finished entry.  The lock file is opened without
    following symlinks; when the cache is off or the file cannot be opened, only threads of
    this process are serialized (the lock saves work, it is not needed for correctness).
    """
    lock_path = cache_root() / backend / (key + ".lock")
    ident = str(lock_path)
    with _thread_locks_guard:
        tlock = _thread_locks.setdefault(ident, threading.Lock())
    with tlock:
        fd = -1
        if enabled():
            try:
                fd = os.open(path(backend, key + ".lock"), os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600)
                if _fcntl is not None:
                    _fcntl.flock(fd, _fcntl.LOCK_EX)
                else:  # pragma: no cover
                    _msvcrt.locking(fd, _msvcrt.LK_LOCK, 1)
            except OSError as e:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                if not isinstance(e, CacheUnusable) and e.errno != errno.ELOOP:
                    write_failed(e, f"{backend}/{key}.lock")
        try:
            yield
        finally:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    if _fcntl is not None:
                        _fcntl.flock(fd, _fcntl.LOCK_UN)
                os.close(fd)


# --------------------------------------------------------------------------- info and clear

def _folder_size(d: Path) -> Tuple[int, int]:
    files = total = 0
    for root, _dirs, names in os.walk(d):  # os.walk does not follow symlinked folders
        for n in names:
            if n.endswith(".lock"):
                continue
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, n)).st_size
                files += 1
    return files, total


def _own_folder(d: Path) -> bool:
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and not _private_problem(st, "it")


def has_marker(root: Optional[Path] = None) -> bool:
    """Whether ``root`` carries opdsl's marker file, owned by this user."""
    try:
        st = os.lstat((root or cache_root()) / MARKER)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (_uid() < 0 or st.st_uid == _uid())


def info() -> Dict[str, Dict[str, int]]:
    """Size report: ``{folder: {"files": n, "bytes": b}}`` for each of opdsl's folders present."""
    root = cache_root()
    report: Dict[str, Dict[str, int]] = {}
    for name in KNOWN_FOLDERS:
        d = root / name
        if _own_folder(d):
            files, total = _folder_size(d)
            report[name] = {"files": files, "bytes": total}
    return report


def format_info(report: Optional[Dict[str, Dict[str, int]]] = None) -> str:
    """``info()`` as the lines ``opdsl cache info`` prints, with the root's state."""
    report = info() if report is None else report
    root = cache_root()
    lines = [f"opdsl cache: {root}"]
    if not config.disk_cache_enabled():
        lines.append("  off: OPDSL_NO_DISK_CACHE is set")
    elif os.path.lexists(root):
        try:
            st = os.stat(root)
            problem = (_private_problem(st, "the folder") or _ancestors_problem(root)
                       if stat.S_ISDIR(st.st_mode) else "it is not a directory")
        except OSError as e:
            problem = _describe(e)
        if problem:
            lines.append(f"  not used ({problem}): compiled code stays in memory")
        elif not has_marker(root):
            lines.append(f"  no {MARKER} marker: opdsl did not create this folder, `opdsl cache clear` refuses it")
    if not report:
        lines.append("  (empty)")
    for name, r in report.items():
        lines.append(f"  {name:<13} {r['files']:>6} files {_human(r['bytes']):>10}")
    return "\n".join(lines)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def clear(backend: Optional[str] = None) -> Dict[str, object]:
    """Delete the entries in opdsl's folders (of one backend, or all) and nothing else.

    Returns ``{"files": n, "bytes": b, "skipped": [folders left alone]}``.  Raises NotACache
    when the root lacks the marker opdsl writes into folders it creates.  Lock files are
    kept (another process may hold one); a folder that is a symlink or not ours is skipped.
    """
    if backend is not None and backend not in FOLDERS:
        raise ValueError(f"unknown cache backend {backend!r}; accepted: {', '.join(FOLDERS)}")
    root = cache_root()
    if not os.path.lexists(root):
        return {"files": 0, "bytes": 0, "skipped": []}
    if not has_marker(root):
        raise NotACache(
            f"{root} is not an opdsl cache folder: it has no {MARKER} file (opdsl writes one into cache "
            f"folders it creates). Nothing was deleted. If it holds only a cache made by an older opdsl, "
            f"delete it yourself; to clear a cache elsewhere, point OPDSL_CACHE_DIR at it")
    files = total = 0
    skipped: List[str] = []
    for name in FOLDERS[backend] if backend else KNOWN_FOLDERS:
        d = root / name
        if not os.path.lexists(d):
            continue
        if not _own_folder(d):
            skipped.append(str(d))
            continue
        f, b = _folder_size(d)
        files += f
        total += b
        for entry in os.listdir(d):
            if not entry.endswith(".lock"):
                discard(d / entry)
    return {"files": files, "bytes": total, "skipped": skipped}
