"""A package op's files travel with it when it is pickled (a model sent to a Dask worker), so
the receiving process needs no shared file system.

Pickling a package op class sends every file of its package folder (the manifest, kernels,
``functions.py``, ``.cl`` sources, helpers; not ``__pycache__`` or hidden files).  Unpickling
writes them to ``<tmp>/opdsl-packages/<name>-<digest>/`` once per content, registers the
package from there (its ops answer ``load_onnx`` in that process too) and returns the op class.
In the process that pickled it, the same class comes back.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Dict, Tuple

from dsl.package.errors import PackageError
from dsl.package.package import register_package

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
            files = _read_files(root, cls)
            digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:20]
            key = (cls.domain, cls.op_type, cls.since)
            _CLASSES[(digest, key)] = cls
            hit = _CARRIERS[cls] = _CarriedClass(_package_name(cls), digest, files, key)
        return hit


def _package_name(cls) -> str:
    return cls.__module__.split("_opdsl_pkg_", 1)[-1].rsplit("_", 1)[0]


def _read_files(root: Path, cls) -> Dict[str, bytes]:
    files, total = {}, 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            if name.startswith(".") or name.endswith(".pyc"):
                continue
            path = Path(folder) / name
            data = path.read_bytes()
            total += len(data)
            if total > MAX_BYTES:
                raise PackageError(str(root), 0, None, f"pickling op {cls.op_type}: the package folder holds more "
                                   f"than {MAX_BYTES >> 20} MiB, which would travel with every pickled model; "
                                   "accepted: keep data files out of the package folder")
            files[path.relative_to(root).as_posix()] = data
    return files


class _CarriedClass:
    def __init__(self, name: str, digest: str, files: Dict[str, bytes], key: tuple):
        self.name, self.digest, self.files, self.key = name, digest, files, key

    def __reduce__(self):
        return (unpickle_class, (self.name, self.digest, self.files, self.key))


def unpickle_class(name: str, digest: str, files: Dict[str, bytes], key: tuple) -> type:
    """The op class ``key`` of the package made of ``files``: from this process if it is known
    here, else from the package written to a temporary folder and registered."""
    with _LOCK:
        hit = _CLASSES.get((digest, key))
        if hit is not None:
            return hit
        folder = Path(tempfile.gettempdir()) / "opdsl-packages" / f"{name}-{digest}"
        for rel, data in files.items():
            path = folder / rel
            if not (path.is_file() and path.read_bytes() == data):
                path.parent.mkdir(parents=True, exist_ok=True)
                part = path.with_name(f".{path.name}.{os.getpid()}")
                part.write_bytes(data)
                os.replace(part, path)  # whole files only: other worker processes may read the folder now
        package = register_package(folder)
        for cls in package.ops:
            _CLASSES[(digest, (cls.domain, cls.op_type, cls.since))] = cls
        hit = _CLASSES.get((digest, key))
        if hit is None:
            raise PackageError(str(folder), 0, None, f"the unpickled package has no op {key[0]}::{key[1]} "
                               f"(since {key[2]})")
        return hit
