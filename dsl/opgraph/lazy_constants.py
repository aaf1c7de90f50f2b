"""Graph constants read from their ``.opdsl`` file on first use, not when the model is opened.

A compiled model keeps each weight twice: the graph's constant (what ONNX export, a re-plan on
another CPU or an op's ``run()`` reads) and the packed copy its launch plan binds (what runs).
On the CPU the artifact was made for only the packed copies run, so ``Model.save`` puts the
constants every stored plan has packed into a section of their own at the end of the file
(artifact_save.py) that ``dsl.load_model`` does not read: each becomes a ``LazyConstant`` that
knows its shape and dtype and reads its bytes (and checks their CRC-32) the first time anything
asks for its values.

The file stays open (a duplicated descriptor) while such a constant is unread, so replacing the
file by a rename (``opdsl compile -o``) changes nothing; rewriting it in place is caught by the
check and raises ``ArtifactError`` naming the file and the constant, never a silently different
model.  ``load_all`` replaces every unread constant of a graph by its array (a model planned
again, node-by-node runs); the model calls ``require_loaded`` before asking an op for a plan.
"""
from __future__ import annotations

import os
import threading
from types import SimpleNamespace
from typing import Dict, Optional, Sequence

import numpy as np

from dsl.opgraph import artifact_checksum
from dsl.opgraph.artifact_format import ArtifactError

stats = {"reads": 0}  # constants read from their file in this process (tests, benchmarks)


class NeedsWeights(Exception):
    """A model plan needs the values of a constant not read yet (model.py reads them and plans again)."""


class LazySection:
    """An artifact's section of constants read on first use, through the file the artifact was
    checked from (``artifact_format.OpenFile``: closed when the last constant of it is gone)."""

    def __init__(self, path: str, file, offset: int, size: int, table: Sequence):
        self.path, self.file, self.offset, self.size, self.table = path, file, int(offset), int(size), list(table)
        self._made: Dict[int, LazyConstant] = {}

    def constant(self, index: int, shape, dtype) -> "LazyConstant":
        """The constant ``index`` of the header's table (one object per index: the graph's
        constants dict, its tensors and their specs share it)."""
        hit = self._made.get(index)
        if hit is None:
            if not 0 <= index < len(self.table):
                raise ArtifactError(f"{self.path}: section 'graph' names constant {index}, its header lists "
                                    f"{len(self.table)}")
            try:
                at, size, digest = self.table[index]
                at, size, dtype = int(at), int(size), np.dtype(dtype)
                shape = tuple(int(d) for d in shape)
            except (TypeError, ValueError):
                raise ArtifactError(f"{self.path}: the header's row of constant {index} is malformed") from None
            if at < 0 or size < 0 or at + size > self.size:
                raise ArtifactError(f"{self.path}: constant {index} lies outside section 'constants' "
                                    f"(bytes {at}-{at + size} of {self.size})")
            if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != size:
                raise ArtifactError(f"{self.path}: constant {index} is {size} bytes in the header, not a "
                                    f"{dtype}{list(shape)} array")
            hit = self._made[index] = LazyConstant(self, index, shape, dtype, self.offset + int(at), digest)
        return hit

    def read(self, index: int, offset: int, nbytes: int, digest: str) -> np.ndarray:
        """The bytes of constant ``index``, checked against the digest the file had when opened."""
        buf = np.empty(nbytes, np.uint8)
        got = 0
        while got < nbytes:
            if hasattr(os, "preadv"):  # Linux, BSDs: straight into the array
                n = os.preadv(self.file.fd, [memoryview(buf)[got:]], offset + got)
            else:  # macOS: through a bytes object
                chunk = os.pread(self.file.fd, nbytes - got, offset + got)
                n = len(chunk)
                buf[got:got + n] = np.frombuffer(chunk, np.uint8)
            if n <= 0:
                break
            got += n
        if got != nbytes or artifact_checksum.crc32_digest(memoryview(buf)) != digest:
            why = "is shorter now" if got != nbytes else "holds other bytes now (its crc32 does not match)"
            raise ArtifactError(f"{self.path}: constant {index} of section 'constants' (read on first use) {why}: "
                                "the file was rewritten in place after the model was loaded. Load the model "
                                "again; replace artifacts by a rename (`opdsl compile -o` does)")
        stats["reads"] += 1
        return buf


class LazyConstant:
    """A graph constant whose values are read from its file when first asked for.

    Shape, dtype, strides and flags are known without reading; ``array()``, ``np.asarray`` and
    any other attribute or index read the values once (then kept)."""

    __slots__ = ("shape", "dtype", "_section", "_index", "_offset", "_digest", "_array", "_lock", "__weakref__")

    def __init__(self, section: LazySection, index: int, shape, dtype, offset: int, digest: str):
        self.shape, self.dtype = shape, dtype
        self._section, self._index, self._offset, self._digest = section, index, offset, digest
        self._array: Optional[np.ndarray] = None
        self._lock = threading.Lock()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> tuple:
        return tuple(int(np.prod(self.shape[k + 1:], dtype=np.int64)) * self.dtype.itemsize
                     for k in range(len(self.shape)))

    @property
    def flags(self):
        return SimpleNamespace(c_contiguous=True, f_contiguous=self.ndim <= 1 or self.size <= 1, writeable=False,
                               owndata=True, aligned=True)

    @property
    def loaded(self) -> bool:
        return self._array is not None

    def array(self) -> np.ndarray:
        """The values (read-only), read from the file and checked the first time."""
        a = self._array
        if a is None:
            with self._lock:
                a = self._array
                if a is None:
                    raw = self._section.read(self._index, self._offset, self.nbytes, self._digest)
                    a = raw.view(self.dtype).reshape(self.shape)
                    a.flags.writeable = False
                    self._array = a
        return a

    def __array__(self, dtype=None, copy=None):
        a = self.array()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __getattr__(self, name):
        if name.startswith("__") or name in LazyConstant.__slots__:
            raise AttributeError(name)
        return getattr(self.array(), name)

    def __getitem__(self, key):
        return self.array()[key]

    def __len__(self) -> int:
        return len(self.array())

    def __iter__(self):
        return iter(self.array())

    def __reduce_ex__(self, protocol):
        return self.array().__reduce_ex__(protocol)

    def __repr__(self) -> str:
        state = "read" if self.loaded else "not read yet"
        return (f"<dsl constant {self.dtype}{list(self.shape)} from {self._section.path} "
                f"(section 'constants', {state})>")


def _delegate(name: str):
    def op(self, *args):
        return getattr(self.array(), name)(*args)
    op.__name__ = name
    return op


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__neg__", "__abs__", "__lt__", "__le__", "__gt__", "__ge__", "__float__", "__int__", "__bool__"):
    setattr(LazyConstant, _name, _delegate(_name))


class ConstantRefs:
    """An unpickler's ``persistent_load`` for a checked artifact (artifact_format.Artifact): a
    deferred constant's reference ``("constant", index, shape, dtype)`` -> its ``LazyConstant``
    in the artifact's ``constants`` section."""

    def __init__(self, art):
        self._art, self._section = art, None

    def __call__(self, pid):
        art = self._art
        if not (isinstance(pid, tuple) and len(pid) == 4 and pid[0] == "constant"):
            raise ArtifactError(f"{art.path}: section 'graph' refers to {pid!r}, not a constant")
        if self._section is None:
            span = art.lazy_span("constants")
            table = art.header.get("constants")
            if span is None or art.file is None or not isinstance(table, list):
                raise ArtifactError(f"{art.path}: section 'graph' refers to constants, but the file has no "
                                    "'constants' section")
            self._section = LazySection(art.path, art.file, span[0], span[1], table)
        return self._section.constant(pid[1], pid[2], pid[3])


def is_lazy(x) -> bool:
    """Whether ``x`` is a constant whose values have not been read yet."""
    return type(x) is LazyConstant and x._array is None


def require_loaded(arrays: Sequence, where: str = "") -> None:
    """``NeedsWeights`` if one of ``arrays`` is a constant not read yet: the model reads them all
    (``load_all``) and plans again, so every op is asked with real arrays."""
    for a in arrays:
        if type(a) is LazyConstant:
            raise NeedsWeights(where)


def has_lazy(graph) -> bool:
    """Whether ``graph`` still holds a ``LazyConstant``."""
    return any(type(v) is LazyConstant for v in graph.constants.values())


def load_all(graph, specs: Optional[dict] = None) -> Optional[dict]:
    """Read every ``LazyConstant`` of ``graph`` and put its array where it was (the constants
    dict, the tensors and their specs); ``specs`` (tensor name -> spec) returned likewise."""
    for name, value in list(graph.constants.items()):
        if type(value) is not LazyConstant:
            continue
        a = value.array()
        graph.constants[name] = a
        t = graph.tensors.get(name)
        if t is not None:
            if t.value is value:
                t.value = a
            if getattr(t.spec, "value", None) is value:
                t.spec = t.spec.with_(value=a)
    if specs is None:
        return None
    return {k: s.with_(value=np.asarray(s.value)) if type(getattr(s, "value", None)) is LazyConstant else s
            for k, s in specs.items()}
