"""A package op's files travel with it when it is pickled (a model sent to a Dask worker), so
the receiving process needs no shared file system.

Pickling a package op class sends every file of its package folder (the manifest, kernels,
``functions.py``, ``.cl`` sources, helpers; not ``__pycache__`` or hidden files) and the
folder's path.  Unpickling returns, in order of preference:

* the class itself, in the process that pickled it;
* the class of the package registered from the same folder with the same files, in a process
  that has it (a local cluster on a shared disk: the kernels' disk cache entries then hit);
* else the package registered from that folder when it holds the same files and only this
  user (or root) can change it, or else from a private folder ``tempfile.mkdtemp`` creates
  (mode 0700, a fresh unpredictable name, removed at exit), written once per content and
  process; its ops then answer ``load_onnx`` in that process too.

Nothing another local user prepared is ever imported: the carried files are never written to a
shared, predictable path, a folder found on disk is used only after its owner and modes are
checked, and package modules are compiled from their ``.py`` source (loader.py), so a
``__pycache__/*.pyc`` the package did not carry is never read.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Dict, Tuple

from dsl.files import FileTooLarge, NotARegularFile, read_regular
from dsl.opgraph import registry
from dsl.package.errors import PackageError
from dsl.package.loader import private_name
from dsl.package.package import MANIFEST, register_package

MAX_BYTES = 64 << 20  # a package larger than this is not a package but a data set

_LOCK = threading.Lock()
_CARRIERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CLASSES: Dict[Tuple[str, tuple], type] = {}  # (digest, op key) -> class, in the pickling and unpickling process


def carried_class(cls: type) -> "_CarriedClass":
    """The stand-in that pickles package op class ``cls`` with its package's files."""
    with _LOCK:
        hit = _CARRIERS.get(cls)
        if hit is None:
            root = Path(sys.modules[cls.__module__].__path__[0])
            files = _read_files(root, cls.op_type)
            digest = _digest(files)
            key = (cls.domain, cls.op_type, cls.since)
            _CLASSES[(digest, key)] = cls
            hit = _CARRIERS[cls] = _CarriedClass(_package_name(cls), digest, files, key, str(root))
        return hit


def _package_name(cls) -> str:
    return cls.__module__.split("_opdsl_pkg_", 1)[-1].rsplit("_", 1)[0]


def _digest(files: Dict[str, bytes]) -> str:
    return hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:20]


def _read_files(root: Path, op_type: str) -> Dict[str, bytes]:
    files, total = {}, 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            if name.startswith(".") or name.endswith(".pyc"):
                continue
            path = Path(folder) / name
            try:  # a FIFO or device in the folder is refused, not waited on or read forever
                data = read_regular(path, MAX_BYTES - total)
            except NotARegularFile as e:
                raise PackageError(str(root), 0, None, f"pickling op {op_type}: {path.name} is {e.kind}, not a "
                                   "regular file; accepted: a package folder of plain files") from None
            except FileTooLarge:
                raise PackageError(str(root), 0, None, f"pickling op {op_type}: the package folder holds more "
                                   f"than {MAX_BYTES >> 20} MiB, which would travel with every pickled model; "
                                   "accepted: keep data files out of the package folder") from None
            total += len(data)
            files[path.relative_to(root).as_posix()] = data
    return files


class _CarriedClass:
    def __init__(self, name: str, digest: str, files: Dict[str, bytes], key: tuple, origin: str):
        self.name, self.digest, self.files, self.key, self.origin = name, digest, files, key, origin

    def __reduce__(self):
        return (unpickle_class, (self.name, self.digest, self.files, self.key, self.origin))


def unpickle_class(name: str, digest: str, files: Dict[str, bytes], key: tuple, origin: str) -> type:
    """The op class ``key`` of the package made of ``files`` (see the module docstring)."""
    with _LOCK:
        hit = _CLASSES.get((digest, key)) or _registered(name, digest, key, origin)
        if hit is not None:
            return hit
        folder = Path(origin) if _same_files(Path(origin), digest) else _write(name, digest, files)
        package = register_package(folder)
        for cls in package.ops:
            _CLASSES[(digest, (cls.domain, cls.op_type, cls.since))] = cls
        hit = _CLASSES.get((digest, key))
        if hit is None:
            raise PackageError(str(folder), 0, None, f"the unpickled package has no op {key[0]}::{key[1]} "
                               f"(since {key[2]})")
        return hit


def _same_files(root: Path, digest: str) -> bool:
    """``root`` holds exactly the carried files, and nobody but this user (or root) can change them."""
    try:
        return ((root / MANIFEST).is_file() and not _untrusted(root)
                and _digest(_read_files(root, "")) == digest)
    except (OSError, PackageError):
        return False


def _untrusted(root: Path) -> str:
    """Why code in ``root`` may have been written by someone else ("" if it may not): a file or
    folder (``__pycache__`` included) owned by another user, or writable by group or others, a
    symlink, or a parent anyone may write to without the sticky bit."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid is None:
        return ""
    real = Path(os.path.realpath(root))
    for parent in real.parents:
        st = os.stat(parent)
        if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
            return f"{parent} is writable by everyone"
    for folder, dirs, names in os.walk(real):
        for entry in [folder, *(os.path.join(folder, n) for n in dirs + names)]:
            st = os.lstat(entry)
            if stat.S_ISLNK(st.st_mode):
                return f"{entry} is a symlink"
            if st.st_uid not in (uid, 0) or st.st_mode & 0o022:
                return f"{entry} may be changed by another user"
    return ""


def _registered(name: str, digest: str, key: tuple, origin: str):
    """The class registered here from ``origin`` when that folder still holds the same files."""
    module = private_name(name, Path(os.path.realpath(origin)))
    for cls in registry.all_ops():
        same = cls.__module__ == module and (cls.domain, cls.op_type, cls.since) == key
        if same and _same_files(Path(origin), digest):
            _CLASSES[(digest, key)] = cls
            return cls
    return None


_UNPACKED: Dict[str, Path] = {}  # digest -> the private folder this process wrote it to


def _write(name: str, digest: str, files: Dict[str, bytes]) -> Path:
    """The package's files in a new private folder (0700, an unpredictable name), once per
    content in this process; it is removed when the process exits."""
    hit = _UNPACKED.get(digest)
    if hit is not None and os.path.isdir(hit):
        return hit
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    folder = Path(tempfile.mkdtemp(prefix=f"opdsl-package-{safe}-{digest}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for rel, data in files.items():
        path = folder / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise PackageError(str(folder), 0, None, f"the unpickled package names the file {rel!r} outside its folder")
        for parent in reversed(path.relative_to(folder).parents[:-1]):
            (folder / parent).mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    _UNPACKED[digest] = folder
    return folder
