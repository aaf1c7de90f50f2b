"""``dsl.load_model(path)``: open an ``.opdsl`` artifact (artifact_save.py) as a ``dsl.Model``.

On the toolchain and CPU it was made for, nothing is parsed, folded, planned from scratch or
compiled: the carried compile-cache entries are put into this user's cache (entries already
there with the same bytes are left alone), the graph is unpickled with its weights read in place
from the file, and the kernels' first launches load their machine code from the cache.

Anything else is never run blindly (docs/onnx.md, "Ahead-of-time artifacts"):

* another container format, a wrong magic, a truncated or corrupted section: ``ArtifactError``
  (artifact_format.py), before anything is unpickled;
* a file others can write or another user's file: ``ArtifactError`` unless ``trusted=True``
  (unpickling the graph runs code, as any pickle does);
* another opdsl version or toolchain (numba, llvmlite, numpy, Python, opdsl's source): the model
  is rebuilt from its carried ONNX source with one ``ArtifactWarning``, or refused when the file
  carries none or ``on_mismatch="refuse"``;
* another CPU or device (its features differ): the carried code is not installed and the stored
  launch plans are dropped; the graph is used (its deferred constants read from the file and
  checked) and its kernels are planned and compiled for this CPU on first run, with one
  ``ArtifactWarning`` (or refused with ``on_mismatch="refuse"``).

Graph constants that only packed copies stand for at run time are not read at all on the same
CPU (lazy_constants.py): they are read, and checked, the first time something needs them.
"""
from __future__ import annotations

import concurrent.futures
import io
import json
import pickle
import warnings
from typing import Optional, Sequence

from backends import base, cache
from dsl.opgraph import artifact_format, lazy_constants, model_state, plan_cache
from dsl.opgraph.artifact_format import ArtifactError, ArtifactWarning
from dsl.opgraph.model import Model

ON_MISMATCH = ("recompile", "refuse")

stats = {"installed": 0, "kept": 0}  # cache entries written / already there (tests, benchmarks)


def target_facts(backend: str) -> dict:
    """The device facts machine code for ``backend`` depends on (``dsl.target``)."""
    if backend == "interpreter":
        return {}
    from dsl.runtime.target import target
    t = target(backend)
    return {"device": t.device, "cpu": t.cpu, "features": sorted(t.features)}


def load_model(path, trusted: bool = False, on_mismatch: str = "recompile", packages: Sequence = (),
               mmap: bool = False) -> Model:
    """The model the ``.opdsl`` file at ``path`` holds.  ``trusted``: load a file that others can
    write or another user owns (it runs code, like a pickle).  ``on_mismatch``: "recompile" (a
    file for another toolchain is rebuilt from its ONNX source, one for another CPU compiles its
    kernels again, each with one ``ArtifactWarning``) or "refuse" (``ArtifactError``).
    ``packages``: the op packages the model's custom ops come from (``dsl.register_package``;
    default: the folders recorded when it was saved).  ``mmap``: map the file copy-on-write
    instead of reading it (no copy of the weights; processes loading one file share its pages);
    the file must then not be rewritten in place while the model lives (``opdsl compile -o``
    replaces it by a rename, which is safe; ``cp`` over it is not)."""
    if on_mismatch not in ON_MISMATCH:
        raise ValueError(f"on_mismatch={on_mismatch!r}: expected one of {', '.join(map(repr, ON_MISMATCH))}")
    # the file is read and checked (readv and sha256 let go of the GIL) and its graph unpickled
    # (importing the op modules it names) in a thread while this one imports numba
    reading = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="opdsl-artifact")
    try:
        pending = reading.submit(_read_and_unpickle, path, trusted, plan_cache.source_toolchain(), bool(packages),
                                 bool(mmap))
        plan_cache.import_compilers()
        toolchain = plan_cache.toolchain_key()
        art, unpickled = pending.result()
    finally:
        reading.shutdown(wait=True)
    header = art.header
    if header.get("draft"):
        raise ArtifactError(f"{art.path}: an unfinished draft, not an artifact")
    packages = list(packages) or list(header.get("packages") or ())
    register_packages(packages)
    made_by = header.get("toolchain")
    if made_by != toolchain:
        return _rebuild(art, on_mismatch, f"it was made by another toolchain ({_diff(made_by)})", packages)
    backend = header.get("backend")
    if not isinstance(backend, str) or not base.is_known(backend):
        raise ArtifactError(f"{art.path}: its header names the backend {backend!r}; this opdsl has "
                            f"{', '.join(base.names())}")
    here = target_facts(backend)
    if header.get("target") != here:
        what = "CPU" if backend == "numba" else "device"
        why = f"it was compiled for another {what} ({_target_diff(header.get('target'), here)})"
        if on_mismatch == "refuse":
            raise ArtifactError(f"{art.path}: refused, {why}")
        warnings.warn(ArtifactWarning(f"{art.path}: {why}; its kernels compile again for this one on first run"),
                      stacklevel=2)
        state = _unpickle(art) if unpickled is None else _raised(unpickled)
        # the stored plans (tiles, packed layouts) were chosen for that CPU: planned again here
        # from the graph's constants, read from the file now
        lazy_constants.load_all(state["graph"])
        return _restore(art, dict(state, plans=[]))
    install_code(art)
    if unpickled is None:
        return open_state(art)
    return _restore(art, _raised(unpickled))


def _raised(unpickled):
    state, error = unpickled
    if error is not None:
        raise error
    return state


def _read_and_unpickle(path, trusted: bool, ours: dict, has_packages: bool, mapped: bool = False):
    """(checked artifact, (graph state, error) or None): the graph is unpickled here only when the
    file is no draft, carries no op packages (they register first, in the calling thread) and was
    made by this opdsl, numpy, Python and source -- what decides whether our pickle loads; a
    numba or llvmlite mismatch found afterwards discards it and rebuilds, as before."""
    art = artifact_format.read(path, trusted, mapped=mapped)
    header = art.header
    theirs = dict(_parts(header.get("toolchain") or ""))
    if has_packages or header.get("draft") or header.get("packages") or \
            any(theirs.get(k) != v for k, v in ours.items()):
        return art, None
    try:
        return art, (_unpickle(art), None)
    except ArtifactError as e:
        return art, (None, e)


def register_packages(packages) -> None:
    """Register the op packages an artifact's custom ops come from (before its graph is unpickled)."""
    if packages:
        from dsl.package import register_package
        for p in packages:
            register_package(p)


def open_state(art) -> Model:
    """The model of a checked artifact's ``graph`` and ``weights`` sections."""
    return _restore(art, _unpickle(art))


def _restore(art, state) -> Model:
    try:
        return model_state.restore(state, Model)
    except ArtifactError:
        raise
    except Exception as e:
        raise ArtifactError(f"{art.path}: section 'graph' does not load in this process ({type(e).__name__}: {e}); "
                            "are the op packages it uses registered (packages=...)?") from None


def _unpickle(art):
    """The pickled model state of a checked artifact (its weights read in place, its deferred
    constants left in the file until used)."""
    buffers = art.weight_buffers()
    try:
        unpickler = pickle.Unpickler(io.BytesIO(art.section("graph")), buffers=buffers)
        unpickler.persistent_load = lazy_constants.ConstantRefs(art)
        return unpickler.load()
    except ArtifactError:
        raise
    except Exception as e:
        raise ArtifactError(f"{art.path}: section 'graph' does not load in this process ({type(e).__name__}: {e}); "
                            "are the op packages it uses registered (packages=...)?") from None


def install_code(art) -> int:
    """Put the carried cache entries into this user's compile cache; returns how many were written.
    Without a usable disk cache nothing is written and the kernels compile in memory."""
    if not cache.enabled():
        if art.header.get("code"):
            warnings.warn(ArtifactWarning(f"{art.path}: the compile cache is not used ({cache.unusable_reason()}); "
                                          "the model's kernels compile in memory on first run"), stacklevel=3)
        return 0
    code = art.section("code")
    written = 0
    for folder, name, at, size in art.header.get("code", ()):
        if folder not in cache.KNOWN_FOLDERS or folder == "plans":
            raise ArtifactError(f"{art.path}: section 'code' names the folder {folder!r}, not a code folder")
        try:
            target = cache.path(folder, name)  # a plain file name, or ValueError
            cache.backend_dir(folder)
        except ValueError:
            raise ArtifactError(f"{art.path}: section 'code' holds an entry named {name!r}") from None
        except cache.CacheUnusable:
            return written
        if code is None or at < 0 or size < 0 or at + size > len(code):
            raise ArtifactError(f"{art.path}: its header's entry {folder}/{name} lies outside section 'code'")
        data = code[at:at + size]
        held = cache.read_private(target)
        # bytes against bytes: memcmp (bytes == memoryview compares item by item, ~10 ms of a load)
        if held is not None and len(held) == size and held == bytes(data):
            stats["kept"] += 1
            continue
        try:
            cache.atomic_write(target, data)
        except OSError as e:
            cache.write_failed(e, f"{folder}/{name}")
            return written
        written += 1
        stats["installed"] += 1
    return written


def _rebuild(art, on_mismatch: str, why: str, packages) -> Model:
    source = art.section("source")
    if on_mismatch == "refuse" or source is None:
        hint = "" if source is not None else " and it carries no ONNX source to rebuild from"
        raise ArtifactError(f"{art.path}: refused, {why}{hint}; compile it again with this opdsl "
                            "(`opdsl compile MODEL.onnx -o MODEL.opdsl`)")
    warnings.warn(ArtifactWarning(f"{art.path}: {why}; the model is rebuilt from the ONNX source it carries"),
                  stacklevel=3)
    from dsl.onnx.load import load_onnx
    options = dict(art.header.get("load_options") or {})
    return load_onnx(bytes(source), packages=packages, **options)


def _diff(made_by: Optional[str]) -> str:
    here = dict(_parts(plan_cache.toolchain_key()))
    there = dict(_parts(made_by or ""))
    changed = [f"{k} {there.get(k, '?')} here {v}" for k, v in here.items() if there.get(k) != v]
    return "; ".join(changed) or "unknown"


def _parts(key: str):
    for part in key.split("; "):
        name, _, value = part.partition(" ")
        yield name, value


def _target_diff(there: Optional[dict], here: dict) -> str:
    there = there or {}
    out = []
    for k in ("device", "cpu"):
        if there.get(k) != here.get(k):
            out.append(f"{k} {there.get(k)!r}, here {here.get(k)!r}")
    missing = sorted(set(there.get("features", ())) - set(here.get("features", ())))
    if missing:
        out.append("features missing here: " + ", ".join(missing[:8]))
    extra = sorted(set(here.get("features", ())) - set(there.get("features", ())))
    if extra and not missing:
        out.append("features only here: " + ", ".join(extra[:8]))
    return "; ".join(out) or json.dumps(there)
