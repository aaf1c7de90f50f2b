"""The one exception every subcommand raises for a mistake the user can fix.

It lives apart from main.py so command modules can raise it without importing the
parser assembly that imports them."""


class UserError(Exception):
    """A problem the user can fix (bad argument, missing file, ...); printed without a traceback."""


def require_file(path: str) -> str:
    """``path`` itself, after checking it names a file: every command that reads one says the same."""
    import os

    if not os.path.isfile(path):
        raise UserError(f"no such file: {path}")
    return path


def require_folder_or_nothing(path, option: str, writable: bool = False):
    """``path`` as a Path, after checking it is a folder or does not exist yet (an output folder);
    ``writable``: and that it (or the folder it would be made in) can be written, so a command
    finds out before it works rather than after."""
    import os
    from pathlib import Path

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{option} {folder}: exists and is not a folder; give a folder (created if missing)")
    if writable:
        existing = folder
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise UserError(f"{option} {folder}: cannot be created, {existing} is not a folder; give a folder "
                            "path whose parents are folders")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UserError(f"{option} {folder}: {existing} is not writable; give a folder you can write")
    return folder


def require_packages(paths) -> list:
    """``--package`` folders or manifest files as given, after checking each exists (``run`` and
    ``bench`` share it; ``dsl.register_package`` then checks the manifest itself)."""
    import os

    for f in paths:
        if not (os.path.isdir(f) or (os.path.isfile(f) and str(f).endswith((".yaml", ".yml")))):
            raise UserError(f"--package {f}: no such folder or manifest; give an op package folder (holding "
                            "opdsl-package.yaml) or its .yaml manifest file")
    return [str(f) for f in paths]


def missing_op_hint(message: str) -> str:
    """An OnnxImportError's text with the Python-API hint ``packages=[...]`` said the command-line way."""
    from dsl.onnx.coverage import REGISTER_HINT
    return message.replace(REGISTER_HINT, "(pass their op package with --package PKG/ or --package "
                                          "PKG/opdsl-package.yaml)")
