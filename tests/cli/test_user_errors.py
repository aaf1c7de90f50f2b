"""Every CLI user error prints ``opdsl: error: ...`` saying what to do and exits 2, without a
traceback; ``--debug`` shows the traceback.  ``run`` and ``bench`` take a package's manifest
file as well as its folder."""
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from tests.package.helpers import EXAMPLE, registry_restored  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_registry():
    """`run --package` registers the package's ops; each test starts from the registry it found."""
    with registry_restored():
        yield


@pytest.fixture(scope="module")
def qaic_model(tmp_path_factory):
    """The example package's model: x[batch, 16] -> CustomRelu -> RMSNorm -> Copy -> y."""
    import runpy
    path = tmp_path_factory.mktemp("errs") / "model.onnx"
    onnx.save(runpy.run_path(str(EXAMPLE / "build_model.py"))["build"](), str(path))
    return path


def _fails(cli, *args, says):
    code, out, err = cli(*args)
    assert code == 2, (code, out, err)
    assert err.startswith("opdsl: error: ") and "Traceback" not in err, err
    assert re.search(says, err), err
    return err


def test_npz_feeds(qaic_model, tmp_path, cli):
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    np.savez(tmp_path / "named.npz", x=x, other=np.zeros(3))
    np.savez(tmp_path / "single.npz", x)
    for feed in ("named.npz", "single.npz"):
        code, out, err = cli("run", qaic_model, "--package", EXAMPLE, "--input", f"x={tmp_path / feed}",
                             "--output-dir", tmp_path / feed[:-4], "--backend", "interpreter")
        assert code == 0, err
        assert f"input: x float32[2, 16] from {tmp_path / feed}" in out
    np.testing.assert_array_equal(np.load(tmp_path / "named" / "y.npy"), np.load(tmp_path / "single" / "y.npy"))
    np.savez(tmp_path / "two.npz", a=x, b=x)
    _fails(cli, "run", qaic_model, "--package", EXAMPLE, "--input", f"x={tmp_path / 'two.npz'}", "--output-dir",
           tmp_path / "o", says=r"the .npz archive holds 2 arrays \(a, b\) and none is named 'x'; save the input as x")


def test_random_input_arguments(qaic_model, tmp_path, cli):
    base = ("run", qaic_model, "--package", EXAMPLE, "--random", "--output-dir", tmp_path / "o")
    _fails(cli, *base, "--dim", "batch=100000000000",
           says=r"input 'x': random data of shape \[100000000000, 16\] \(float32\) needs 6400000000000 bytes, more "
                r"than 4 GiB; give smaller --dim sizes or pass the array with --input x=FILE.npy")
    _fails(cli, *base, "--dim", "batch=2", "--seed", "-1", says=r"--seed -1: the seed must be an integer >= 0")
    assert not (tmp_path / "o").exists()


def test_unusable_output_dir(qaic_model, tmp_path, cli):
    (tmp_path / "file").write_text("")
    _fails(cli, "run", qaic_model, "--package", EXAMPLE, "--random", "--dim", "batch=2", "--output-dir",
           tmp_path / "file" / "out", says=rf"--output-dir {re.escape(str(tmp_path / 'file' / 'out'))}: cannot be "
                                           rf"created, {re.escape(str(tmp_path / 'file'))} is not a folder")


def test_broken_package_manifest(qaic_model, tmp_path, cli):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "opdsl-package.yaml").write_text("name: bad\nversion: 1\nops: \x00\n")
    _fails(cli, "run", qaic_model, "--package", pkg, "--random", "--dim", "batch=2", "--output-dir", tmp_path / "o",
           says=r"opdsl-package.yaml:3: not valid YAML: character U\+0000")
    _fails(cli, "check", pkg, says=r"opdsl-package.yaml:3: not valid YAML")


@pytest.fixture(scope="module")
def stub_package(qaic_model, tmp_path_factory):
    """`opdsl new-package` of the example's model: every infer and kernel is a stub that raises."""
    from dsl.cli import main
    folder = tmp_path_factory.mktemp("stubs") / "stub_ops"
    assert main.main(["new-package", str(qaic_model), "-o", str(folder)]) == 0
    return folder


def test_a_stub_infer_or_kernel_that_raises(qaic_model, stub_package, tmp_path, cli):
    args = ("run", qaic_model, "--package", stub_package, "--random", "--dim", "batch=2", "--output-dir",
            tmp_path / "o", "--backend", "interpreter")
    _fails(cli, *args, says=r"opdsl cannot load .*model.onnx: NotImplementedError: CustomRelu: infer the output "
                            r"specs in custom_relu_functions.py")
    for f in stub_package.glob("*_functions.py"):  # infer written; the kernels stay stubs
        f.write_text(re.sub(r"    raise NotImplementedError\(.*\)\n", "    return specs[0]\n", f.read_text()))
    _fails(cli, *args, says=r"running .*model.onnx: NotImplementedError: CustomRelu \(com.qaic.example\): "
                            r"kernels.py:custom_relu is a stub")
    from dsl.cli import main
    with pytest.raises(Exception) as e:  # --debug: the exception (and its traceback), not the message
        main.main([str(a) for a in args] + ["--debug"])
    assert isinstance(e.value.__cause__, NotImplementedError)


def test_missing_ops_name_the_package_option(qaic_model, tmp_path, cli):
    err = _fails(cli, "run", qaic_model, "--random", "--dim", "batch=2", "--output-dir", tmp_path / "o",
                 says=r"pass their op package with --package PKG/ or --package PKG/opdsl-package.yaml")
    assert "packages=[" not in err


def test_run_and_bench_take_the_manifest_file(qaic_model, tmp_path, cli):
    manifest = EXAMPLE / "opdsl-package.yaml"
    code, out, err = cli("run", qaic_model, "--package", manifest, "--random", "--dim", "batch=2",
                         "--output-dir", tmp_path / "o", "--backend", "interpreter")
    assert code == 0, err
    assert np.load(tmp_path / "o" / "y.npy").shape == (2, 16)
    code, out, err = cli("bench", qaic_model, "--package", manifest, "--backend", "interpreter", "--repeat", "1",
                         "--dim", "batch=2")
    assert code == 0, err
    _fails(cli, "run", qaic_model, "--package", tmp_path / "Config.yaml", "--random", "--output-dir", tmp_path / "o",
           says=r"--package .*Config.yaml: no such folder or manifest")
