"""Importing a package's Python files under a private package name.

Each package folder becomes a synthetic package ``_opdsl_pkg_<name>_<hash of its real path>``,
and ``kernels.py`` is imported as ``<that>.kernels``: two packages may both have a
``kernels.py`` (or a ``helpers.py`` they import relatively), and neither shadows a module
of the user's.  The same folder always gets the same name, so registering it again
re-imports its files and replaces its ops in the registry rather than adding copies.

Package modules are always compiled from their ``.py`` source (``SourceOnlyLoader``, for the
files the manifest names and for what they import relatively): a ``__pycache__/*.pyc`` in the
folder, which whoever could write there may have planted, is never read, and none is written.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import sys
import traceback
import types
from pathlib import Path
from typing import Dict

from dsl.package.errors import PackageError
from dsl.package.manifest import Where


def private_name(name: str, root: Path) -> str:
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() else "_" for c in name)
    return f"_opdsl_pkg_{safe}_{digest}"


class Loader:
    """Imports the files of one package folder (each once), naming the manifest line on failure."""

    def __init__(self, name: str, root: Path, manifest: str):
        self.root, self.manifest = root, manifest
        self.package = private_name(name, root)
        self.modules: Dict[Path, types.ModuleType] = {}
        for key in [k for k in sys.modules if k == self.package or k.startswith(self.package + ".")]:
            del sys.modules[key]  # a re-registration reads the files again
        self._synthetic(self.package, root)

    def _synthetic(self, name: str, folder: Path) -> None:
        mod = types.ModuleType(name, f"opdsl op package {folder}")
        mod.__path__ = [str(folder)]
        mod.__package__ = name
        sys.modules[name] = mod
        # relative imports search __path__ through this finder: sources and extensions, no bytecode
        sys.path_importer_cache[str(folder)] = importlib.machinery.FileFinder(
            str(folder), (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
            (SourceOnlyLoader, importlib.machinery.SOURCE_SUFFIXES))

    def module(self, path: Path, where: Where) -> types.ModuleType:
        """The module of ``path`` (a file inside the package, already checked by paths.py)."""
        hit = self.modules.get(path)
        if hit is not None:
            return hit
        rel = path.relative_to(self.root).with_suffix("")
        parent = self.package
        for part in rel.parts[:-1]:  # sub-folders become synthetic sub-packages
            child = f"{parent}.{_ident(part)}"
            if child not in sys.modules:
                self._synthetic(child, self.root.joinpath(*rel.parts[:rel.parts.index(part) + 1]))
            parent = child
        name = f"{parent}.{_ident(rel.parts[-1])}"
        spec = importlib.util.spec_from_file_location(name, path, loader=SourceOnlyLoader(name, str(path)))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except PackageError:
            raise
        except BaseException as e:
            del sys.modules[name]
            if isinstance(e, KeyboardInterrupt):
                raise
            frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
            at = f" (line {frames[-1].lineno})" if frames else ""
            detail = str(e).splitlines()[0] if str(e) else ""
            raise PackageError(self.manifest, where.line, where.key, f"importing {path.name} failed{at}: "
                               f"{type(e).__name__}: {detail}") from None
        self.modules[path] = mod
        return mod


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the ``.py`` file on every import: no ``__pycache__`` entry is read or written."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def _ident(part: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in part)
