"""A compiled model's plan on disk, so a warm ``load_onnx`` of a known model reads it instead of
building it: the graph after every pass (folded, fused, formats assigned), each node's selected
kernel, and the nodes' launch plans (launch_plan.py).  The kernels themselves come from the
compile cache as always; what is skipped is parsing the ONNX file into a graph, the passes,
kernel selection and asking each op for its plan.

The entry lives in the compile cache's ``plans`` folder under the same trust rules (backends/
cache.py, docs/cache.md: a private folder, checksummed entries written atomically).  It is an
``.opdsl`` container (artifact_format.py) of up to three sections: the pickled graph and plans
(sha256), their arrays raw on 64-byte boundaries (CRC-32), mapped in place on a hit (as
2 MiB pages: artifact_format.PageWriter) -- packed weights included, so a hit neither copies
nor packs them; a miss returns the model restored as a hit would be (``on_huge_pages``) -- and, as in an artifact
(artifact_save.py), the graph constants only those packed copies stand for, in a lazy section a
hit does not read (lazy_constants.py: read and checked on first use).  Its key is
the sha256 of the model's bytes, the load options, the backend, the settings read from the
environment (fusion, in-place), and the toolchain: opdsl's version, the numba, llvmlite, numpy and
Python versions and a digest of the content of opdsl's own source (ops/, dsl/, backends/: an op's
code; not file times, so a fresh clone of the same code keeps its entries and artifacts).  Any
change is another key, so a stale entry is never read; a damaged one is a miss with one warning.

Models loaded with ``packages`` (their ops' code is not in the digest) and models given as an
``onnx.ModelProto`` with external data are not cached.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import os
import pickle
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np

from backends import cache, host
from dsl import config
from dsl.opgraph import artifact_format, artifact_save, fusion, lazy_constants, model_state, registry
from dsl.opgraph.model import Model
from dsl.version import __version__

FOLDER = "plans"
FORMAT = 4              # bumped when the entry's layout changes (3: an .opdsl container, packed weights kept;
                        # 4: the constants only packed copies stand for in a lazy section)

stats = {"hits": 0, "misses": 0, "stores": 0}  # what this process did (tests, benchmarks)
# An entry of this many bytes or more (light_resnet50: 208 MB, ~0.25 s CPU and 0.4-1 s to write)
# is written by a background thread: load_onnx returns without waiting for the disk.
BACKGROUND_BYTES = 32 << 20
_WRITING: Dict[str, threading.Thread] = {}  # entry name -> the thread writing it
_DIGEST: Dict[str, str] = {}
_LOCK = threading.Lock()


def source_roots() -> list:
    """The folders whose Python sources ``code_digest`` covers by default: opdsl's packages."""
    here = Path(__file__).resolve().parents[2]
    return [here / "ops", here / "dsl", here / "backends"]


def code_digest(roots=None) -> str:
    """sha256 over the path and the content of every ``.py`` file of opdsl's packages (or of
    ``roots``): an edited op changes it, a clean clone or a reinstall (new modification times,
    the same bytes) does not.  Computed once per process (~250 files, 2.4 MB: ~30 ms)."""
    if roots is None:
        roots = source_roots()
    key = "|".join(str(r) for r in roots)
    with _LOCK:
        hit = _DIGEST.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    for root in roots:
        for p in sorted(Path(root).rglob("*.py")):
            h.update(f"{p.relative_to(root).as_posix()}|{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    with _LOCK:
        _DIGEST[key] = h.hexdigest()
    return _DIGEST[key]


def compiler_versions() -> Dict[str, str]:
    """numba's and llvmlite's versions from their installed metadata, without importing them (~0.5-1.5
    s of numba's import then overlaps reading a plan entry or an artifact instead of preceding it);
    the modules' own ``__version__`` when they are not installed as distributions."""
    with _LOCK:
        hit = _DIGEST.get("<compilers>")
    if hit is None:
        import importlib.metadata
        found = {}
        for name in ("numba", "llvmlite"):
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                found[name] = importlib.import_module(name).__version__
        hit = f"numba {found['numba']}; llvmlite {found['llvmlite']}"
        with _LOCK:
            _DIGEST["<compilers>"] = hit
    return dict(_parts(hit))


def _parts(key: str):
    for part in key.split("; "):
        name, _, value = part.partition(" ")
        yield name, value


def toolchain_key() -> str:
    """What a cached plan was made by: opdsl and its compilers, and opdsl's source."""
    v = compiler_versions()
    return (f"opdsl {__version__}; numba {v['numba']}; llvmlite {v['llvmlite']}; "
            f"numpy {np.__version__}; python {sys.version_info[:3]}; code {code_digest()}")


def import_compilers() -> None:
    """Import numba (what a numba model's first launches link against) in this thread."""
    importlib.import_module("numba")


def source_toolchain() -> Dict[str, str]:
    """The parts of ``toolchain_key`` known without importing numba (opdsl, numpy, Python, the
    source digest): what decides whether a pickled graph of ours loads in this process."""
    return {"opdsl": __version__, "numpy": np.__version__, "python": str(sys.version_info[:3]), "code": code_digest()}


def registry_digest(names) -> Optional[str]:
    """sha256 of the user-registered ops a model can reach -- those registered under a (domain,
    op_type) in ``names`` (the model's nodes) and those a fusion rule names -- and of their source
    files and of users' fusion rules; the library's own ops and rules are covered by
    ``code_digest``.  None when one of them has no source file (a notebook's op: its code is not
    known, so no plan is cached).  Ops the model does not name do not matter: a notebook op of
    another domain leaves this model cacheable."""
    names = {(registry.normalize_domain(d), t) for d, t in names}
    fused = {c for key in fusion.rule_keys() for c in key}
    h = hashlib.sha256()
    files = set()
    for cls in registry.registered_now():
        if registry.is_builtin(cls) or ((cls.domain, cls.op_type) not in names and cls not in fused):
            continue  # the library's ops (code_digest covers them), or ops this model cannot reach
        h.update(f"{cls.domain}|{cls.op_type}|{cls.since}|{cls.until}|{cls.__module__}.{cls.__qualname__}\n".encode())
        files.add(_source_file(cls))
    for fn in fusion.rule_functions():
        f = _source_file(fn)
        if not _in_library(f):
            h.update(f"rule {fn.__module__}.{fn.__qualname__}\n".encode())
            files.add(f)
    if None in files:
        return None
    for f in sorted(files):
        try:
            h.update(Path(f).read_bytes())
        except OSError:
            return None
    return h.hexdigest()


def _source_file(obj) -> Optional[str]:
    try:
        return inspect.getsourcefile(obj)
    except (TypeError, OSError):  # built in, or defined in a notebook's __main__ (no file)
        return None


def _in_library(file: Optional[str]) -> bool:
    if file is None:
        return False
    root = Path(__file__).resolve().parents[2]
    try:
        rel = Path(file).resolve().relative_to(root)
    except ValueError:
        return False
    return rel.parts[0] in ("ops", "dsl", "backends")


def model_op_names(data: bytes) -> Optional[set]:
    """The (domain, op_type) of every node of the ONNX model ``data`` (graph attributes and
    model-local functions included), or None if it does not parse."""
    try:
        import onnx
        proto = onnx.load_model_from_string(data)
    except Exception:
        return None
    names = set()

    def walk(nodes):
        for n in nodes:
            names.add((n.domain, n.op_type))
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g.node)
                for g in a.graphs:
                    walk(g.node)
    walk(proto.graph.node)
    for f in proto.functions:
        walk(f.node)
    return names


def model_bytes(model) -> Optional[bytes]:
    """The bytes that define ``model`` (a path, bytes, or ModelProto), or None when they do not
    say everything (external data of a proto) or it cannot be read."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        try:
            return Path(model).read_bytes()  # external data files are named in it; see entry_key
        except OSError:
            return None
    serialize = getattr(model, "SerializeToString", None)
    if serialize is None:
        return None
    if any(t.data_location == 1 for t in model.graph.initializer):  # EXTERNAL
        return None
    return serialize()


def entry_key(data: bytes, options: dict, base_dir: Optional[str]) -> str:
    """The cache entry's name for these model bytes and load options.  The user ops the model
    reaches are checked against the entry's own record of them (``registry_digest``), so
    registering an unrelated op changes nothing."""
    h = hashlib.sha256()
    h.update(data)
    h.update(repr(sorted(options.items())).encode())
    h.update(repr((config.fusion_enabled(), config.inplace_all(), base_dir)).encode())
    h.update(toolchain_key().encode())
    h.update(machine_key().encode())
    h.update(f"format {FORMAT}".encode())
    return f"model-{h.hexdigest()}.plan"


def machine_key() -> str:
    """The CPU a plan was made for: plans pick tiles and kernels per target (AVX-512 or AVX2 tiles,
    AMX or VNNI int8 convolutions), so a cache folder shared with another kind of CPU must not hand
    it this one's plan (it would run, correctly, on the other's slower fallbacks)."""
    facts = host.host()
    return f"cpu {facts.cpu}; features {','.join(sorted(facts.features))}"


def cached_load(model, options: dict, base_dir: Optional[str], build: Callable[[], Model]) -> Model:
    """``build()``'s model, or the one the cache holds for these bytes and options (then stored)."""
    if os.environ.get("OPDSL_PLAN_CACHE", "1") == "0" or not cache.enabled():
        return build()
    _start_importing("numba")  # the key names numba's version: its import overlaps reading and hashing the model
    data = model_bytes(model)
    if data is None:
        return build()
    name = entry_key(data, dict(options, backend=options.get("backend") or config.default_backend()), base_dir)
    model_obj = _read(name)
    if model_obj is not None:
        stats["hits"] += 1
        return model_obj
    stats["misses"] += 1
    built = build()
    draft = _write(name, built, data)
    if draft is not None and config.huge_pages():
        return on_huge_pages(draft) or built
    return built


def on_huge_pages(draft: dict) -> Optional[Model]:
    """The model of a miss restored from the entry just drafted, as a hit restores it, its packed
    weights copied into one buffer on 2 MiB pages (artifact_format.private_buffer; ~0.1-0.4 s
    for light_resnet50's 100 MB, beside a cold load's ~13 s of compiling).
    Built, they were numpy's arrays, those under 4 MiB on 4 KiB pages: the process that
    compiled light_resnet50 ran it 4-11 % slower than one that loaded it from the cache
    (benchmarks/bench_pages.py, "built").  None under one huge page of weights (nothing to gain)
    or if the draft does not restore (the built model is used)."""
    size = artifact_format.size_of(draft["weights"])
    if size < artifact_format.HUGE_BUFFER_BYTES:
        return None
    try:
        buf, at = artifact_format.private_buffer(size), 0
        for piece in draft["weights"]:
            n = memoryview(piece).nbytes
            buf[at:at + n] = memoryview(piece).cast("B")
            at += n
        unpickler = pickle.Unpickler(io.BytesIO(draft["graph"]), buffers=[buf[a:a + n] for a, n in draft["spans"]])
        unpickler.persistent_load = lambda pid: draft["lazy"][pid[1]]  # ("constant", index, shape, dtype)
        return model_state.restore(unpickler.load()["state"], Model)
    except Exception:  # noqa: BLE001  (a state that does not restore: keep the built model)
        return None


def _start_importing(module: str) -> None:
    """Import ``module`` in a background thread unless it is imported already (reading and hashing
    a model file let go of the GIL, so ~0.3 s of numba's ~0.5 s import runs beside them).  A
    failure is left for the caller's own import to raise."""
    if module in sys.modules:
        return

    def run():
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001  (the calling thread's import reports it)
            pass
    threading.Thread(target=run, name=f"opdsl-import-{module}", daemon=True).start()


# --------------------------------------------------------------------------- the entry

def _write(name: str, model: Model, data: bytes) -> Optional[dict]:
    """Store ``model``'s entry (in the background when it is big); its draft (artifact_save), or
    None when the model is not cached."""
    names = model_op_names(data)
    ops = None if names is None else registry_digest(names)
    if ops is None:  # an op without a source file: its code is not known, nothing is cached
        return None
    try:  # every launch plan, packed weights included: a hit packs nothing; arrays out of band, the
        # constants only the packed copies stand for in a lazy section (read on first use)
        draft = artifact_save.draft_sections(model, lambda state: {"ops": sorted(names), "ops_digest": ops,
                                                                    "state": state})
    except Exception:  # an op or kernel that does not pickle: this model is not cached
        return None
    sections = {"graph": draft["graph"], "weights": draft["weights"]}
    if draft["constant_spans"]:
        sections["constants"] = draft["constants"]

    def store() -> None:
        try:
            target = cache.path(FOLDER, name)
            artifact_format.write(target, {"key": name, "weights": draft["spans"], "constants": draft["constant_spans"]},
                                  sections, fast=("weights",), lazy=("constants",), mode=0o600)
        except cache.CacheUnusable:
            return
        except OSError as e:  # a full disk: one warning, then memory only
            cache.write_failed(e, f"{FOLDER}/{name}")
            return
        stats["stores"] += 1

    if sum(artifact_format.size_of(chunks) for chunks in sections.values()) < BACKGROUND_BYTES:
        store()
        return draft
    # the sections hold the packed weights and constants themselves, which nothing changes after
    # the build: the file is written beside the caller's first run, not before it
    writer = threading.Thread(target=store, name=f"opdsl-plan-cache-{name[:12]}")  # joined at exit (not a daemon)
    with _LOCK:
        _WRITING[name] = writer
    writer.start()
    return draft


def wait_for_writes() -> None:
    """Wait until every plan cache entry this process is writing is on disk (tests, benchmarks)."""
    with _LOCK:
        writers = list(_WRITING.values())
        _WRITING.clear()
    for writer in writers:
        writer.join()


def _read(name: str) -> Optional[Model]:
    with _LOCK:
        writer = _WRITING.pop(name, None)
    if writer is not None:  # this process is still writing it
        writer.join()
    try:
        p = cache.path(FOLDER, name)
        existed = p.exists()
    except (cache.CacheUnusable, OSError, ValueError):
        return None
    if not existed:
        return None
    try:
        # checked and trusted (this user's private folder) or ArtifactError; mapped, not copied: the
        # entry is only ever replaced by a rename.  Written in whole huge pages and mapped with the
        # huge-page advice (artifact_format.PageWriter), its weights are mapped as 2 MiB pages
        art = artifact_format.read(p, mapped=True)
        if art.header.get("key") != name:
            why = "it is the entry of another key (a swapped or copied file)"
        else:
            unpickler = pickle.Unpickler(io.BytesIO(art.section("graph")), buffers=art.weight_buffers())
            unpickler.persistent_load = lazy_constants.ConstantRefs(art)
            entry = unpickler.load()
            if registry_digest(entry["ops"]) != entry["ops_digest"]:
                return None  # the user ops this model reaches changed: built again, entry replaced
            return model_state.restore(entry["state"], Model)
    except artifact_format.ArtifactError as e:
        why = f"it is damaged ({e})"
    except Exception as e:  # written by a build whose classes no longer match
        why = f"it does not load ({type(e).__name__}: {e})"
    warnings.warn(cache.CacheEntryWarning(f"model plan cache entry {name}: {why}; the model is built again "
                                          f"and the entry replaced"), stacklevel=3)
    cache.discard(p)
    return None
