"""``opdsl run``: a model on .npy inputs (or seeded random data), one .npy per output."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """x[batch, 4], b[4] -> Relu(x) (an output name that is no file name), x + b, Cast(b, int64)."""
    nodes = [H.make_node("Relu", ["x"], ["out/relu:0"]), H.make_node("Add", ["x", "b"], ["sum"]),
             H.make_node("Cast", ["b"], ["bi"], to=TP.INT64)]
    g = H.make_graph(nodes, "m", [H.make_tensor_value_info("x", TP.FLOAT, ["batch", 4]),
                                  H.make_tensor_value_info("b", TP.FLOAT, [4])],
                     [H.make_tensor_value_info("out/relu:0", TP.FLOAT, ["batch", 4]),
                      H.make_tensor_value_info("sum", TP.FLOAT, ["batch", 4]),
                      H.make_tensor_value_info("bi", TP.INT64, [4])])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("run") / "m.onnx"
    onnx.save(m, str(path))
    return path


def test_run_writes_one_npy_per_output(model, tmp_path, backend, cli):
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    b = np.array([0.5, -1, 2, 3.25], np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "out" / "deeper"
    code, stdout, err = cli("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"b={tmp_path / 'b.npy'}",
                            "--output-dir", out, "--backend", backend)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["bi.npy", "out_relu_0.npy", "sum.npy"]
    np.testing.assert_array_equal(np.load(out / "out_relu_0.npy"), np.maximum(x, 0))
    np.testing.assert_array_equal(np.load(out / "sum.npy"), x + b)
    bi = np.load(out / "bi.npy")
    assert bi.dtype == np.int64 and bi.tolist() == [0, -1, 2, 3]
    assert f"output: out/relu:0 float32[2, 4] -> {out / 'out_relu_0.npy'}" in stdout
    assert f"input: x float32[2, 4] from {tmp_path / 'x.npy'}" in stdout


def test_random_inputs_are_seeded_and_take_dims(model, tmp_path, cli):
    runs = []
    for i, seed in enumerate((7, 7, 8)):
        out = tmp_path / str(i)
        code, stdout, err = cli("run", model, "--random", "--dim", "batch=3", "--seed", seed,
                                "--output-dir", out, "--backend", "interpreter")
        assert code == 0, err
        assert "input: x float32[3, 4] random normal" in stdout
        runs.append(np.load(out / "sum.npy"))
    assert runs[0].shape == (3, 4)
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_file_inputs_win_over_random(model, tmp_path, cli):
    np.save(tmp_path / "x.npy", np.ones((5, 4), np.float32))
    code, stdout, err = cli("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--random",
                            "--output-dir", tmp_path / "o", "--backend", "interpreter")
    assert code == 0, err
    assert "input: b float32[4] random normal" in stdout
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "out_relu_0.npy"), np.ones((5, 4), np.float32))


def test_missing_inputs_are_listed(model, tmp_path, cli):
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    code, _, err = cli("run", model, "--output-dir", tmp_path / "o", "--backend", "interpreter")
    assert code == 2
    assert err.strip() == ("opdsl: error: no --input for 2 of the model's 2 input(s): x (float32[batch, 4]), "
                           "b (float32[4]); give each with --input NAME=FILE.npy, or --random for seeded random data")
    code, _, err = cli("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "o")
    assert code == 2 and "no --input for 1 of the model's 2 input(s): b (float32[4])" in err
    assert not (tmp_path / "o").exists()  # nothing written before the inputs are complete


def test_argument_errors(model, tmp_path, cli):
    np.save(tmp_path / "x64.npy", np.ones((2, 4)))
    (tmp_path / "file").write_text("")
    common = ("--output-dir", tmp_path / "o", "--backend", "interpreter")
    for args, says in (
            (["--random"], "input 'x' has dims [batch, 4]: give the size of 'batch' with --dim batch=N"),
            (["--random", "--dim", "seq=2"], "--dim seq: the model has no symbolic dimension 'seq'; symbolic dims: batch"),
            (["--random", "--input", "z=a.npy"], "--input z: the model has no input 'z'; inputs: x, b"),
            (["--random", "--input", f"x={tmp_path / 'x64.npy'}"],
             f"--input x={tmp_path / 'x64.npy'}: the file holds float64, the model takes float32"),
            (["--random", "--input", f"x={tmp_path / 'no.npy'}"], f"--input x={tmp_path / 'no.npy'}: no such file"),
            (["--random", "--dim", "batch=2", "--package", tmp_path / "nope"],
             f"--package {tmp_path / 'nope'}: no such folder or manifest; give an op package folder (holding "
             "opdsl-package.yaml) or its .yaml manifest file")):
        code, _, err = cli("run", model, *args, *common)
        assert (code, err.strip()) == (2, f"opdsl: error: {says}"), args
    code, _, err = cli("run", model, "--random", "--dim", "batch=2", "--output-dir", tmp_path / "file")
    assert code == 2 and err.strip() == f"opdsl: error: --output-dir {tmp_path / 'file'}: exists and is not a folder; give a folder (created if missing)"
    code, _, err = cli("run", tmp_path / "none.onnx", "--output-dir", tmp_path / "o")
    assert code == 2 and err.strip() == f"opdsl: error: no such file: {tmp_path / 'none.onnx'}"
    code, _, err = cli("run", model, "--random", "--dim", "batch=2")
    assert code == 2 and "the following arguments are required: --output-dir" in err


def test_a_wrong_shape_is_a_clean_error(model, tmp_path, cli):
    np.save(tmp_path / "x.npy", np.ones((2, 5), np.float32))
    code, _, err = cli("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--random",
                       "--output-dir", tmp_path / "o", "--backend", "interpreter")
    assert code == 2 and err.startswith(f"opdsl: error: running {model}: input 'x' has shape (2, 5)")
    assert "Traceback" not in err


def test_packages_are_handed_to_load_onnx(model, tmp_path, cli, monkeypatch):
    """Each --package folder goes to dsl.load_onnx(packages=[...]) in order (folders are the package
    helper's part; this model needs none, so the call is passed on without them)."""
    import dsl
    seen = []
    real = dsl.load_onnx

    def spy(path, packages=(), **kw):
        seen.append(list(packages))
        return real(path, **kw)
    monkeypatch.setattr(dsl, "load_onnx", spy)
    (tmp_path / "p1").mkdir()
    (tmp_path / "p2").mkdir()
    code, _, err = cli("run", model, "--random", "--dim", "batch=1", "--package", tmp_path / "p1",
                       "--package", tmp_path / "p2", "--output-dir", tmp_path / "o", "--backend", "interpreter")
    assert code == 0, err
    assert seen == [[str(tmp_path / "p1"), str(tmp_path / "p2")]]


def test_a_model_with_unknown_ops_names_them(tmp_path, cli):
    g = H.make_graph([H.make_node("Frob", ["x"], ["y"], domain="com.nowhere", name="f")], "m",
                     [H.make_tensor_value_info("x", TP.FLOAT, [2])], [H.make_tensor_value_info("y", TP.FLOAT, [2])])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("com.nowhere", 1)])
    onnx.save(m, str(tmp_path / "m.onnx"))
    code, _, err = cli("run", tmp_path / "m.onnx", "--random", "--output-dir", tmp_path / "o", "--backend", "interpreter")
    assert code == 2 and err.startswith(f"opdsl: error: opdsl cannot load {tmp_path / 'm.onnx'}: ")
    assert "com.nowhere::Frob (opset 1): 1 node, first 'f'" in err


def test_output_file_names_are_safe_and_distinct():
    from dsl.cli.run import file_names
    assert file_names(["y", "a/b", "a:b", "../up", "", "Y", "x.y"]) == {
        "y": "y.npy", "a/b": "a_b.npy", "a:b": "a_b_2.npy", "../up": "_up.npy", "": "output.npy",
        "Y": "Y_2.npy", "x.y": "x.y.npy"}


def test_a_package_error_is_printed_as_it_is(model, tmp_path, cli):
    """A bad manifest's PackageError ("<manifest>:<line>: <key>: ...") reaches the user without a traceback."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "opdsl-package.yaml").write_text(
        "name: bad\nversion: 1\nops:\n  - type: X\n    domain: com.example\n    inputs:\n"
        "      - {name: x, dtypes: [f33]}\n    outputs:\n      - {name: y, like: x}\n"
        "    implementations:\n      - {backend: interpreter, kernel: \"k.py:f\"}\n")
    code, _, err = cli("run", model, "--random", "--dim", "batch=1", "--package", pkg,
                       "--output-dir", tmp_path / "o", "--backend", "interpreter")
    assert code == 2
    assert err.startswith(f"opdsl: error: {pkg / 'opdsl-package.yaml'}:7: ") and "f33" in err
    assert "Traceback" not in err
