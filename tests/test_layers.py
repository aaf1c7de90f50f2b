"""The import layers of docs/architecture.md hold: `lint-imports` checks the contracts in
pyproject.toml (each layer imports only the layers below it, and nothing below the kernel
runtime imports the dsl facade), counting imports made inside functions too."""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_layer_contracts_are_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "lint-imports is missing: pip install '.[test]' brings import-linter"
    r = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_import_dsl_loads_only_the_language_and_the_kernel_runtime():
    code = ("import sys, dsl; print(sorted(m for m in sys.modules if m.startswith(('dsl.opgraph', 'dsl.onnx', "
            "'ops', 'onnx', 'numba', 'pyopencl'))))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
