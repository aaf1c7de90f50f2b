"""The ``opdsl`` command line, run as a real subprocess."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

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
    assert r.returncode == 1
    assert f"{bad}:7:5: error: writing to 'x'" in r.stderr
    assert "    x[0] = 1.0\n    ^" in r.stderr
    assert "Traceback" not in r.stderr and "dsl/" not in r.stderr


def test_missing_file_and_unknown_kernel_are_clean_errors(kernels_file):
    r = opdsl("compile", "no/such/file.py")
    assert r.returncode == 1 and r.stderr.strip() == "opdsl: error: no such file: no/such/file.py"
    r = opdsl("compile", kernels_file, "--kernel", "nope", "--backend", "ir")
    assert r.returncode == 1 and "no @dsl.kernel named nope" in r.stderr and "Traceback" not in r.stderr


def test_only_implemented_commands_exist(capsys):
    r = opdsl("--help")
    assert r.returncode == 0
    assert all(c in r.stdout for c in ("demo", "compile", "cache"))
    assert "new-package" not in r.stdout and "bench" not in r.stdout
    from dsl.cli import main as cli
    for missing in ("run", "new-package", "bench"):  # in-process: argparse exits before any work
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
    assert r.returncode == 1 and ".opdsl-cache" in r.stderr and "Nothing was deleted" in r.stderr
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
