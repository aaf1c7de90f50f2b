"""``register_package`` / ``check_package``: a package folder from manifest to registered ops.

The order is the safety argument: read and check the whole manifest, then check every
path it names, and only then import the package's Python files (loader.py) and build the
op classes (build.py).  Nothing is registered until every op of the package has been built,
so a package with one bad op registers none.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Union

from dsl.opgraph import registry
from dsl.package import manifest as schema
from dsl.package import paths, yaml_lines
from dsl.package.build import build_ops
from dsl.package.errors import PackageError
from dsl.package.loader import Loader

MANIFEST = "opdsl-package.yaml"


@dataclass
class Package:
    """A loaded op package: ``ops`` are its op classes, in manifest order."""

    name: str
    version: int
    path: Path  # the package folder (resolved)
    ops: List[type] = field(default_factory=list)
    manifest: str = ""

    def unregister(self) -> None:
        """Remove this package's ops from the registry (built-ins they overrode answer again)."""
        for cls in self.ops:
            registry.unregister(cls)

    def __repr__(self) -> str:
        return f"<op package {self.name} v{self.version} at {self.path}: {', '.join(c.op_type for c in self.ops)}>"


def _backends() -> tuple:
    from backends import base
    return tuple(base.names())


def manifest_path(path: Union[str, os.PathLike]) -> Path:
    """The manifest of ``path`` (a package folder, or the manifest file itself)."""
    p = Path(os.fspath(path))
    return p if p.suffix in (".yaml", ".yml") and not p.is_dir() else p / MANIFEST


def check_package(path: Union[str, os.PathLike]) -> Package:
    """Validate the package at ``path`` and build its ops, without registering them."""
    mpath = manifest_path(path)
    shown = str(mpath)
    if not mpath.is_file():
        why = "no such folder" if not mpath.parent.is_dir() else f"the folder has no {MANIFEST}"
        raise PackageError(shown, 0, None, f"{why}; a package is a folder holding {MANIFEST}")
    root = Path(os.path.realpath(mpath.parent))
    if Path(os.path.realpath(mpath)).parent != root:
        raise PackageError(shown, 0, None, f"{MANIFEST} is a symlink out of the package folder; accepted: a file "
                           "inside it")
    try:
        with open(mpath, "rb") as f:  # is_file() above: a regular file, so this cannot block
            data = f.read(yaml_lines.MAX_BYTES + 1)
        if len(data) > yaml_lines.MAX_BYTES:
            raise PackageError(shown, 0, None, f"the manifest is larger than {yaml_lines.MAX_BYTES} bytes; "
                               "accepted: a manifest of a package (a few KB)")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PackageError(shown, 0, None, f"cannot read the manifest: {e}") from None
    decl = schema.read(shown, text, _backends())
    files = paths.check(decl, root)  # every path, before any import
    ops = build_ops(decl, files, Loader(decl.name, root, shown))
    return Package(decl.name, decl.version, root, ops, shown)


def register_package(path: Union[str, os.PathLike]) -> Package:
    """Validate the package at ``path`` and register its ops (again: replacing them)."""
    pkg = check_package(path)
    for cls in pkg.ops:
        registry.register(cls)
    return pkg
