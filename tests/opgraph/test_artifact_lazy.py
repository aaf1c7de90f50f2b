"""Graph constants that every stored plan has packed are saved once in an ``.opdsl`` file's lazy
``constants`` section and read only when needed (dsl/opgraph/lazy_constants.py): a model
loaded on the same CPU reads none of them and compiles nothing; a re-plan, another CPU or an
export reads them, checked; a file rewritten in place is a clear error, never other weights."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dsl
from dsl.opgraph import artifact_format, artifact_load, artifact_save, lazy_constants
from dsl.opgraph.lazy_constants import LazyConstant
from fresh_process import run_fresh  # tests/ is on sys.path

RNG = np.random.default_rng(17)
W1 = RNG.standard_normal((32, 16, 1, 1)).astype(np.float32)
W2 = (RNG.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32)
G = (RNG.standard_normal((32 * 4 * 4, 10)) * 0.01).astype(np.float32)
X = RNG.standard_normal((1, 16, 4, 4)).astype(np.float32)
DEFERRED = ("w1", "w2")  # the convolutions' plans bind packed copies; the GEMM binds g itself


def _model_bytes() -> bytes:
    """y = Gemm(Reshape(Relu(Conv3x3(Relu(Conv1x1(x, w1)), w2))), g)."""
    inits = [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2"), numpy_helper.from_array(G, "g"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Reshape", ["r2", "shape"], ["f"]), helper.make_node("Gemm", ["f", "g"], ["y"])]
    graph = helper.make_graph(nodes, "lazy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def _reference(x: np.ndarray) -> np.ndarray:
    """numpy in float64: the 1x1 convolution as a matrix product, the padded 3x3 one as a sum over taps."""
    r1 = np.maximum(np.einsum("nchw,oc->nohw", x.astype(np.float64), W1[:, :, 0, 0]), 0)
    padded = np.pad(r1, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c2 = np.zeros((1, 32, 4, 4))
    for i in range(3):
        for j in range(3):
            c2 += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 4, j:j + 4], W2[:, :, i, j])
    return np.maximum(c2, 0).reshape(1, -1) @ G


_SAVED = {}


def _saved(tmp_path_factory, backend: str):
    """(artifact path, the model it was saved from), once per backend; the 64 KiB threshold is
    lowered so this small model's convolution weights are deferred."""
    if backend not in _SAVED:
        folder = tmp_path_factory.mktemp(f"lazy-{backend}")
        onnx_path = folder / "m.onnx"
        onnx_path.write_bytes(_model_bytes())
        model = dsl.load_onnx(str(onnx_path), backend=backend)
        keep = artifact_save.LAZY_MIN_BYTES
        artifact_save.LAZY_MIN_BYTES = 0
        try:
            path = model.save(folder / "m.opdsl", source=onnx_path)
        finally:
            artifact_save.LAZY_MIN_BYTES = keep
        _SAVED[backend] = (path, model)
    return _SAVED[backend]


@pytest.fixture
def numba_copy(tmp_path_factory, tmp_path) -> Path:
    copy = tmp_path / "m.opdsl"
    copy.write_bytes(_saved(tmp_path_factory, "numba")[0].read_bytes())
    os.chmod(copy, 0o644)
    return copy


def _lazy_names(model) -> set:
    return {k for k, v in model.graph.constants.items() if lazy_constants.is_lazy(v)}


# the interpreter runs this model's convolutions element by element (~16 s): a long case
@pytest.mark.parametrize("backend", [pytest.param("interpreter", marks=pytest.mark.slow), "numba", "opencl"],
                         indirect=True)
def test_a_loaded_model_reads_no_deferred_constant_and_gives_the_same_outputs(backend, tmp_path_factory):
    path, original = _saved(tmp_path_factory, backend)
    rows = {r["name"]: r for r in artifact_format.read(path).header["sections"]}
    assert rows["constants"].get("lazy") and list(rows)[-1] == "constants"  # last: the load stops before it
    reads = lazy_constants.stats["reads"]
    loaded = dsl.load_model(path)
    assert _lazy_names(loaded) == set(DEFERRED)
    got = loaded.run({"x": X})["y"]
    assert lazy_constants.stats["reads"] == reads and _lazy_names(loaded) == set(DEFERRED)
    np.testing.assert_array_equal(got, original.run({"x": X})["y"])
    np.testing.assert_allclose(got, _reference(X), rtol=1e-4, atol=1e-4)


_FRESH = r"""  # after fresh_process.COMPILE_COUNTER
import numpy as np
import dsl
from dsl.opgraph import lazy_constants
model = dsl.load_model(sys.argv[1])
at_load = [m for m in sys.modules if m.startswith("opdsl_numba_")]  # generated modules executed
np.save(sys.argv[3], model.run({"x": np.load(sys.argv[2])})["y"])
print(Count.n, lazy_constants.stats["reads"], len(at_load), len([m for m in sys.modules if m.startswith("opdsl_numba_")]))
"""


def test_a_fresh_process_compiles_nothing_and_reads_no_deferred_constant(tmp_path_factory, tmp_path):
    """Nor does it execute a generated module while it loads: each kernel's module (its numba
    dispatchers) is executed by its first launch (backends/numba/deferred_module.py)."""
    path, _ = _saved(tmp_path_factory, "numba")
    np.save(tmp_path / "x.npy", X)
    compiles, reads, at_load, after_run = map(int, run_fresh(
        _FRESH, (path, tmp_path / "x.npy", tmp_path / "y.npy"), tmp_path / "empty-cache"))
    assert (compiles, reads, at_load) == (0, 0, 0) and after_run >= 1  # no compile, no constant read
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), _reference(X), rtol=1e-4, atol=1e-4)


def test_a_deferred_constant_is_read_checked_once_on_first_use(numba_copy):
    model = dsl.load_model(numba_copy)
    w2 = model.graph.constants["w2"]
    assert isinstance(w2, LazyConstant) and w2.shape == W2.shape and w2.dtype == W2.dtype
    assert w2.strides == W2.strides and w2.flags.c_contiguous and "not read yet" in repr(w2)
    reads = lazy_constants.stats["reads"]
    np.testing.assert_array_equal(np.asarray(w2), W2)
    np.testing.assert_array_equal(w2[3, 2], W2[3, 2])
    assert w2.sum() == pytest.approx(float(W2.sum()), rel=1e-5, abs=1e-3)
    assert lazy_constants.stats["reads"] == reads + 1 and not np.asarray(w2).flags.writeable


def test_a_deferred_constant_rewritten_in_place_is_refused_clearly(numba_copy):
    """Loaded, then other bytes written where the constants lie (the same inode, as `cp` over the
    file does): the first read of one is an ArtifactError naming the file; the packed copies the
    model runs were read at load, so its runs are unchanged."""
    model = dsl.load_model(numba_copy)
    row = {r["name"]: r for r in artifact_format.read(numba_copy).header["sections"]}["constants"]
    with open(numba_copy, "r+b") as f:
        f.seek(row["offset"])
        f.write(b"\x3f" * row["size"])
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)
    with pytest.raises(dsl.ArtifactError, match=rf"{numba_copy}: constant \d of section 'constants' .read on first "
                                                r"use. holds other bytes now .its crc32 does not match.: the file "
                                                r"was rewritten in place"):
        np.asarray(model.graph.constants["w1"])
    os.truncate(numba_copy, row["offset"] + 8)
    with pytest.raises(dsl.ArtifactError, match="is shorter now"):
        np.asarray(model.graph.constants["w2"])
    with pytest.raises(dsl.ArtifactError, match="truncated: section 'constants' ends at byte"):
        dsl.load_model(numba_copy)  # the cut file itself is refused when opened


def test_a_file_replaced_by_a_rename_leaves_the_deferred_constants_readable(numba_copy):
    model = dsl.load_model(numba_copy)
    other = numba_copy.with_name("other.opdsl")
    other.write_bytes(b"\0" * 100)
    os.replace(other, numba_copy)  # what `opdsl compile -o` does: the model still holds the old file
    np.testing.assert_array_equal(np.asarray(model.graph.constants["w2"]), W2)


def test_planning_again_reads_the_constants_and_packs_them(numba_copy):
    """A model whose stored plans are gone (as after many shape signatures) asks the ops again:
    they get the real arrays, read from the file, and the results stay right."""
    model = dsl.load_model(numba_copy)
    model._launch_plans.clear()
    model._plans.clear()
    got = model.run({"x": X})["y"]
    np.testing.assert_allclose(got, _reference(X), rtol=1e-4, atol=1e-4)
    assert _lazy_names(model) == set()
    assert all(type(v) is np.ndarray for v in model.graph.constants.values())
    assert model.graph.tensors["w2"].spec.value is model.graph.constants["w2"]


def test_another_cpu_plans_again_from_the_deferred_constants(numba_copy, monkeypatch):
    """An artifact opened on a CPU with other features (simulated through the target facts):
    its machine code and stored plans are not used; the model runs from the graph's constants,
    read from the file."""
    here = artifact_load.target_facts("numba")
    monkeypatch.setattr(artifact_load, "target_facts",
                        lambda backend: dict(here, features=[f for f in here["features"] if f != "avx2"]))
    reads = lazy_constants.stats["reads"]
    with pytest.warns(artifact_format.ArtifactWarning, match="another CPU"):
        model = dsl.load_model(numba_copy)
    assert lazy_constants.stats["reads"] == reads + len(DEFERRED) and _lazy_names(model) == set()
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)


def test_export_and_a_second_save_read_the_deferred_constants(numba_copy, tmp_path):
    model = dsl.load_model(numba_copy)
    proto = model.graph.to_onnx()
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    np.testing.assert_array_equal(inits["w2"], W2)
    again = dsl.load_model(model.save(tmp_path / "again.opdsl"))
    np.testing.assert_allclose(again.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)


def test_a_plan_cache_hit_leaves_the_deferred_constants_in_its_entry(monkeypatch):
    """The model plan cache stores its entries as artifacts do: a hit reads none of the deferred
    constants, runs right, and reads one (checked) when asked.  The session's cache (its kernels
    warm); the registry a fresh process has (ops other tests registered without a source file
    would make the model uncacheable), as tests/opgraph/test_plan_cache.py does."""
    from dsl.opgraph import plan_cache, registry
    registry.load_builtin_library()
    builtin = [c for c in registry.registered_now() if registry.is_builtin(c)]
    monkeypatch.setattr(registry, "registered_now", lambda: list(builtin))
    monkeypatch.delenv("OPDSL_PLAN_CACHE", raising=False)  # conftest turns it off for other tests
    monkeypatch.setattr(artifact_save, "LAZY_MIN_BYTES", 0)
    data = _model_bytes()
    dsl.load_onnx(data, backend="numba")  # a miss that stores the entry, or a hit of an earlier run's
    hits, reads = plan_cache.stats["hits"], lazy_constants.stats["reads"]
    model = dsl.load_onnx(data, backend="numba")
    assert plan_cache.stats["hits"] == hits + 1 and _lazy_names(model) == set(DEFERRED)
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)
    assert lazy_constants.stats["reads"] == reads
    np.testing.assert_array_equal(np.asarray(model.graph.constants["w1"]), W1)


def test_a_constants_table_that_does_not_fit_its_section_is_refused(tmp_path):
    """The header (sha256-checked, so only a crafted, trusted file gets here) names where each
    constant lies: one outside the section, of another size than its array or malformed is an
    ArtifactError naming the file, before anything is read."""
    path = tmp_path / "c.bin"
    path.write_bytes(b"\0" * 256)
    file = artifact_format.OpenFile(os.open(path, os.O_RDONLY))
    section = lazy_constants.LazySection(str(path), file, 64, 128, [[0, 256, "x"], [0, 16, "x"], ["?", 1]])
    with pytest.raises(dsl.ArtifactError, match=rf"{path}: constant 0 lies outside section 'constants' .bytes 0-256 of 128."):
        section.constant(0, (64,), "<f4")
    with pytest.raises(dsl.ArtifactError, match="constant 1 is 16 bytes in the header, not a float32.8. array"):
        section.constant(1, (8,), "<f4")
    with pytest.raises(dsl.ArtifactError, match="the header's row of constant 2 is malformed"):
        section.constant(2, (1,), "|u1")
    with pytest.raises(dsl.ArtifactError, match="names constant 3, its header lists 3"):
        section.constant(3, (1,), "|u1")
