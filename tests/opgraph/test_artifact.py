"""The ``.opdsl`` ahead-of-time artifact (dsl/opgraph/artifact_*.py): a round trip on every backend,
a fresh process that loads it without compiling, version and CPU mismatches (recompiled with one
warning, or refused), and damaged or untrusted files refused with nothing unpickled."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import dsl
from dsl.opgraph import artifact_format, artifact_load, plan_cache
from fresh_process import run_fresh  # tests/ is on sys.path

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = RNG.standard_normal((4,)).astype(np.float32)
G = RNG.standard_normal((4 * 6 * 6, 5)).astype(np.float32)
X = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)


def _model_bytes() -> bytes:
    """y = Gemm(Reshape(Relu(Conv(x, w, b))), g): a convolution, an activation and a GEMM."""
    inits = [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b"), numpy_helper.from_array(G, "g"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("Gemm", ["f", "g"], ["y"])]
    graph = helper.make_graph(nodes, "artifact", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def _reference(x: np.ndarray) -> np.ndarray:
    """numpy: the 3x3 valid convolution as a sum over the kernel's taps, then relu and the GEMM."""
    c = np.zeros((1, 4, 6, 6), np.float64)
    for i in range(3):
        for j in range(3):
            c += np.einsum("nchw,oc->nohw", x[:, :, i:i + 6, j:j + 6], W[:, :, i, j])
    c += B[None, :, None, None]
    return (np.maximum(c, 0).reshape(1, -1) @ G).astype(np.float32)


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("artifact") / "m.onnx"
    path.write_bytes(_model_bytes())
    return path


_SAVED = {}


def _saved(onnx_file: Path, backend: str, source: bool = True) -> Path:
    """The model compiled for ``backend`` and saved once per module (a save runs one process)."""
    key = (backend, source)
    if key not in _SAVED:
        model = dsl.load_onnx(str(onnx_file), backend=backend)
        path = onnx_file.parent / f"m-{backend}-{'src' if source else 'nosrc'}.opdsl"
        model.save(path, source=onnx_file if source else None)
        _SAVED[key] = (path, model)
    return _SAVED[key][0]


@pytest.fixture
def numba_artifact(onnx_file, tmp_path) -> Path:
    """A private copy of the numba artifact, free to damage."""
    copy = tmp_path / "m.opdsl"
    copy.write_bytes(_saved(onnx_file, "numba").read_bytes())
    os.chmod(copy, 0o644)
    return copy


def test_round_trip(backend, onnx_file):
    path = _saved(onnx_file, backend)
    original = _SAVED[(backend, True)][1]
    loaded = dsl.load_model(path)
    assert loaded.backend == backend and str(loaded) == str(original)
    got = loaded.run({"x": X})["y"]
    np.testing.assert_allclose(got, _reference(X), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got, original.run({"x": X})["y"])
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


_FRESH = r"""  # after fresh_process.COMPILE_COUNTER
from numba.core.runtime import nrtdynmod
nrt_made = []
nrt_module = nrtdynmod.create_nrt_module
def count_nrt(ctx):
    nrt_made.append(1)
    return nrt_module(ctx)
nrtdynmod.create_nrt_module = count_nrt
import numpy as np
import dsl
from backends import warm_start
from dsl.opgraph import artifact_load, passes

def refuse(*a, **k):
    raise AssertionError("constants were folded again")
passes.infer_and_fold = refuse
model = dsl.load_model(sys.argv[1])
y = model.run({"x": np.load(sys.argv[2])})["y"]
np.save(sys.argv[3], y)
print(Count.n, warm_start.writes, artifact_load.stats["installed"], "dsl.onnx.load" in sys.modules, len(nrt_made))
"""


def test_a_fresh_process_with_an_empty_cache_compiles_nothing(onnx_file, tmp_path):
    path = _saved(onnx_file, "numba")
    cache_dir = tmp_path / "empty-cache"
    np.save(tmp_path / "x.npy", X)
    compiles, frontend_writes, installed, parsed_onnx, nrt_made = run_fresh(
        _FRESH, (path, tmp_path / "x.npy", tmp_path / "y.npy"), cache_dir)
    assert (compiles, frontend_writes, parsed_onnx) == ("0", "0", "False")  # no compile, no front end, no ONNX
    assert nrt_made == "0"  # numba's runtime library too came from the file, not from LLVM
    assert int(installed) > 0  # the machine code came from the file
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), _reference(X), rtol=1e-4, atol=1e-4)


def test_another_toolchain_is_rebuilt_from_the_source_with_one_warning(onnx_file, numba_artifact, monkeypatch):
    real = plan_cache.toolchain_key()
    monkeypatch.setattr(plan_cache, "toolchain_key", lambda: real.replace("numba ", "numba 0."))
    with pytest.warns(artifact_format.ArtifactWarning, match="another toolchain.*numba.*rebuilt from the ONNX") as seen:
        model = dsl.load_model(numba_artifact)
    assert len([w for w in seen if issubclass(w.category, artifact_format.ArtifactWarning)]) == 1
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)
    with pytest.raises(dsl.ArtifactError, match="refused, it was made by another toolchain"):
        dsl.load_model(numba_artifact, on_mismatch="refuse")


def test_another_toolchain_without_a_source_is_refused(onnx_file, monkeypatch):
    path = _saved(onnx_file, "interpreter", source=False)
    monkeypatch.setattr(plan_cache, "toolchain_key", lambda: "opdsl 0.0.0")
    with pytest.raises(dsl.ArtifactError, match="carries no ONNX source"):
        dsl.load_model(path)


def test_another_cpu_compiles_again_with_one_warning_or_is_refused(numba_artifact, monkeypatch):
    here = artifact_load.target_facts("numba")
    monkeypatch.setattr(artifact_load, "target_facts",
                        lambda backend: dict(here, features=[f for f in here["features"] if f != "avx2"]))
    monkeypatch.setattr(artifact_load, "stats", {"installed": 0, "kept": 0})
    with pytest.warns(artifact_format.ArtifactWarning, match="another CPU.*features missing here: avx2"):
        model = dsl.load_model(numba_artifact)
    assert artifact_load.stats == {"installed": 0, "kept": 0}  # its machine code was not used
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)
    with pytest.raises(dsl.ArtifactError, match="compiled for another CPU"):
        dsl.load_model(numba_artifact, on_mismatch="refuse")


class _NoUnpickling:
    @staticmethod
    def loads(*a, **k):
        raise AssertionError("a damaged or untrusted artifact was unpickled")

    Unpickler = loads


def _sections(path: Path) -> dict:
    return {row["name"]: row for row in artifact_format.read(path, trusted=True).header["sections"]}


def test_a_flipped_byte_in_each_section_is_refused_and_nothing_runs(numba_artifact, monkeypatch):
    rows = _sections(numba_artifact)
    assert set(rows) == {"graph", "weights", "code", "source"}
    monkeypatch.setattr(artifact_load, "pickle", _NoUnpickling)
    good = numba_artifact.read_bytes()
    for name, row in list(rows.items()) + [("header", {"offset": 60, "size": 1})]:
        bad = bytearray(good)
        bad[row["offset"] + row["size"] // 2] ^= 0x01
        numba_artifact.write_bytes(bytes(bad))
        with pytest.raises(dsl.ArtifactError) as e:
            dsl.load_model(numba_artifact)
        assert str(numba_artifact) in str(e.value) and f"section '{name}' is corrupted" in str(e.value)


def test_the_weights_are_checked_by_crc32_and_a_flip_anywhere_in_them_is_refused(numba_artifact, monkeypatch):
    """The weights carry the cheaper CRC-32 (artifact_checksum.py), the rest sha256; a
    flipped bit at the weights' first or last byte or a top bit inside is refused before anything
    is unpickled."""
    rows = _sections(numba_artifact)
    assert {n: r["check"] for n, r in rows.items()} == {"graph": "sha256", "weights": "crc32",
                                                         "code": "sha256", "source": "sha256"}
    monkeypatch.setattr(artifact_load, "pickle", _NoUnpickling)
    good = numba_artifact.read_bytes()
    w = rows["weights"]
    for at, bit in ((w["offset"], 0x01), (w["offset"] + w["size"] - 1, 0x01), (w["offset"] + w["size"] // 3, 0x80)):
        bad = bytearray(good)
        bad[at] ^= bit
        numba_artifact.write_bytes(bytes(bad))
        with pytest.raises(dsl.ArtifactError, match="section 'weights' is corrupted .its crc32 does not match"):
            dsl.load_model(numba_artifact)


def test_mmap_maps_the_weights_and_still_checks_them(numba_artifact, monkeypatch):
    """load_model(mmap=True): the constants are views of a copy-on-write mapping of the file (no
    copy), the results are the same, and a flipped weight byte is still refused before unpickling."""
    import mmap
    model = dsl.load_model(numba_artifact, mmap=True)
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)
    roots = set()
    for v in model.graph.constants.values():
        while isinstance(v, np.ndarray) and v.base is not None:
            v = v.base
        roots.add(type(v.obj if isinstance(v, memoryview) else v))
    assert mmap.mmap in roots
    w = _sections(numba_artifact)["weights"]
    bad = bytearray(numba_artifact.read_bytes())
    bad[w["offset"] + w["size"] // 2] ^= 0x04
    numba_artifact.unlink()  # a new file (the mapping above keeps the old one)
    numba_artifact.write_bytes(bytes(bad))
    os.chmod(numba_artifact, 0o644)
    monkeypatch.setattr(artifact_load, "pickle", _NoUnpickling)
    with pytest.raises(dsl.ArtifactError, match="section 'weights' is corrupted"):
        dsl.load_model(numba_artifact, mmap=True)


def _root(a: np.ndarray):
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


@pytest.mark.parametrize("huge", [False, True], ids=["small-pages", "huge-pages"])
def test_a_file_rewritten_in_place_does_not_change_the_loaded_model(numba_artifact, monkeypatch, huge):
    """The default load keeps a private copy: writing other weights into the file where it lies
    (``cp`` over it, not a rename) changes nothing in a model loaded before -- whether the copy
    is numpy's buffer (small files) or the anonymous huge-page mapping (files over
    ``HUGE_BUFFER_BYTES``, forced here)."""
    import mmap
    if huge:
        monkeypatch.setattr(artifact_format, "HUGE_BUFFER_BYTES", 0)
    model = dsl.load_model(numba_artifact)
    roots = {type(_root(v)) for v in model.graph.constants.values()}
    assert roots == ({mmap.mmap} if huge else {np.ndarray})
    w = _sections(numba_artifact)["weights"]
    with open(numba_artifact, "r+b") as f:  # the same inode: a mapping of the file would see this
        f.seek(w["offset"])
        f.write(b"\x3f" * w["size"])  # every weight becomes ~0.75
    got = model.run({"x": X})["y"]
    np.testing.assert_allclose(got, _reference(X), rtol=1e-4, atol=1e-4)
    with pytest.raises(dsl.ArtifactError, match="section 'weights' is corrupted"):
        dsl.load_model(numba_artifact)  # the rewritten file itself no longer matches its checks


def test_the_read_buffer_takes_huge_pages_only_for_large_files(monkeypatch):
    """``private_buffer``: numpy's buffer under ``HUGE_BUFFER_BYTES``, an anonymous private
    mapping at or over it; both writable and of the size asked; a kernel without transparent
    huge pages (madvise fails) still gets the mapping."""
    import mmap
    small = artifact_format.private_buffer(1000)
    assert len(small) == 1000 and not small.readonly and isinstance(small.obj, np.ndarray)
    size = artifact_format.HUGE_BUFFER_BYTES + 12345
    big = artifact_format.private_buffer(size)
    assert len(big) == size and not big.readonly
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert isinstance(big.obj, mmap.mmap)

        class NoHugePages(mmap.mmap):
            def madvise(self, *a):
                raise OSError(22, "Invalid argument")
        monkeypatch.setattr(artifact_format.mmap, "mmap", NoHugePages)
        plain = artifact_format.private_buffer(size)
        assert isinstance(plain.obj, NoHugePages) and len(plain) == size
    big[size - 1] = 7
    assert big[size - 1] == 7


@pytest.mark.parametrize("cut", ["header", "graph", "weights", "code", "source"])
def test_a_truncated_file_is_refused(numba_artifact, monkeypatch, cut):
    rows = _sections(numba_artifact)
    monkeypatch.setattr(artifact_load, "pickle", _NoUnpickling)
    data = numba_artifact.read_bytes()
    at = 40 if cut == "header" else rows[cut]["offset"] + rows[cut]["size"] // 2
    numba_artifact.write_bytes(data[:at])
    with pytest.raises(dsl.ArtifactError, match="truncated" + ("" if cut == "header" else f".*section '{cut}'")):
        dsl.load_model(numba_artifact)


def test_not_an_artifact_and_another_format_are_refused(numba_artifact, tmp_path, monkeypatch):
    (tmp_path / "m.onnx").write_bytes(_model_bytes())
    with pytest.raises(dsl.ArtifactError, match="m.onnx: not an .opdsl artifact .wrong magic"):
        dsl.load_model(tmp_path / "m.onnx")
    monkeypatch.setattr(artifact_format, "FORMAT", 99)
    artifact_format.write(tmp_path / "future.opdsl", {"backend": "numba"}, {"graph": b"x"})
    monkeypatch.undo()
    with pytest.raises(dsl.ArtifactError,
                       match=f"artifact format 99, this opdsl reads formats "
                             f"{', '.join(map(str, artifact_format.READABLE))}"):
        dsl.load_model(tmp_path / "future.opdsl")


def test_a_file_others_can_write_needs_trusted(numba_artifact, monkeypatch):
    os.chmod(numba_artifact, 0o664)
    with monkeypatch.context() as m:
        m.setattr(artifact_load, "pickle", _NoUnpickling)
        with pytest.raises(dsl.ArtifactError, match=r"refused, it is writable by its group \(mode 0664\).*runs code"):
            dsl.load_model(numba_artifact)
    model = dsl.load_model(numba_artifact, trusted=True)
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)


def test_bad_arguments_are_clear(numba_artifact, tmp_path):
    with pytest.raises(ValueError, match="on_mismatch='later': expected one of 'recompile', 'refuse'"):
        dsl.load_model(numba_artifact, on_mismatch="later")
    with pytest.raises(dsl.ArtifactError, match="missing.opdsl: cannot open it"):
        dsl.load_model(tmp_path / "missing.opdsl")


def test_cli_compile_then_run(onnx_file, tmp_path, capsys):
    from dsl.cli.main import main
    art = tmp_path / "m.opdsl"
    assert main(["compile", str(onnx_file), "-o", str(art)]) == 0
    assert f"{art}:" in capsys.readouterr().out
    np.save(tmp_path / "x.npy", X)
    assert main(["run", str(art), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), _reference(X), rtol=1e-4, atol=1e-4)
    data = bytearray(art.read_bytes())
    data[-3] ^= 0xFF  # the last section, the ONNX source
    art.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["run", str(art), "--random", "--output-dir", str(tmp_path / "out")]) == 2
    assert "opdsl: error:" in capsys.readouterr().err
    assert main(["compile", str(onnx_file)]) == 2
    assert "give the artifact to write with -o" in capsys.readouterr().err


@pytest.mark.slow
def test_a_package_model_runs_from_its_artifact_in_a_fresh_process(tmp_path):
    """`opdsl compile --package` records the package; `opdsl run MODEL.opdsl` in a new process
    registers it again without being told (the custom op's class is in the pickled graph)."""
    import runpy
    from dsl.cli.main import main
    pkg = ROOT / "examples" / "qaic_package"
    onnx.save(runpy.run_path(str(pkg / "build_model.py"))["build"](), str(tmp_path / "pkg.onnx"))
    assert main(["compile", str(tmp_path / "pkg.onnx"), "-o", str(tmp_path / "pkg.opdsl"), "--package", str(pkg)]) == 0
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for model, extra, out in (("pkg.opdsl", [], "a"), ("pkg.onnx", ["--package", str(pkg)], "b")):
        done = subprocess.run([sys.executable, "-m", "dsl.cli", "run", str(tmp_path / model), "--input",
                               f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / out), *extra],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "a" / "y.npy"), np.load(tmp_path / "b" / "y.npy"))


def test_saving_without_a_disk_cache_warns_that_no_code_is_carried(onnx_file, tmp_path, monkeypatch):
    from backends import cache
    model = dsl.load_onnx(str(onnx_file), backend="numba")
    monkeypatch.setenv("OPDSL_NO_DISK_CACHE", "1")
    with pytest.warns(dsl.ArtifactWarning, match="carries no machine code"):
        model.save(tmp_path / "m.opdsl")
    assert artifact_format.read(tmp_path / "m.opdsl").header["code"] == []
    monkeypatch.delenv("OPDSL_NO_DISK_CACHE")
    cache.reset()
    loaded = dsl.load_model(tmp_path / "m.opdsl")  # its kernels come from this process's cache
    np.testing.assert_allclose(loaded.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)


def test_a_touched_source_keeps_the_artifact_and_an_edited_one_rebuilds(onnx_file, tmp_path, monkeypatch):
    """The artifact's toolchain names opdsl's source by content: a clean clone (new file times)
    loads it as it is; an edited source file rebuilds it from its ONNX source with one warning."""
    tree = tmp_path / "tree"
    (tree / "ops").mkdir(parents=True)
    op_file = tree / "ops" / "op.py"
    op_file.write_text("SCALE = 1\n")
    monkeypatch.setattr(plan_cache, "source_roots", lambda: [tree / "ops"])
    monkeypatch.setattr(plan_cache, "_DIGEST", {})
    from dsl.opgraph import artifact_save
    probe = artifact_save._probe  # its process digests the real tree: stamp this one's instead
    monkeypatch.setattr(artifact_save, "_probe", lambda *a: dict(probe(*a), toolchain=plan_cache.toolchain_key()))
    path = tmp_path / "m.opdsl"
    dsl.load_onnx(str(onnx_file), backend="interpreter").save(path, source=onnx_file)
    st = op_file.stat()
    os.utime(op_file, ns=(st.st_atime_ns + 10**12, st.st_mtime_ns + 10**12))
    plan_cache._DIGEST.clear()  # as a new process would
    with warnings.catch_warnings():
        warnings.simplefilter("error", dsl.ArtifactWarning)
        model = dsl.load_model(path)
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)
    op_file.write_text("SCALE = 2\n")  # the same size; its old time put back
    os.utime(op_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    plan_cache._DIGEST.clear()
    with pytest.warns(dsl.ArtifactWarning, match="another toolchain"):
        model = dsl.load_model(path)
    np.testing.assert_allclose(model.run({"x": X})["y"], _reference(X), rtol=1e-4, atol=1e-4)


def test_a_graph_that_does_not_unpickle_is_a_clear_error(numba_artifact, monkeypatch):
    """The graph is unpickled in the reading thread; its failure is raised by load_model itself."""
    class Broken:
        @staticmethod
        def loads(*a, **k):
            raise ModuleNotFoundError("No module named 'gone_ops'")
        Unpickler = loads
    monkeypatch.setattr(artifact_load, "pickle", Broken)
    with pytest.raises(dsl.ArtifactError, match=r"section 'graph' does not load in this process "
                                                r"\(ModuleNotFoundError: No module named 'gone_ops'\).*packages="):
        dsl.load_model(numba_artifact)
