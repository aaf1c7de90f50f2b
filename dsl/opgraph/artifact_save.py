"""``Model.save(path)`` and ``opdsl compile MODEL.onnx -o MODEL.opdsl``: one ``.opdsl`` file
holding what a new process needs to run the model without compiling it.

Sections (artifact_format.py):

* ``graph``: the model's state (model_state.py: the graph after every pass, kernel choices,
  launch plans) pickled with protocol 5, its arrays left out of band;
* ``weights``: those arrays' bytes, raw, each on a 64-byte boundary (loaded without a copy),
  checked with CRC-32 (artifact_checksum.py) rather than sha256;
* ``constants`` (lazy, last): the graph constants that every stored launch plan of every node
  reading them has packed (``deferred_constants``: the plans bind only the packed copies), raw, each
  with its own CRC-32 in the header's ``constants`` table; ``load_model`` does not read them
  (lazy_constants.py: read on first use, e.g. when the model is planned again on another CPU);
* ``code``: the compile-cache entries the model's kernels use on this machine -- numba's
  machine code and index files, the numba front-end records (generated modules), OpenCL program
  binaries -- raw, as the cache holds them (each still framed with its own checksum);
* ``source`` (optional): the ONNX model's bytes, so another opdsl or toolchain rebuilds the
  model from it instead of refusing.

Which cache entries a model uses is learnt by loading the draft (graph and weights) in a fresh
process (artifact_probe.py) and running it once with ``backends.cache.recording()`` on: every
entry it reads or writes is the model's, and a kernel not yet compiled is compiled there.  That
process also reports the toolchain and the CPU (``dsl.target``) the code is for.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from backends import cache
from dsl.opgraph import artifact_checksum, artifact_format, lazy_constants, model_state
from dsl.opgraph.artifact_format import ArtifactError
from dsl.opgraph.launch_plan import Ref
from dsl.version import __version__

CODE_FOLDERS = tuple(f for f in cache.KNOWN_FOLDERS if f not in ("plans",))
PROBE_TIMEOUT_S = 3600  # a cold compile of a large model on a loaded machine


LAZY_MIN_BYTES = 64 << 10  # smaller constants are read with the graph (a lazy one costs a header row and a read)


class _Pickler(pickle.Pickler):
    """Pickles the model state with the lazy constants as references (``("constant", index,
    shape, dtype)``) into the ``constants`` section."""

    def __init__(self, file, lazy: list, **kw):
        super().__init__(file, **kw)
        self._index = {id(a): k for k, a in enumerate(lazy)}
        self._lazy = lazy

    def persistent_id(self, obj):
        k = self._index.get(id(obj))
        if k is None or obj is not self._lazy[k]:
            return None
        return ("constant", k, tuple(obj.shape), np.dtype(obj.dtype).str)


def deferred_constants(model, plans) -> list:
    """The graph constants of ``model`` no stored launch plan binds: every node reading one has
    plans (``plans``: model_state's rows), all of them declared, none using that input -- they
    bind its packed copy -- and is not tiled (tiles slice their inputs).  None for graphs with
    subgraphs."""
    g = model.graph
    if any(n.subgraph is not None for n in g.nodes):
        return []
    bound: dict = {}  # node name -> input slots some stored plan binds, or None (a node that calls run())
    for pool in list(model._plans.values()):
        for node in getattr(getattr(pool, "first", None), "tiled", ()):
            bound[node] = None  # a tiled node slices its inputs when planned
    for node, _, _, launches in plans:
        slots = bound.setdefault(node, set())
        if launches is None or slots is None:
            bound[node] = None
            continue
        for launch in launches:
            slots.update(_input_slots(list(launch.args) + list(launch.kwargs.values())))
    readers: dict = {}
    for n in g.nodes:
        for i, t in enumerate(n.inputs):
            if t is not None and t.kind == "constant":
                readers.setdefault(t.name, []).append((n.name, i))
    out = []
    for name, value in g.constants.items():
        if not (isinstance(value, lazy_constants.LazyConstant) or (
                isinstance(value, np.ndarray) and value.flags.c_contiguous)) or value.nbytes < LAZY_MIN_BYTES:
            continue
        uses = readers.get(name)
        if uses and all(bound.get(node) is not None and i not in bound[node] for node, i in uses):
            out.append(value)
    return out


def _input_slots(values):
    for v in values:
        if isinstance(v, Ref):
            if v.kind == "in":
                yield v.index
        elif type(v) in (tuple, list):
            yield from _input_slots(v)


def draft_sections(model, wrap=None) -> dict:
    """``graph``, ``weights`` and ``constants`` sections of ``model`` and the spans of the
    weights and of the constants (header fields); ``lazy``: the constants the graph refers to.  ``wrap(state)``: what to pickle instead of
    the model state itself (the plan cache adds its own fields)."""
    buffers = []
    state = model_state.state_of(model)
    lazy = deferred_constants(model, state["plans"])
    f = io.BytesIO()
    try:
        # every launch plan, packed weights included: they load in place from the file (no packing at load)
        _Pickler(f, lazy, protocol=5, buffer_callback=buffers.append).dump(state if wrap is None else wrap(state))
    except Exception as e:
        raise ArtifactError(f"cannot save this model: its graph does not pickle ({type(e).__name__}: {e}); "
                            "every op must be importable by module and name (not defined in a notebook cell)") from None
    pieces, spans = artifact_format.pack_chunks([b.raw() for b in buffers])
    raws = [memoryview(np.asarray(a)).cast("B") for a in lazy]
    const_pieces, const_spans = artifact_format.pack_chunks(raws)
    table = [[at, size, artifact_checksum.crc32_digest(raw)] for (at, size), raw in zip(const_spans, raws)]
    return {"graph": f.getvalue(), "weights": pieces, "spans": spans, "constants": const_pieces,
            "constant_spans": table, "lazy": lazy}


def save(model, path: Union[str, os.PathLike], source: Optional[Union[str, os.PathLike, bytes]] = None,
         feeds: Optional[Mapping[str, np.ndarray]] = None, options: Optional[dict] = None,
         packages=()) -> Path:
    """Write ``model`` as an ``.opdsl`` artifact at ``path`` (see the module docstring).

    ``source``: the ONNX file (path or bytes) the model was loaded from, carried so a process
    with another opdsl or toolchain can rebuild it (``options``: the ``load_onnx`` options to
    rebuild it with).  ``packages``: the op package folders its custom ops come from, recorded
    so the loading process registers them.  ``feeds``: inputs for the one run that compiles and collects the kernels
    (default: zeros of the inputs' shapes, unknown dims 1)."""
    path = Path(path)
    if isinstance(source, (str, os.PathLike)):
        try:
            source = Path(source).read_bytes()
        except OSError as e:
            raise ArtifactError(f"cannot read the model source {source}: {e.strerror or e}") from None
    if model.backend != "interpreter" and not cache.enabled():
        warnings.warn(artifact_format.ArtifactWarning(
            f"{path}: the compile cache is not used ({cache.unusable_reason()}), so the artifact carries no machine "
            "code: its kernels compile on first run wherever it is loaded"), stacklevel=3)
    draft = draft_sections(model)
    header = {"opdsl": __version__, "backend": model.backend, "weights": draft["spans"],
              "constants": draft["constant_spans"], "load_options": dict(options or {}, backend=model.backend),
              "packages": [os.path.abspath(os.fspath(p)) for p in packages]}
    sections = {"graph": draft["graph"], "weights": draft["weights"]}
    if draft["constant_spans"]:
        sections["constants"] = draft["constants"]
    with tempfile.TemporaryDirectory(prefix="opdsl-artifact-") as tmp:
        draft_path = Path(tmp) / "draft.opdsl"
        artifact_format.write(draft_path, dict(header, draft=True), sections, fast=("weights",), lazy=("constants",))
        facts = _probe(draft_path, Path(tmp), feeds)
    pieces, code = [], []
    for folder, name in facts["files"]:
        raw = _cache_file(folder, name)
        if raw is not None:
            pieces.append(raw)
            code.append([folder, name])
    code_pieces, spans = artifact_format.pack_chunks(pieces)
    header.update(toolchain=facts["toolchain"], target=facts["target"],
                  code=[[f, n, at, size] for (f, n), (at, size) in zip(code, spans)])
    sections["code"] = code_pieces
    if source is not None:
        sections["source"] = bytes(source)
    return artifact_format.write(path, header, sections, fast=("weights",), lazy=("constants",))


def _cache_file(folder: str, name: str) -> Optional[bytes]:
    if folder not in CODE_FOLDERS:
        return None
    try:
        return cache.read_private(cache.path(folder, name))
    except (cache.CacheUnusable, ValueError):
        return None


def _probe(draft: Path, tmp: Path, feeds) -> dict:
    """Run ``draft`` once in a fresh process -> {"files", "toolchain", "target"}."""
    out = tmp / "facts.json"
    argv = [sys.executable, "-m", "dsl.opgraph.artifact_probe", str(draft), str(out),
            "run" if cache.enabled() else "facts-only"]  # without a disk cache there is no code to collect
    if feeds is not None:
        np.savez(tmp / "feeds.npz", **{k: np.asarray(v) for k, v in feeds.items()})
        argv.append(str(tmp / "feeds.npz"))
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in sys.path if p]))
    env["OPDSL_CACHE_DIR"] = str(cache.cache_root())
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if done.returncode != 0 or not out.exists():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
        raise ArtifactError(f"compiling the model's kernels for the artifact failed:\n{tail}")
    return json.loads(out.read_text())
