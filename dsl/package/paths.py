"""Path safety: every file a manifest names must stay inside the package folder.

A manifest is data that may come with a downloaded model; ``../evil.py``, ``/etc/x.py`` or a
symlink pointing out of the folder would make opdsl import or read a file the package does
not own.  ``check`` runs on the whole manifest before loader.py imports anything.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Dict

from dsl.package.errors import PackageError
from dsl.package.manifest import Manifest, Where


def resolve(root: Path, relative: str, manifest: str, where: Where, what: str) -> Path:
    """``root / relative`` if it is a file inside ``root`` (symlinks resolved), else a PackageError."""
    if PurePosixPath(relative).is_absolute() or PureWindowsPath(relative).is_absolute() or \
            PureWindowsPath(relative).drive:
        raise PackageError(manifest, where.line, where.key, f"{relative!r} is an absolute path; accepted: a path "
                           "relative to the package folder, inside it")
    if ".." in PurePosixPath(relative.replace("\\", "/")).parts:
        raise PackageError(manifest, where.line, where.key, f"{relative!r} leaves the package folder; accepted: "
                           "a path inside it (no '..')")
    real_root = Path(os.path.realpath(root))
    target = Path(os.path.realpath(root / relative))
    if target != real_root and real_root not in target.parents:
        raise PackageError(manifest, where.line, where.key, f"{relative!r} resolves to {target}, outside the "
                           f"package folder {real_root} (a symlink pointing out); accepted: files inside it")
    if not target.is_file():
        raise PackageError(manifest, where.line, where.key, f"{what} {relative!r} does not exist in {real_root}")
    return target


def check(manifest: Manifest, root: Path) -> Dict[str, Path]:
    """Every file the manifest names -> its real path; the first unsafe or missing one is an error."""
    files: Dict[str, Path] = {}

    def add(rel: str, where: Where, what: str, suffix: str = "") -> None:
        if suffix and not rel.endswith(suffix):
            raise PackageError(manifest.path, where.line, where.key, f"{rel!r} is not accepted; accepted: a "
                               f"{suffix} file")
        files[rel] = resolve(root, rel, manifest.path, where, what)

    for op in manifest.ops:
        if op.functions:
            add(op.functions, op.functions_where, "functions module", ".py")
        for impl in op.implementations:
            if impl.kernel:
                add(impl.kernel[0], impl.file_where, "kernel module", ".py")
            else:
                add(impl.source, impl.file_where, "OpenCL source")
    return files
