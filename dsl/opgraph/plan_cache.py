"""A compiled model's plan on disk, so a warm ``load_onnx`` of a known model reads it instead of
building it: the graph after every pass (folded, fused, formats assigned), each node's selected
kernel, and the nodes' launch plans (launch_plan.py).  The kernels themselves come from the
compile cache as always; what is skipped is parsing the ONNX file into a graph, the passes,
kernel selection and asking each op for its plan.

The entry lives in the compile cache's ``plans`` folder under the same trust rules (backends/
cache.py, docs/cache.md: a private folder, checksummed entries written atomically).  Its key is
the sha256 of the model's bytes, the load options, the backend, the settings read from the
environment (fusion, in-place), and the toolchain: opdsl's version, the numba, llvmlite, numpy and
Python versions and a digest of opdsl's own source (ops/, dsl/, backends/: an op's code).  Any
change is another key, so a stale entry is never read; a damaged one is a miss with one warning.

Models loaded with ``packages`` (their ops' code is not in the digest) and models given as an
``onnx.ModelProto`` with external data are not cached.  Launch plans holding arrays larger than
``MAX_FIXED_BYTES`` (packed weights) are left out of the entry and asked again on load.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import pickle
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np

from backends import cache
from dsl import config
from dsl.opgraph import registry
from dsl.opgraph.launch_plan import Launch, Ref
from dsl.opgraph.model import Model
from dsl.version import __version__

FOLDER = "plans"
FORMAT = 1              # bumped when the entry's layout changes
MAX_FIXED_BYTES = 1 << 20  # a launch plan holding a larger fixed array is not stored
_IMPL = "<impl>"       # a launch of the node's selected kernel: the kernel is not pickled

stats = {"hits": 0, "misses": 0, "stores": 0}  # what this process did (tests, benchmarks)
_DIGEST: Dict[str, str] = {}
_LOCK = threading.Lock()


def code_digest(roots=None) -> str:
    """sha256 over the path, size and modification time of every ``.py`` file of opdsl's
    packages (or of ``roots``): an edited op changes it (as Python's own .pyc check does),
    at the cost of a stat per file (~300 files: a few ms)."""
    if roots is None:
        here = Path(__file__).resolve().parents[2]
        roots = [here / "ops", here / "dsl", here / "backends"]
    key = "|".join(str(r) for r in roots)
    with _LOCK:
        hit = _DIGEST.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    for root in roots:
        for p in sorted(Path(root).rglob("*.py")):
            st = p.stat()
            h.update(f"{p.relative_to(root)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    with _LOCK:
        _DIGEST[key] = h.hexdigest()
    return _DIGEST[key]


def toolchain_key() -> str:
    """What a cached plan was made by: opdsl and its compilers, and opdsl's source."""
    import llvmlite
    import numba
    return (f"opdsl {__version__}; numba {numba.__version__}; llvmlite {llvmlite.__version__}; "
            f"numpy {np.__version__}; python {sys.version_info[:3]}; code {code_digest()}")


def registry_digest() -> Optional[str]:
    """sha256 of the ops registered outside opdsl's library (users' ops and overrides, in
    registration order) and of their source files; the library's own ops are covered by
    ``code_digest``.  None when one has no source file (a notebook's op: its code is not known,
    so no plan is cached)."""
    h = hashlib.sha256()
    files = set()
    for cls in registry.registered_now():
        if registry.is_builtin(cls):
            continue  # the library's ops: code_digest covers them, loaded or not
        h.update(f"{cls.domain}|{cls.op_type}|{cls.since}|{cls.until}|{cls.__module__}.{cls.__qualname__}\n".encode())
        try:
            files.add(inspect.getsourcefile(cls))
        except TypeError:
            return None
    for f in sorted(files):
        try:
            h.update(Path(f).read_bytes())
        except (OSError, TypeError):
            return None
    return h.hexdigest()


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


def entry_key(data: bytes, options: dict, base_dir: Optional[str]) -> Optional[str]:
    """The cache entry's name for these model bytes and load options (None: not cacheable)."""
    ops = registry_digest()
    if ops is None:
        return None
    h = hashlib.sha256()
    h.update(ops.encode())
    h.update(data)
    h.update(repr(sorted(options.items())).encode())
    h.update(repr((config.fusion_enabled(), config.inplace_all(), base_dir)).encode())
    h.update(toolchain_key().encode())
    h.update(f"format {FORMAT}".encode())
    return f"model-{h.hexdigest()}.plan"


def cached_load(model, options: dict, base_dir: Optional[str], build: Callable[[], Model]) -> Model:
    """``build()``'s model, or the one the cache holds for these bytes and options (then stored)."""
    if os.environ.get("OPDSL_PLAN_CACHE", "1") == "0" or not cache.enabled():
        return build()
    data = model_bytes(model)
    name = None if data is None else entry_key(
        data, dict(options, backend=options.get("backend") or config.default_backend()), base_dir)
    if name is None:
        return build()
    model_obj = _read(name)
    if model_obj is not None:
        stats["hits"] += 1
        return model_obj
    stats["misses"] += 1
    built = build()
    _write(name, built)
    return built


# --------------------------------------------------------------------------- the entry

def _write(name: str, model: Model) -> None:
    try:
        payload = pickle.dumps(_state(model), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an op or kernel that does not pickle: this model is not cached
        return
    if cache.store(FOLDER, name, payload) is not None:
        stats["stores"] += 1


def _read(name: str) -> Optional[Model]:
    try:
        existed = cache.path(FOLDER, name).exists()
    except (cache.CacheUnusable, OSError, ValueError):
        return None
    if not existed:
        return None
    payload = cache.load(FOLDER, name)
    if payload is not None:
        try:
            return _restore(pickle.loads(payload))
        except Exception as e:  # written by a build whose classes no longer match
            why = f"it does not load ({type(e).__name__}: {e})"
    else:
        why = "it is damaged (checksum)"
    warnings.warn(cache.CacheEntryWarning(f"model plan cache entry {name}: {why}; the model is built again "
                                          f"and the entry replaced"), stacklevel=3)
    cache.discard(cache.path(FOLDER, name))
    return None


def _state(model: Model) -> dict:
    """What rebuilds ``model``: its graph and options, kernel names, picklable launch plans."""
    names = {}
    for n in model.graph.nodes:
        impl = model._impls[n.name]
        names[n.name] = next(k for k, v in n.op.kernels.items() if v is impl)
    plans = []
    impl_by_id = {id(model._impls[n.name]): names[n.name] for n in model.graph.nodes}
    nodes = {n.name: n for n in model.graph.nodes}
    for (node, impl_id, key), launches in list(model._launch_plans.items()):
        impl_name = impl_by_id.get(impl_id)
        if impl_name is None or node not in nodes or nodes[node].op.kernels.get(impl_name) is None:
            continue
        entry = _portable(launches, nodes[node].op.kernels[impl_name])
        if entry is not _SKIP:
            plans.append((node, impl_name, key, entry))
    tiling = False if model.tiling == 0 else True if model.tiling < 0 else model.tiling
    return {"graph": model.graph, "backend": model.backend, "stats": model.stats, "impls": names,
            "max_tensor_bytes": model.max_tensor_bytes, "tiling": tiling, "concat_inplace": model.concat_inplace,
            "plans": plans}


_SKIP = object()


def _portable(launches, impl):
    """``launches`` with the node's kernel as a token, or _SKIP when they hold large arrays or
    a kernel that would not pickle by reference."""
    if launches is None:
        return None
    out = []
    for launch in launches:
        values = list(launch.args) + list(launch.kwargs.values())
        if any(_fixed_bytes(v) > MAX_FIXED_BYTES for v in values):
            return _SKIP
        kernel = _IMPL if launch.kernel is impl else launch.kernel
        if kernel is not _IMPL:
            try:
                pickle.dumps(kernel)
            except Exception:
                return _SKIP
        out.append(Launch(kernel, launch.args, launch.kwargs, launch.grid, launch.backend))
    return out


def _fixed_bytes(v) -> int:
    if isinstance(v, np.ndarray):
        return v.nbytes
    if isinstance(v, Ref):
        return 0 if v.init is None else v.init.nbytes
    if type(v) in (tuple, list):
        return sum(_fixed_bytes(x) for x in v)
    return 0


def _restore(state: dict) -> Model:
    graph = state["graph"]
    # kernels chosen again (as an unpickled model does): generated ones exist once selected
    impls = {n.name: n.op.implementation([None if t is None else t.spec for t in n.inputs], state["backend"])
             for n in graph.nodes}
    ops = {n.name: n.op for n in graph.nodes}
    seeded = {}
    for node, impl_name, key, launches in state["plans"]:
        impl = impls.get(node)
        if impl is None or ops[node].kernels.get(impl_name) is not impl:
            continue  # another choice than the cached plan's: asked again
        if launches is not None:
            launches = [Launch(impl if isinstance(x.kernel, str) else x.kernel, x.args, x.kwargs, x.grid, x.backend)
                        for x in launches]
        seeded[(node, id(impl), key)] = launches
    return Model(graph, state["backend"], impls, state["stats"], max_tensor_bytes=state["max_tensor_bytes"],
                 tiling=state["tiling"], concat_inplace=state["concat_inplace"], launch_plans=seeded)

