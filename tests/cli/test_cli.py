"""The ``opdsl`` command line, run as a real subprocess."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KERNELS = textwrap.dedent("""
    import dsl
    from dsl import In, Out, f32

    @dsl.kernel
    def scale(x: In[f32], y: Out[f32], a: f32 = 2.0):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = x.flat[i] * a

    @dsl.kernel(threads=2)
    def first_column(x: In[f32, 2], y: Out[f32, 1]):
        for i in range(x.shape[0]):
            y[i] = x[i, 0] + 1.0
""")

BROKEN = textwrap.dedent("""
    import dsl
    from dsl import In, Out, f32

    @dsl.kernel
    def broken(x: In[f32], y: Out[f32]):
        x[0] = 1.0
""")


def opdsl(*args, cache=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if cache is not None:
        env["OPDSL_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "dsl.cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def kernels_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "kernels.py"
    p.write_text(KERNELS)
    return p


def test_demo_runs_and_checks_against_numpy():
    r = opdsl("demo", "--backend", "interpreter")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("leaky_relu", "softmax_rows", "matmul"):
        assert f"{name:<14}interpreter" in r.stdout
    assert r.stdout.count(" ok") == 3
    assert "all results match numpy" in r.stdout


def test_compile_emit_prints_every_kernel_of_the_file(kernels_file):
    r = opdsl("compile", kernels_file, "--backend", "ir", "--emit")
    assert r.returncode == 0, r.stderr
    assert "# ---- scale (ir)" in r.stdout and "# ---- first_column (ir)" in r.stdout
    assert r.stdout.index("scale") < r.stdout.index("first_column")  # source order
    assert "kernel first_column(threads=2)" in r.stdout


def test_compile_builds_for_a_backend(kernels_file):
    r = opdsl("compile", kernels_file, "--backend", "interpreter", "--kernel", "scale")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "scale: compiled for interpreter"


def test_compile_emit_opencl_source(kernels_file, tmp_path):
    from backends import base
    try:
        reason = base.get("opencl").available()
    except ImportError as e:
        reason = f"opencl backend cannot be imported: {e}"
    if reason:
        pytest.skip(reason)
    r = opdsl("compile", kernels_file, "--backend", "opencl", "--emit", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "__kernel" in r.stdout and "void scale(" in r.stdout and "void first_column(" in r.stdout


def test_compile_error_is_printed_without_traceback(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text(BROKEN)
    r = opdsl("compile", bad, "--backend", "ir", "--emit")
    assert r.returncode == 2
    assert f"{bad}:7:5: error: writing to 'x'" in r.stderr
    assert "    x[0] = 1.0\n    ^" in r.stderr
    assert "Traceback" not in r.stderr and "dsl/" not in r.stderr


def test_missing_file_and_unknown_kernel_are_clean_errors(kernels_file):
    r = opdsl("compile", "no/such/file.py")
    assert r.returncode == 2 and r.stderr.strip() == "opdsl: error: no such file: no/such/file.py"
    r = opdsl("compile", kernels_file, "--kernel", "nope", "--backend", "ir")
    assert r.returncode == 2 and "no @dsl.kernel named nope" in r.stderr and "Traceback" not in r.stderr


def test_only_implemented_commands_exist(capsys):
    r = opdsl("--help")
    assert r.returncode == 0
    assert all(c in r.stdout for c in ("demo", "compile", "cache", "bench", "run", "new-package"))
    from dsl.cli import main as cli
    for missing in ("convert", "new_package"):  # in-process: argparse exits before any work
        with pytest.raises(SystemExit) as e:
            cli.main([missing])
        assert e.value.code == 2
        assert "invalid choice" in capsys.readouterr().err


def test_cache_info_and_clear(tmp_path):
    pytest.importorskip("backends.cache")
    entry = tmp_path / "numba" / "0123abcd.py"
    entry.parent.mkdir()
    entry.write_text("x = 1\n" * 100)
    r = opdsl("cache", "info", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    assert str(tmp_path) in r.stdout and "numba" in r.stdout
    r = opdsl("cache", "clear", cache=tmp_path)  # no marker: opdsl did not create this folder
    assert r.returncode == 2 and ".opdsl-cache" in r.stderr and "Nothing was deleted" in r.stderr
    assert entry.exists()
    (tmp_path / ".opdsl-cache").write_text("made by opdsl")
    r = opdsl("cache", "clear", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "removed 1 file(s), 600 bytes" in r.stdout
    assert not entry.exists()


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("opdsl")
    if not script.exists():
        pytest.skip("opdsl is not installed in this environment (pip install .)")
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("opdsl ")


# --------------------------------------------------------------------------- bench

def tiny_model(path, opset=17, extra_nodes=()):
    """x[batch,3,8,8] -> Conv -> Relu -> MatMul -> Add -> y: only ops opdsl has."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper as H
    from onnx import numpy_helper as NH
    rng = np.random.default_rng(0)
    nodes = [H.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             H.make_node("Relu", ["c"], ["r"], name="relu"),
             H.make_node("MatMul", ["r", "m"], ["mm"], name="matmul"),
             H.make_node("Add", ["mm", "b"], ["y"], name="add"), *extra_nodes]
    inits = [NH.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             NH.from_array(rng.standard_normal((8, 8)).astype(np.float32), "m"),
             NH.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    g = H.make_graph(nodes, "tiny", [H.make_tensor_value_info("x", TP.FLOAT, ["batch", 3, 8, 8])],
                     [H.make_tensor_value_info("y", TP.FLOAT, ["batch", 4, 8, 8])], inits)
    model = H.make_model(g, opset_imports=[H.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("bench") / "tiny.onnx")


def test_bench_compares_with_onnxruntime_and_profiles(tiny):
    pytest.importorskip("onnxruntime")
    r = opdsl("bench", tiny, "--backend", "interpreter", "--repeat", "2", "--warmup", "0", "--dim", "batch=2")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"model: {tiny} (4 nodes, opset 17), opdsl backend interpreter"
    assert lines[1] == "input: x float32[2, 3, 8, 8] random normal"
    assert lines[2].startswith("opdsl graph: 2 nodes after rewrites (") and "fused=2" in lines[2]  # Conv+Relu, MatMul+Add
    for i, label in enumerate(("opdsl load + plan:", "opdsl first run:", "opdsl compile time:", "opdsl latency:",
                               "onnxruntime latency:", "ratio opdsl / onnxruntime:"), start=3):
        assert lines[i].startswith(label), (label, lines[i])
    assert "(median of 2, min " in lines[6] and "onnxruntime 1." in lines[7]
    assert lines[9].startswith("output y: max abs diff ") and lines[9].endswith("(ok)")
    assert lines[11].startswith("slowest 2 of 2 nodes (profile: mean of 2 runs")
    assert lines[12].split() == ["node", "op", "impl", "mean", "share", "output", "shape"]
    assert {ln.split()[0] for ln in lines[14:16]} == {"conv", "matmul"}  # matmul: MatMul + bias Add
    assert all(ln.split()[-4:] == ["(2,", "4,", "8,", "8)"] for ln in lines[14:16])
    assert lines[17].startswith("by op type: ")
    assert "profile of 'tiny'" not in r.stdout  # the full table only with --profile


def test_bench_profile_input_files_and_a_mismatch(tiny, tmp_path):
    pytest.importorskip("onnxruntime")
    import numpy as np
    x = np.random.default_rng(5).standard_normal((3, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = opdsl("bench", tiny, "--backend", "interpreter", "--repeat", "1", "--profile", "--top", "2",
              "--input", f"x={tmp_path / 'x.npy'}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"input: x float32[3, 3, 8, 8] from {tmp_path / 'x.npy'}" in r.stdout
    assert "slowest 2 of 2 nodes" in r.stdout
    full = r.stdout[r.stdout.index("profile of 'tiny' [interpreter], mean of 1 run(s): "):].splitlines()
    assert [ln.split()[0] for ln in full[3:]] == ["conv", "matmul"]  # every node, graph order
    r = opdsl("bench", tiny, "--backend", "interpreter", "--repeat", "1", "--rtol", "0", "--atol", "0",
              "--input", f"x={tmp_path / 'x.npy'}")
    if "max abs diff 0 (ok)" not in r.stdout:  # bit-identical to onnxruntime is possible, then nothing to see
        assert r.returncode == 1 and "MISMATCH (rtol 0.0, atol 0.0" in r.stdout


def test_bench_argument_and_model_errors_are_clean(tiny, tmp_path, capsys):
    """In-process (each error comes before any kernel runs): the message alone, exit code 1."""
    import numpy as np
    from dsl.cli import main as cli
    np.save(tmp_path / "x64.npy", np.zeros((1, 3, 8, 8)))
    for args, says in ((["--input", "z=a.npy"], "--input z: the model has no input 'z'; inputs: x"),
                       (["--input", "x"], "--input expects NAME=VALUE, got 'x'"),
                       (["--input", f"x={tmp_path / 'x64.npy'}"],
                        f"--input x={tmp_path / 'x64.npy'}: the file holds float64, the model takes float32"),
                       (["--dim", "seq=4"], "--dim seq: the model has no symbolic dimension 'seq'; symbolic dims: batch"),
                       (["--dim", "batch=two"], "--dim batch=two: the size must be an integer"),
                       (["--repeat", "0"], "--repeat must be >= 1, --warmup and --top >= 0")):
        assert cli.main(["bench", str(tiny), "--backend", "interpreter", *args]) == 2
        assert capsys.readouterr().err.strip() == f"opdsl: error: {says}", args
    assert cli.main(["bench", str(tmp_path / "nope.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
    from onnx import helper as H
    missing = tiny_model(tmp_path / "missing.onnx", extra_nodes=[
        H.make_node("Softplux", ["y"], ["s1"], name="sp1"), H.make_node("Softplux", ["s1"], ["s2"], name="sp2"),
        H.make_node("Frob", ["y"], ["f"], name="fr", domain="com.nowhere")])
    import onnx
    m = onnx.load(str(missing))
    m.opset_import.append(H.make_opsetid("com.nowhere", 1))
    onnx.save(m, str(missing))
    assert cli.main(["bench", str(missing), "--backend", "interpreter"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"opdsl: error: opdsl cannot load {missing}: the model uses 2 op type(s) that no "
                          "registered op answers")
    assert "ai.onnx::Softplux (opset 17): 2 nodes, first 'sp1'" in err
    assert "com.nowhere::Frob (opset 1): 1 node, first 'fr'" in err


def test_bench_runs_a_model_with_custom_ops_from_a_package(tmp_path):
    """--package registers the example package's ops; onnxruntime cannot run them, so opdsl is timed
    alone and the note says why; a missing folder is the same error `opdsl run` gives."""
    pytest.importorskip("onnx")
    import onnx
    sys.path.insert(0, str(ROOT / "examples" / "qaic_package"))
    try:
        import build_model
    finally:
        sys.path.pop(0)
    path = tmp_path / "qaic.onnx"
    onnx.save(build_model.build(), str(path))
    pkg = ROOT / "examples" / "qaic_package"
    r = opdsl("bench", path, "--package", pkg, "--backend", "interpreter", "--repeat", "1", "--dim", "batch=2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "onnxruntime latency:   n/a (onnxruntime cannot run the custom ops of com.qaic.example" in r.stdout
    assert "slowest 3 of 3 nodes" in r.stdout and "RMSNorm" in r.stdout
    r = opdsl("bench", path, "--package", tmp_path / "nope", "--backend", "interpreter")
    assert r.returncode == 2 and f"--package {tmp_path / 'nope'}: no such folder" in r.stderr


def test_bench_without_onnxruntime_says_how_to_install_it(tiny, tmp_path):
    (tmp_path / "onnxruntime.py").write_text("raise ImportError('No module named onnxruntime (hidden by the test)')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    r = subprocess.run([sys.executable, "-m", "dsl.cli", "bench", str(tiny), "--backend", "interpreter",
                        "--repeat", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "onnxruntime latency:   n/a (onnxruntime is not installed" in r.stdout
    assert "pip install onnxruntime" in r.stderr
    assert "slowest 2 of 2 nodes" in r.stdout  # opdsl's own numbers still come


def test_bench_times_in_blocks_of_calls():
    """Each round: warm-up calls, then a block of timed calls, per function (onnxruntime's spinning
    workers settle before opdsl's block), until every function has `repeat` samples."""
    from dsl.cli.bench import time_in_blocks
    calls = []
    times = time_in_blocks([lambda: calls.append("a"), lambda: calls.append("b")], repeat=7, warmup=1, block=3, warm_s=0)
    assert [len(t) for t in times] == [7, 7] and all(s >= 0 for t in times for s in t)
    assert "".join(calls) == "aaaa" "bbbb" "aaaa" "bbbb" "aa" "bb"
