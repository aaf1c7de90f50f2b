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


def require_folder_or_nothing(path, option: str):
    """``path`` as a Path, after checking it is a folder or does not exist yet (an output folder)."""
    from pathlib import Path

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{option} {folder}: exists and is not a folder")
    return folder


def require_packages(folders) -> list:
    """``--package`` folders as given, after checking each is a folder: ``run`` and ``bench`` share it."""
    import os

    for f in folders:
        if not os.path.isdir(f):
            raise UserError(f"--package {f}: no such folder (an op package is a folder holding opdsl-package.yaml)")
    return [str(f) for f in folders]
