"""Numba's machine-code cache, pinned to opdsl's private cache folder.

``njit(cache=True)`` lets numba choose where its pickles go: ``NUMBA_CACHE_DIR``,
a ``__pycache__`` beside the source, or a per-user folder when that is not
writable, and it unpickles whatever it finds there.  Generated modules are
therefore executed with ``CACHE = False`` and each of their dispatchers gets a
``PrivateFunctionCache``: index and data files live only in
``cache.backend_dir("numba")``, are written 0600 through ``cache.atomic_write``
and read through ``cache.read_private`` (no symlinks, owner checked), and the
index is stamped with the hash of the source opdsl generated, not with a file
on disk.  A damaged or unreadable entry reads as missing (numba recompiles); a
failed write turns the disk cache off with one warning instead of failing the
compile.  Depends on numba.core.caching internals (checked by tests/backends/test_cache.py).

NRT's own small library (the refcount and atomic functions every kernel links against) is kept
here too: numba generates it with LLVM in every process (``_nrt_functions``).
"""
from __future__ import annotations

import hashlib
import io
import itertools
import pickle
import struct
import sys
from contextlib import contextmanager
from pathlib import Path

from numba.core import caching
from numba.core.dispatcher import Dispatcher
from numba.core.runtime import nrtdynmod, rtsys

from backends import cache
from backends.numba import link_once

CACHE_TAG = "numba"  # the folder of the numba backend in the disk cache (Backend.cache_tag)


def source_stamp(source: str) -> bytes:
    """What numba's index records as the source version: the generated text's hash."""
    return hashlib.sha256(source.encode("utf-8")).digest()


class _PinnedLocator(caching._CacheLocator):
    """Always opdsl's numba folder; the folder is checked (not created elsewhere) before a write."""

    def __init__(self, py_func, folder: Path, stamp: bytes):
        self._py_file = py_func.__code__.co_filename
        self._lineno = py_func.__code__.co_firstlineno
        self._folder = str(folder)
        self._stamp = stamp

    def ensure_cache_path(self):
        cache.backend_dir(CACHE_TAG)  # raises CacheUnusable (an OSError) when the cache went off

    def get_cache_path(self):
        return self._folder

    def get_source_stamp(self):
        return self._stamp

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):  # pragma: no cover - built directly, never searched
        return None


class _PrivateIndex(caching.IndexDataCacheFile):
    """numba's index/data files, read only when private and written atomically with mode 0600.

    Each data file carries the digest of what it is the machine code of (the index, the source
    stamp and numba's key: signature, CPU, dependencies; ``cache.frame``): a data file swapped
    or copied from another kernel or signature is a miss with one warning, never run."""

    def save(self, key, data):
        overloads = self._load_index()
        name = overloads.get(key)
        if name is None:
            taken = set(overloads.values())
            name = next(n for n in map(self._data_name, itertools.count(1)) if n not in taken)
            overloads[key] = name
            self._save_index(overloads)
        cache.atomic_write(self._data_path(name), cache.frame(self._label(key), self._dump(data)))

    def load(self, key):
        try:
            name = self._load_index().get(key)
            if name is None:
                return None
            path = self._data_path(name)
            raw = cache.read_private(path)
            payload = None if raw is None else cache.unframe(self._label(key), raw, path)
            return None if payload is None else pickle.loads(payload)
        except Exception:  # a damaged index or data pickle: as if absent, numba recompiles
            return None

    def _label(self, key) -> str:
        """What a data file must be the entry of; numba's key prints the same in every process
        (types, CPU name and features, hashes), an address would not and is left out."""
        text = repr(key)
        return f"numba|{self._index_name}|{self._source_stamp.hex()}|{'' if ' at 0x' in text else text}"

    def _load_index(self):
        raw = cache.read_private(self._index_path)
        if raw is None:
            return {}
        try:
            stream = io.BytesIO(raw)
            if pickle.load(stream) != self._version:
                return {}
            stamp, overloads = pickle.loads(stream.read())
        except Exception:  # a damaged index: as if absent (saving then writes a fresh one)
            return {}
        return overloads if stamp == self._source_stamp and isinstance(overloads, dict) else {}

    @contextmanager
    def _open_for_write(self, filepath):
        buffer = io.BytesIO()
        yield buffer
        cache.atomic_write(filepath, buffer.getvalue())


def ready_to_link(target_context) -> None:
    """What linking cached machine code needs from numba's CPU context: its runtime's symbols (NRT).

    numba's ``Cache.load_overload`` refreshes the whole target context first, which imports and
    installs every lowering registry (numba.np.arraymath, linalg and through it scipy.linalg,
    numba.typed, ...): 1.5-3 s of a warm process's first run, none of it used to link an object
    file.  The C helpers and exception symbols are installed when the context is made; the
    threading layer of parallel entries comes back through each entry's own ``reload_init``.  A
    real compile still refreshes everything (numba's compiler does it itself)."""
    rtsys.initialize(target_context)


class PrivateFunctionCache(caching.FunctionCache):
    """A dispatcher's cache in opdsl's folder (set as ``dispatcher._cache``)."""

    def __init__(self, py_func, folder: Path, stamp: bytes, module_stem: str):
        self._name = repr(py_func)
        self._py_func = py_func
        impl = caching.CompileResultCacheImpl.__new__(caching.CompileResultCacheImpl)
        impl._lineno = py_func.__code__.co_firstlineno
        impl._locator = _PinnedLocator(py_func, folder, stamp)
        impl._filename_base = impl.get_filename_base(f"{module_stem}.{py_func.__qualname__}",
                                                     getattr(sys, "abiflags", ""))
        self._impl = impl
        self._cache_path = str(folder)
        self._cache_file = _PrivateIndex(cache_path=str(folder), filename_base=impl.filename_base,
                                         source_stamp=stamp)
        self.enable()

    def load_overload(self, sig, target_context):
        """numba's own ``load_overload`` less its ``target_context.refresh()``: see ``ready_to_link``."""
        if not cache.enabled() or not self._enabled:
            return None
        try:
            ready_to_link(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # data that unpickled but does not rebuild: recompile
            return None

    def save_overload(self, sig, data):
        if not cache.enabled():
            return
        try:
            super().save_overload(sig, data)
        except OSError as e:  # a full disk: warn once, keep the compiled code in memory
            cache.write_failed(e, f"numba machine code for {self._py_func.__qualname__}")


def attach(module, folder: Path, stamp: bytes, module_stem: str) -> int:
    """Give every numba dispatcher defined by ``module`` a private cache; returns how many."""
    n = 0
    for value in vars(module).values():
        if isinstance(value, Dispatcher) and getattr(value.py_func, "__module__", None) == module.__name__:
            value._cache = PrivateFunctionCache(value.py_func, folder, stamp, module_stem)
            n += 1
    return n


def cached(dispatcher, sig) -> bool:
    """Whether the disk cache holds ``dispatcher``'s machine code for ``sig`` (its index lists it),
    without loading or compiling anything: the compile workers skip what is there.  A yes is
    remembered on the dispatcher (a model prepares ~70 launches of ~10 entries: each asked read
    and unpickled the index again); an entry removed since then is compiled when it is run."""
    own = getattr(dispatcher, "_cache", None)
    if not isinstance(own, PrivateFunctionCache) or not cache.enabled():
        return False
    known = own.__dict__.setdefault("_known_on_disk", set())
    if sig in known:
        return True
    try:
        key = own._index_key(sig, dispatcher.targetctx.codegen())
        found = key in own._cache_file._load_index()
    except Exception:  # an unreadable index reads as a miss, as when loading
        return False
    if found:
        known.add(sig)
    return found


# --------------------------------------------------------------------------- NRT's own library

_NRT_HEAD = struct.Struct("<Q")  # length of the object code; the shared module's bitcode follows


def _nrt_entry(codegen) -> str:
    """The cache file name of NRT's library for this numba, llvmlite and CPU (codegen's magic tuple:
    target triple, CPU name and features, what numba keys kernels' machine code by) and the numba
    settings its module or machine code depend on (NRT debug prints, word size, optimization level)."""
    import llvmlite
    import numba
    from numba.core import config
    settings = (config.DEBUG_NRT, config.DEBUG_NRT_STACK_LIMIT, config.MACHINE_BITS, config.OPT)
    key = f"{numba.__version__}|{llvmlite.__version__}|{codegen.magic_tuple()!r}|{settings!r}"
    return f"nrt-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:32]}.bin"


def _nrt_functions(ctx):
    """``nrtdynmod.compile_nrt_functions`` with its machine code kept in opdsl's cache.

    Every process that runs numba code with NRT (all of opdsl's kernels) has numba generate NRT's
    few atomic and refcount functions with LLVM at its first link: 0.17-0.34 s of a warm
    process's first run (loaded 2-core machine), the same code every time.  Its object code is
    stored like a kernel's (``cache.store``: owner-checked, framed with its key and digest) and
    loaded in ~2 ms; anything unusable falls back to numba's compile."""
    codegen = ctx.codegen()
    try:
        name = _nrt_entry(codegen)
    except Exception:  # pragma: no cover - an unexpected codegen: numba's own path
        return _compile_nrt_functions(ctx)
    raw = cache.load(CACHE_TAG, name) if cache.enabled() else None
    if raw is not None and len(raw) >= _NRT_HEAD.size:
        (size,) = _NRT_HEAD.unpack_from(raw)
        if _NRT_HEAD.size + size <= len(raw):
            try:
                return codegen.unserialize_library(
                    ("nrt", "object", (raw[_NRT_HEAD.size:_NRT_HEAD.size + size], raw[_NRT_HEAD.size + size:])))
            except Exception:  # bytes that do not link: compile as numba does
                pass
    ir_mod, library = nrtdynmod.create_nrt_module(ctx)
    library.enable_object_caching()
    library.add_ir_module(ir_mod)
    library.finalize()
    link_once.machine_code_now(library)  # created inside an entry's compile: its object code is saved
    if cache.enabled():
        _, _, (obj, bitcode) = library.serialize_using_object_code()
        cache.store(CACHE_TAG, name, _NRT_HEAD.pack(len(obj)) + bytes(obj) + bytes(bitcode))
    return library


_compile_nrt_functions = nrtdynmod.compile_nrt_functions
nrtdynmod.compile_nrt_functions = _nrt_functions  # rtsys.initialize looks it up on the module
