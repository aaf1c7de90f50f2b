"""The ``.opdsl`` container: a JSON header and raw sections, each with its checksum.

    0   MAGIC (16 bytes)
    16  header length H (8 bytes, little-endian)
    24  sha256 of the header (32 bytes)
    56  header: UTF-8 JSON, H bytes (the format number, what wrote it, the sections)
    ... sections, each starting on a 64-byte boundary (weights load aligned, without a copy)

The header lists every section as {"name", "offset", "size", "check", "digest"}: ``check`` is
"sha256", or "crc32" (artifact_checksum.py, about half the CPU) for the raw weight sections the
writer names ``fast``.  ``read`` checks the magic, the header's digest and every section's digest
before returning anything, so a truncated or corrupted file is an ``ArtifactError`` naming the
file and the section and nothing of it is used.  Sections the writer names ``lazy`` (rows with
``"lazy": true``, placed last: the graph constants a model reads only when planned again,
lazy_constants.py) are not read at all: ``read`` checks that they lie inside the file and keeps
it open (``Artifact.file``) for the reads and per-constant checks on first use.  Whether a section may then be unpickled is
decided here too (``trust_problem``): the file must be this user's and not writable by anyone
else, as the compile cache's entries (docs/cache.md), unless the caller says it trusts it.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import secrets
import stat
import struct
import weakref
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from dsl import config, files
from dsl.lang.errors import Error
from dsl.opgraph import artifact_checksum
from dsl.runtime import huge_pages

MAGIC = b"\x89OPDSL-ARTIFACT\n"
FORMAT = 3          # the container and its sections' layout (2: per-section checks; 3: lazy sections)
READABLE = (2, 3)   # formats this opdsl opens (2 is 3 without lazy sections); another is refused
ALIGN = 64
_FIXED = len(MAGIC) + 8 + 32
MAX_HEADER_BYTES = 64 << 20


class ArtifactError(Error):
    """An ``.opdsl`` artifact that cannot be used: not one, damaged, from another format, not
    trusted, or built for another toolchain or CPU when recompiling is not possible."""


class ArtifactWarning(UserWarning):
    """An artifact built for another CPU or opdsl/toolchain is recompiled instead of run."""


Chunks = Union[bytes, bytearray, memoryview, Sequence]


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def size_of(chunks: Chunks) -> int:
    """Bytes of a section given as bytes or a list of byte chunks."""
    if isinstance(chunks, (bytes, bytearray, memoryview)):
        return memoryview(chunks).nbytes
    return sum(memoryview(c).nbytes for c in chunks)


def pack_chunks(chunks: Sequence) -> Tuple[List, List[Tuple[int, int]]]:
    """``chunks`` laid out one after another on 64-byte boundaries -> (pieces to write,
    (offset, size) of each chunk inside the section)."""
    pieces, spans, at = [], [], 0
    for c in chunks:
        view = memoryview(c).cast("B")
        pad = _align(at) - at
        if pad:
            pieces.append(b"\0" * pad)
            at += pad
        pieces.append(view)
        spans.append((at, view.nbytes))
        at += view.nbytes
    return pieces, spans


def digest(check: str, data) -> str:
    """The hex digest of ``data`` (bytes or a list of byte chunks) by ``check``."""
    if check == artifact_checksum.NAME:
        return artifact_checksum.crc32_digest(data)
    h = hashlib.sha256()
    for c in ([data] if isinstance(data, (bytes, bytearray, memoryview)) else data):
        h.update(c)
    return h.hexdigest()


CHECKS = ("sha256", artifact_checksum.NAME)


class PageWriter:
    """Writes a file in whole huge pages: every write reaching the file starts at a 2 MiB offset
    and covers whole 2 MiB pages (the last one shorter); chunks are staged in a 2 MiB buffer up to
    a page boundary, whole pages of a big chunk are written from it directly.  The page cache
    then holds the file in 2 MiB folios where the filesystem allows (ext4, xfs with large
    folios), and a mapping of it -- a plan cache entry's weights (plan_cache.py) -- is mapped
    with 2 MiB pages.  Written chunk by chunk (a weight array each, at any length), the same file
    was held in folios of every size: 8-62 MB of light_resnet50's 190 MB entry mapped as huge
    pages, varying from one entry to the next."""

    def __init__(self, raw):
        self._raw, self._buf, self._used, self._at = raw, bytearray(huge_pages.HUGE_PAGE), 0, 0

    def tell(self) -> int:
        return self._at + self._used

    def write(self, data) -> None:
        view, page = memoryview(data).cast("B"), len(self._buf)
        while len(view):
            if self._used == 0 and len(view) >= page:  # on a page boundary: whole pages, no copy
                n = len(view) // page * page
                self._write_all(view[:n])
                self._at, view = self._at + n, view[n:]
                continue
            n = min(len(view), page - self._used)
            self._buf[self._used:self._used + n] = view[:n]
            self._used, view = self._used + n, view[n:]
            if self._used == page:
                self._flush()

    def _write_all(self, out: memoryview) -> None:
        while len(out):
            out = out[self._raw.write(out):]

    def _flush(self) -> None:
        self._write_all(memoryview(self._buf)[:self._used])
        self._at, self._used = self._at + self._used, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self._flush()


def write(path: Union[str, os.PathLike], header: dict, sections: Dict[str, Chunks], fast: Sequence[str] = (),
          mode: int = 0o644, lazy: Sequence[str] = ()) -> Path:
    """Write ``header`` (plus the format and section table) and ``sections`` (name -> bytes or a
    list of byte chunks) to ``path`` through a temporary file renamed into place (``mode`` less
    the umask; by default readable by others, writable only by its owner).  The sections named in
    ``fast`` (raw weights: nothing in them is unpickled or run) are checked with CRC-32; those
    named in ``lazy`` (raw, CRC-32 too) go last and are not read when the file is opened."""
    names = [n for n in sections if n not in lazy] + [n for n in sections if n in lazy]
    sizes = {n: size_of(sections[n]) for n in names}
    checks = {n: artifact_checksum.NAME if n in fast or n in lazy else "sha256" for n in names}
    # offsets depend on the header's length, which depends on the offsets' digits: fix the
    # table with wide placeholders first
    table = [{"name": n, "offset": 0, "size": sizes[n], "check": checks[n], "digest": digest(checks[n], sections[n]),
              **({"lazy": True} if n in lazy else {})} for n in names]
    head = dict(header, format=FORMAT, sections=table)
    for _ in range(3):
        blob = json.dumps(head, sort_keys=True).encode("utf-8")
        at = _align(_FIXED + len(blob))
        changed = False
        for row in table:
            if row["offset"] != at:
                row["offset"], changed = at, True
            at = _align(at + row["size"])
        if not changed:
            break
    blob = json.dumps(head, sort_keys=True).encode("utf-8")
    target = Path(path)
    # a name of its own: two threads (or processes) writing one plan cache entry never share it
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        with os.fdopen(fd, "wb", buffering=0) as raw, PageWriter(raw) as f:
            f.write(MAGIC + struct.pack("<Q", len(blob)) + hashlib.sha256(blob).digest() + blob)
            for row in table:
                f.write(b"\0" * (row["offset"] - f.tell()))
                data = sections[row["name"]]
                for c in ([data] if isinstance(data, (bytes, bytearray, memoryview)) else data):
                    f.write(c)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def trust_problem(st: os.stat_result, folder: Path) -> str:
    """Why a file with this stat, in ``folder``, may not be unpickled without ``trusted=True``
    ("" when it may): the cache's rule, a file only this user can change."""
    uid = os.geteuid() if hasattr(os, "geteuid") else -1
    if uid >= 0 and st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("its group", 0o020), ("other users", 0o002)) if st.st_mode & bit)
        return f"it is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    try:
        fst = os.stat(folder)
    except OSError:
        return ""
    if fst.st_mode & 0o002 and not fst.st_mode & stat.S_ISVTX:
        return f"its folder {folder} is writable by everyone and not sticky (anyone can swap the file)"
    return ""


class OpenFile:
    """A descriptor of a checked artifact kept open for its lazy sections; closed when the last
    holder is gone."""

    def __init__(self, fd: int):
        self.fd = fd
        self._closer = weakref.finalize(self, os.close, fd)


class Artifact:
    """A checked artifact: ``header`` (dict), ``data`` (the file up to its lazy sections,
    writable), ``section(name)`` (a memoryview of it, or None if the file has no such section)
    and ``file`` (the file kept open when it has lazy sections, else None)."""

    def __init__(self, path: str, header: dict, data: memoryview, file: Optional[OpenFile] = None):
        self.path, self.header, self.data, self.file = path, header, data, file
        self._rows = {row["name"]: row for row in header["sections"]}

    def section(self, name: str):
        row = self._rows.get(name)
        if row is None or row.get("lazy"):
            return None
        return self.data[row["offset"]:row["offset"] + row["size"]]

    def lazy_span(self, name: str) -> Optional[Tuple[int, int]]:
        """(offset, size) of the lazy section ``name`` in the file, or None if it has none."""
        row = self._rows.get(name)
        return (int(row["offset"]), int(row["size"])) if row is not None and row.get("lazy") else None

    def weight_buffers(self) -> list:
        """The out-of-band pickle buffers the header's ``weights`` table cuts from the ``weights``
        section (views, no copy); ``ArtifactError`` if the table does not fit the sections."""
        weights = self.section("weights")
        spans = self.header.get("weights") or []
        if weights is None or self.section("graph") is None or any(
                at < 0 or size < 0 or at + size > len(weights) for at, size in spans):
            raise ArtifactError(f"{self.path}: its header's 'weights' table does not fit its sections")
        return [weights[at:at + size] for at, size in spans]


HUGE_BUFFER_BYTES = huge_pages.HUGE_PAGE  # from here on the read buffer is on 2 MiB pages


def private_buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes that the file is read into (the weights are views of it).

    From one huge page up, an anonymous private mapping advised as 2 MiB pages
    (huge_pages.mapping): the read's cost is mostly the kernel faulting in and zeroing the
    pages -- readv of a page-cached 206 MB file took 0.06 s of CPU into such a mapping,
    0.13-0.50 s into ``np.empty`` (fresh processes, both orders, loaded machine) -- and every run
    then streams the weights through 2 MiB pages (light_squeezenet's weights, read so, ran it
    5 % faster than mapped from a file the page cache held in small folios).  Smaller buffers, and every
    buffer where the kernel has no transparent huge pages or with OPDSL_HUGE_PAGES=0, are on
    4 KiB pages (neither is zero-filled by a pass of ours)."""
    if size >= HUGE_BUFFER_BYTES:
        try:
            return memoryview(huge_pages.mapping(size))[:size]
        except (OSError, ValueError, AttributeError):
            pass
    return memoryview(np.empty(size, np.uint8))


def read(path: Union[str, os.PathLike], trusted: bool = False, mapped: bool = False) -> Artifact:
    """The artifact at ``path``, every section checked; ``ArtifactError`` naming the file and
    what is wrong (not an artifact, truncated or corrupted section, another format, not trusted).

    ``mapped``: map the file copy-on-write instead of reading it into a buffer (no 200 MB copy;
    the pages are the page cache's until written).  Only for files nobody rewrites in place once
    checked -- the plan cache's private entries, replaced by rename, or a user's file when asked
    (``load_model(mmap=True)``) -- since a mapping shows later writes to the file."""
    name = os.fspath(path)
    try:
        fd, st = files.open_regular(name)
    except files.NotARegularFile as e:
        raise ArtifactError(f"{name}: it is {e.kind}, not an .opdsl file") from None
    except OSError as e:
        raise ArtifactError(f"{name}: cannot open it ({e.strerror or e})") from None
    file = None
    try:
        why = "" if trusted else trust_problem(st, Path(os.path.abspath(name)).parent)
        if why:
            raise ArtifactError(f"{name}: refused, {why}. Loading an artifact runs code from it (like a pickle); "
                                "pass trusted=True only for a file you made or trust")
        size, has_lazy = _eager_size(fd, st.st_size)
        if has_lazy:
            file = OpenFile(os.dup(fd))
        if mapped and st.st_size:
            region = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_COPY)
            if hasattr(mmap, "MADV_HUGEPAGE") and config.huge_pages():
                try:  # pages the page cache does not hold yet are read ahead as 2 MiB folios
                    region.madvise(mmap.MADV_HUGEPAGE)
                except OSError:
                    pass
            data = memoryview(region)
            return _checked(name, data, st.st_size, file)
        view, got = private_buffer(size), 0
        while got < len(view):
            n = os.readv(fd, [view[got:]])
            if n == 0:
                break
            got += n
        data = view[:got]
    finally:
        os.close(fd)
    return _checked(name, data, st.st_size, file)


def _eager_size(fd: int, file_size: int) -> Tuple[int, bool]:
    """(bytes to read: up to the end of the last section that is not lazy, whether the file has
    lazy sections); the whole file when its header does not parse (``_checked`` says why)."""
    try:
        fixed = os.pread(fd, _FIXED, 0)
        (length,) = struct.unpack_from("<Q", fixed, len(MAGIC))
        if fixed[:len(MAGIC)] != MAGIC or length > MAX_HEADER_BYTES:
            return file_size, False
        rows = json.loads(os.pread(fd, length, _FIXED).decode("utf-8"))["sections"]
        lazy = [r for r in rows if r.get("lazy")]
        if not lazy:
            return file_size, False
        end = max([_FIXED + length] + [int(r["offset"]) + int(r["size"]) for r in rows if not r.get("lazy")])
        return min(end, file_size), True
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        return file_size, False


def _checked(name: str, data: memoryview, file_size: Optional[int] = None, file: Optional[OpenFile] = None) -> Artifact:
    if bytes(data[:len(MAGIC)]) != MAGIC:
        raise ArtifactError(f"{name}: not an .opdsl artifact (wrong magic bytes); make one with "
                            "`opdsl compile MODEL.onnx -o MODEL.opdsl` or Model.save(path)")
    if len(data) < _FIXED:
        raise ArtifactError(f"{name}: truncated in its header ({len(data)} bytes)")
    (length,) = struct.unpack_from("<Q", data, len(MAGIC))
    if length > MAX_HEADER_BYTES or _FIXED + length > len(data):
        raise ArtifactError(f"{name}: truncated in its header (it claims {length} bytes, the file has "
                            f"{len(data) - _FIXED} after the fixed part)")
    blob = bytes(data[_FIXED:_FIXED + length])
    if hashlib.sha256(blob).digest() != bytes(data[len(MAGIC) + 8:_FIXED]):
        raise ArtifactError(f"{name}: section 'header' is corrupted (its sha256 does not match)")
    try:
        header = json.loads(blob.decode("utf-8"))
        rows = header["sections"]
        fmt = header["format"]
    except (ValueError, KeyError, TypeError) as e:
        raise ArtifactError(f"{name}: section 'header' does not parse ({e})") from None
    if fmt not in READABLE:
        raise ArtifactError(f"{name}: artifact format {fmt}, this opdsl reads formats "
                            f"{', '.join(map(str, READABLE))}; compile the model "
                            "again with this opdsl (`opdsl compile MODEL.onnx -o MODEL.opdsl`)")
    check_sections(name, rows, data, len(data) if file_size is None else file_size)
    return Artifact(name, header, data, file)


def check_sections(name: str, rows, data: memoryview, file_size: Optional[int] = None) -> None:
    """``ArtifactError`` for the first section of ``rows`` that lies outside ``data`` (a lazy
    one: outside the file's ``file_size`` bytes) or whose digest does not match (lazy sections
    are checked per constant when read, lazy_constants.py)."""
    for row in rows:
        try:
            at, size, check, want = int(row["offset"]), int(row["size"]), row["check"], row["digest"]
        except (KeyError, TypeError, ValueError):
            raise ArtifactError(f"{name}: section 'header' has a malformed section row {row!r}") from None
        if check not in CHECKS:
            raise ArtifactError(f"{name}: section {row.get('name')!r} is checked with {check!r}; this opdsl knows "
                                f"{', '.join(CHECKS)}")
        end = at + size
        lazy = bool(row.get("lazy"))
        have = file_size if lazy and file_size is not None else len(data)
        if at < 0 or size < 0 or end > have:
            raise ArtifactError(f"{name}: truncated: section {row['name']!r} ends at byte {end}, the file has "
                                f"{have} bytes")
        if lazy:
            continue
        if digest(check, data[at:end]) != want:
            raise ArtifactError(f"{name}: section {row['name']!r} is corrupted (its {check} does not match)")
