"""The model plan cache (dsl/opgraph/plan_cache.py): a second load_onnx of the same model reads
its plan (counted, never timed), any change of model, op code or toolchain is a miss, and a
damaged entry is a miss with one warning."""
import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import dsl
from backends import cache
from dsl.opgraph import plan_cache

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _model_bytes(scale: float = 2.0) -> bytes:
    """y = Softmax(Relu(x) * w + b) on (2, 8): a constant, a broadcast, a library op with a plan."""
    w = numpy_helper.from_array(np.full((8,), scale, np.float32), "w")
    b = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]), helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "plan_cache", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def _reference(x, scale=2.0):
    a = np.maximum(x, 0) * scale + np.linspace(-1, 1, 8, dtype=np.float32)
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def plans_dir(tmp_path, monkeypatch):
    """A cache of its own (kernels compiled in memory stay compiled), zeroed counters, and the
    registry a fresh process has: ops other tests registered in this process (some from files
    since deleted, some without a source file) would make every model uncacheable here."""
    from dsl.opgraph import registry
    registry.load_builtin_library()
    builtin = [c for c in registry.registered_now() if registry.is_builtin(c)]
    monkeypatch.setattr(registry, "registered_now", lambda: list(builtin))
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPDSL_PLAN_CACHE", raising=False)
    cache.reset()
    monkeypatch.setattr(plan_cache, "stats", {"hits": 0, "misses": 0, "stores": 0})
    yield tmp_path / "cache" / plan_cache.FOLDER
    cache.reset()


def _load(path, backend="interpreter"):
    model = dsl.load_onnx(str(path), backend=backend)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": x})["y"], _reference(x), rtol=1e-5, atol=1e-6)
    return model


def test_a_big_entry_is_written_beside_the_first_run_and_read_after_it(plans_dir, tmp_path, monkeypatch):
    """Entries of BACKGROUND_BYTES or more are written by a thread; a load of the same model in
    this process waits for it and hits, and wait_for_writes() leaves nothing pending."""
    monkeypatch.setattr(plan_cache, "BACKGROUND_BYTES", 0)
    release = __import__("threading").Event()
    real_write = plan_cache.artifact_format.write

    def slow_write(*args, **kwargs):
        release.wait(30)  # the load has returned and run before the entry is on disk
        return real_write(*args, **kwargs)

    monkeypatch.setattr(plan_cache.artifact_format, "write", slow_write)
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)
    assert plan_cache.stats == {"hits": 0, "misses": 1, "stores": 0}
    assert not plans_dir.exists() or not any(plans_dir.iterdir())
    release.set()
    _load(path)  # waits for the writer, then reads its entry
    assert plan_cache.stats == {"hits": 1, "misses": 1, "stores": 1}
    assert len(list(plans_dir.iterdir())) == 1
    plan_cache.wait_for_writes()
    assert not plan_cache._WRITING


def test_second_load_reads_the_plan(backend, plans_dir, tmp_path, monkeypatch):
    from dsl.opgraph import model as model_module
    asked = []
    real_plan_of = model_module.plan_of
    monkeypatch.setattr(model_module, "plan_of", lambda *a, **k: asked.append(a[0]) or real_plan_of(*a, **k))
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    first = _load(path, backend)
    assert plan_cache.stats == {"hits": 0, "misses": 1, "stores": 1}
    assert len(list(plans_dir.iterdir())) == 1 and asked
    asked.clear()
    second = _load(path, backend)
    assert plan_cache.stats == {"hits": 1, "misses": 1, "stores": 1}
    assert asked == []  # every node's launches came from the entry, no op was asked again
    assert str(second) == str(first)  # same graph, kernels, memory and planned nodes


def test_a_fresh_process_reads_the_plan(plans_dir, tmp_path):
    """Two processes (the test process may have registered test ops, another key): the first
    stores the plan, the second reads it."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    script = ("import numpy as np, dsl\nfrom dsl.opgraph import plan_cache\n"
              f"m = dsl.load_onnx({str(path)!r}, backend='numba')\n"
              "m.run({'x': np.ones((2, 8), np.float32)})\nprint(plan_cache.stats)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    seen = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        seen.append(out.stdout.strip().splitlines()[-1])
    assert seen == ["{'hits': 0, 'misses': 1, 'stores': 1}", "{'hits': 1, 'misses': 0, 'stores': 0}"]


def test_the_library_identity_is_a_built_in_however_it_is_imported():
    """ops.shape registers the Identity class of dsl.opgraph.graph: imported outside the ops
    package's own import (as unpickling a plan-cache entry imports it) it still counts as a
    built-in, so an entry a process writes after reading one does not name it as a user op
    (fresh processes could not read such an entry: a miss every time)."""
    script = ("import ops.shape\nfrom dsl.opgraph import registry\n"
              "print(registry.is_builtin(ops.shape.Identity))\n")
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize("change", ["model", "op code", "toolchain", "cpu", "options"])
def test_a_change_is_a_miss(plans_dir, tmp_path, monkeypatch, change):
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)
    if change == "model":
        path.write_bytes(_model_bytes(scale=3.0))
        model = dsl.load_onnx(str(path), backend="interpreter")
        x = np.ones((2, 8), np.float32)
        np.testing.assert_allclose(model.run({"x": x})["y"], _reference(x, 3.0), rtol=1e-5)
    else:
        if change == "op code":
            real = plan_cache.code_digest()
            monkeypatch.setattr(plan_cache, "code_digest", lambda roots=None: real[::-1])
        elif change == "toolchain":
            real_key = plan_cache.toolchain_key
            monkeypatch.setattr(plan_cache, "toolchain_key", lambda: real_key().replace("numba ", "numba 0."))
        elif change == "cpu":  # a cache folder shared with another kind of CPU (its tiles differ)
            host = plan_cache.host.host()
            monkeypatch.setattr(plan_cache.host, "host", lambda: dataclasses.replace(host, features=host.features - {"avx512f"}))
        if change == "options":
            dsl.load_onnx(str(path), backend="interpreter", fuse=False)
        else:
            _load(path)
    assert plan_cache.stats["hits"] == 0 and plan_cache.stats["misses"] == 2
    assert len(list(plans_dir.iterdir())) == 2  # the new key's entry beside the old one


def test_code_digest_follows_an_edited_file(tmp_path):
    src = tmp_path / "myops"
    src.mkdir()
    (src / "op.py").write_text("X = 1\n")
    before = plan_cache.code_digest([src])
    plan_cache._DIGEST.clear()
    (src / "op.py").write_text("X = 22\n")  # another size (and time)
    assert plan_cache.code_digest([src]) != before
    plan_cache._DIGEST.clear()


def test_code_digest_reads_contents_not_file_times(tmp_path):
    """A fresh clone or a reinstall (new times, same bytes) keeps the digest; an edit of the same
    size, with the old time put back, changes it."""
    src = tmp_path / "myops"
    (src / "sub").mkdir(parents=True)
    f = src / "sub" / "op.py"
    f.write_text("X = 1\n")
    st = f.stat()
    before = plan_cache.code_digest([src])
    try:
        plan_cache._DIGEST.clear()
        os.utime(f, ns=(st.st_atime_ns + 10**12, st.st_mtime_ns + 10**12))  # touched, not changed
        assert plan_cache.code_digest([src]) == before
        plan_cache._DIGEST.clear()
        f.write_text("X = 2\n")
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert plan_cache.code_digest([src]) != before
    finally:
        plan_cache._DIGEST.clear()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped weight byte", "flipped graph byte"])
def test_a_damaged_entry_is_a_miss_with_one_warning(plans_dir, tmp_path, damage):
    from dsl.opgraph import artifact_format
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)
    entry = next(plans_dir.iterdir())
    raw = bytearray(entry.read_bytes())
    if damage.startswith("flipped"):
        section = {"flipped weight byte": "weights", "flipped graph byte": "graph"}[damage]
        row = next(r for r in artifact_format.read(entry).header["sections"] if r["name"] == section)
        raw[row["offset"] + row["size"] - 1] ^= 0x10
        os.replace(entry, entry.with_suffix(".old"))  # a new file: a mapping of the old one never sees the write
        entry.write_bytes(bytes(raw))
        os.chmod(entry, 0o600)
        os.unlink(entry.with_suffix(".old"))
    else:
        entry.write_bytes(b"not a plan" * 10 if damage == "garbage" else bytes(raw[:len(raw) // 2]))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _load(path)
    damaged = [w for w in seen if issubclass(w.category, cache.CacheEntryWarning)]
    assert len(damaged) == 1 and "model plan cache entry" in str(damaged[0].message)
    assert plan_cache.stats == {"hits": 0, "misses": 2, "stores": 2}  # built again and stored again
    _load(path)
    assert plan_cache.stats["hits"] == 1


def test_cache_off_by_environment(plans_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("OPDSL_PLAN_CACHE", "0")
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)
    _load(path)
    assert plan_cache.stats == {"hits": 0, "misses": 0, "stores": 0} and not plans_dir.exists()


def _user_op(op_type: str, domain: str, sourceless: bool):
    """An op class as a user's module (this file) or a notebook cell (no source file) defines it."""
    cls = type(f"User{op_type}", (dsl.Op,), {"op_type": op_type, "domain": domain, "since": 1, "until": None})
    if sourceless:
        cls.__module__ = "notebook_cell_without_a_file"
    return cls


@pytest.mark.parametrize("domain, op_type, cached", [("my.domain", "Sourceless", True), ("", "Relu", False)])
def test_only_the_ops_a_model_names_are_keyed(plans_dir, tmp_path, monkeypatch, domain, op_type, cached):
    """A notebook op of another domain leaves the model cacheable; one under a type the model
    names (its code unknown) turns caching off for that model only."""
    from dsl.opgraph import registry
    extra = _user_op(op_type, domain, sourceless=True)
    builtin = registry.registered_now()
    monkeypatch.setattr(registry, "registered_now", lambda: builtin + [extra])
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)
    _load(path)
    want = {"hits": 1, "misses": 1, "stores": 1} if cached else {"hits": 0, "misses": 2, "stores": 0}
    assert plan_cache.stats == want


def test_an_op_from_a_notebook_main_turns_caching_off_for_its_model_only(plans_dir, tmp_path, monkeypatch):
    """In Jupyter ``__main__`` has no ``__file__``: inspect raises OSError there, not TypeError."""
    import sys
    import types
    from dsl.opgraph import registry
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    extra = type("UserRelu", (dsl.Op,), {"op_type": "Relu", "domain": "", "since": 1, "until": None,
                                        "__module__": "__main__"})
    builtin = registry.registered_now()
    monkeypatch.setattr(registry, "registered_now", lambda: builtin + [extra])
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)
    assert plan_cache.stats == {"hits": 0, "misses": 1, "stores": 0}


def test_a_user_op_registered_under_a_type_the_model_names_is_a_miss(plans_dir, tmp_path, monkeypatch):
    from dsl.opgraph import registry
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)
    builtin = registry.registered_now()
    monkeypatch.setattr(registry, "registered_now", lambda: builtin + [_user_op("Relu", "", sourceless=False)])
    _load(path)  # the entry records the user ops the model reached (none): another set now
    assert plan_cache.stats == {"hits": 0, "misses": 2, "stores": 2}
    _load(path)
    assert plan_cache.stats["hits"] == 1


def test_a_hit_neither_parses_nor_folds(plans_dir, tmp_path, monkeypatch):
    """Folding runs kernels on the weights (seconds for a CNN): a hit reads the folded graph."""
    from dsl.onnx import load as onnx_load
    from dsl.opgraph import passes
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)

    def refuse(*a, **k):
        raise AssertionError("a plan cache hit built the graph again")
    monkeypatch.setattr(passes, "infer_and_fold", refuse)
    monkeypatch.setattr(onnx_load, "to_graph", refuse)
    _load(path)
    assert plan_cache.stats["hits"] == 1


def test_a_hit_asks_no_op_for_its_plan_and_reads_its_arrays_in_place(plans_dir, tmp_path, monkeypatch):
    """Every launch plan is in the entry (packed weights too: packing them again was half of a warm
    CNN load), and the graph's constants are views of the entry's bytes, not copies."""
    from dsl.opgraph import model as model_module
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    _load(path)

    def refuse(*a, **k):
        raise AssertionError("a plan cache hit asked an op for its launch plan again")
    monkeypatch.setattr(model_module, "plan_of", refuse)
    model = _load(path)
    assert plan_cache.stats["hits"] == 1
    w = next(v for v in model.graph.constants.values() if v.size == 8 and np.all(v == 2.0))
    root = w
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    if isinstance(root, memoryview):
        root = root.obj
    assert memoryview(root).nbytes > w.nbytes  # a view of the whole entry's buffer, not a copy


def _root(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


@pytest.mark.parametrize("huge", ["1", "0"])
def test_a_miss_runs_on_the_weights_a_hit_would_have(backend, plans_dir, tmp_path, monkeypatch, huge):
    """On a miss the model returned is the one the drafted entry restores, its weights copied
    into one huge-page buffer (as a hit reads them), not the arrays the build packed; with
    OPDSL_HUGE_PAGES=0 it is the built model.  Results equal numpy's either way (``_load``)."""
    import mmap

    from dsl.opgraph import artifact_format
    monkeypatch.setattr(artifact_format, "HUGE_BUFFER_BYTES", 1)  # this model's few bytes count as big
    monkeypatch.setenv("OPDSL_HUGE_PAGES", huge)
    restored, real = [], plan_cache.on_huge_pages
    monkeypatch.setattr(plan_cache, "on_huge_pages", lambda draft: restored.append(real(draft)) or restored[-1])
    path = tmp_path / "m.onnx"
    path.write_bytes(_model_bytes())
    model = _load(path, backend)
    assert plan_cache.stats["misses"] == 1
    w = next(v for v in model.graph.constants.values() if v.size == 8 and np.all(v == 2.0))
    if huge == "1":
        assert restored == [model] and isinstance(_root(w), mmap.mmap)
    else:
        assert restored == [] and not isinstance(_root(w), mmap.mmap)
    plan_cache.wait_for_writes()
    assert str(_load(path, backend)) == str(model) and plan_cache.stats["hits"] == 1


def test_the_background_import_is_quiet_and_done_once(monkeypatch):
    """cached_load starts importing numba beside reading the model: a module already imported
    starts nothing, a failing import leaves its error to the caller's own import."""
    import sys
    import threading
    started = []
    real = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), real(self))[1])
    plan_cache._start_importing("json")
    assert started == []
    plan_cache._start_importing("opdsl_no_such_module_xyz")
    assert started == ["opdsl-import-opdsl_no_such_module_xyz"]
    for t in threading.enumerate():
        if t.name == started[0]:
            t.join(10)
    assert "opdsl_no_such_module_xyz" not in sys.modules


def test_the_compiler_versions_read_without_importing_them_are_the_modules_own():
    """The key names numba's and llvmlite's versions from their metadata, so the key is known before
    numba's import ends; they must be the versions the modules report."""
    import llvmlite
    import numba
    assert plan_cache.compiler_versions() == {"numba": numba.__version__, "llvmlite": llvmlite.__version__}
    assert f"numba {numba.__version__}; llvmlite {llvmlite.__version__};" in plan_cache.toolchain_key()
