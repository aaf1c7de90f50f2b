"""Opening files that someone else may have put there: regular files only, never blocking, capped.

``open()`` on a FIFO waits for a writer forever, and reading ``/dev/zero`` never ends.  Files
opdsl reads that someone else may have placed (compile cache entries, autotune records, the
OpenCL probe record, ONNX models and their external data, the files a pickled op package
carries) go through ``open_regular``: the
path is opened with ``O_NONBLOCK`` (a FIFO opens at once), the type is checked with ``fstat``
on the open descriptor (no window between a check and the open), and anything but a regular
file is refused with ``NotARegularFile``.  ``read_regular`` then reads at most ``limit`` bytes.
"""
from __future__ import annotations

import os
import stat
from typing import Optional, Union

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


class NotARegularFile(OSError):
    """The path names a FIFO, a device, a socket or a folder; ``kind`` says which."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path, self.kind = path, kind


class FileTooLarge(OSError):
    """The file holds more than the cap the caller gave."""

    def __init__(self, path: str, limit: int):
        super().__init__(f"{path} holds more than {limit} bytes")
        self.path, self.limit = path, limit


def kind_of(st: os.stat_result) -> str:
    """'a FIFO (named pipe)', 'a character device', ... or 'not a regular file'."""
    return next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")


def open_regular(path: Union[str, os.PathLike], follow_symlinks: bool = True) -> "tuple[int, os.stat_result]":
    """(descriptor, its stat) of the regular file at ``path``, opened read-only without blocking.

    Raises ``NotARegularFile`` (the descriptor is closed) or the ``OSError`` of ``os.open``;
    with ``follow_symlinks=False`` a symlink fails with ELOOP.  The descriptor is switched back
    to blocking reads (a regular file never blocks anyway) and is the caller's to close."""
    flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | _BINARY | (0 if follow_symlinks else _NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(os.fspath(path), kind_of(st))
        if _NONBLOCK and hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_fd(fd: int, limit: Optional[int], path: str, size_hint: int = 0) -> bytes:
    """The rest of ``fd``: at most ``limit`` bytes, else ``FileTooLarge`` (a file that grows while
    it is read is caught too: one byte past the cap is read to tell)."""
    if limit is not None and size_hint > limit:
        raise FileTooLarge(path, limit)
    chunks, total = [], 0
    while True:
        want = 1 << 20 if limit is None else min(1 << 20, limit + 1 - total)
        chunk = os.read(fd, want) if want > 0 else b""
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if limit is not None and total > limit:
            raise FileTooLarge(path, limit)
        chunks.append(chunk)


def read_regular(path: Union[str, os.PathLike], limit: Optional[int] = None,
                 follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them (see ``open_regular``)."""
    fd, st = open_regular(path, follow_symlinks)
    try:
        return read_fd(fd, limit, os.fspath(path), st.st_size)
    finally:
        os.close(fd)
