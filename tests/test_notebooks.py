"""The worked examples in notebooks/ run top to bottom in a fresh Jupyter kernel.

Each notebook checks its own results against numpy with asserts, so executing it is the
test. A cell tagged ``raises-exception`` shows an error on purpose (a CompileError with its
caret); it must still raise exactly that, or the notebook no longer demonstrates anything.
Notebooks are committed executed, so they read well on a code host: every code cell has run,
and the ones that plot keep their figures (and must still draw them when run here).
"""
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 300  # seconds; generous for a cold compile cache on a busy machine
TORCH = "05_train_then_deploy"
# notebooks that plot, and how many figures each draws (speed per backend, team scaling, the
# loss curve, tiles across cores, GEMM against BLAS)
FIGURES = {"01_first_kernel": 1, "02_team_sync_scratch": 1, TORCH: 1, "06_op_package": 1,
           "08_gemm_speed": 1}


def _torch_importable() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def execute(path: Path, cwd: Path, **env_overrides):
    """Run every cell of ``path`` in a new python3 kernel; -> the executed notebook."""
    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ)
    # the kernel imports dsl/ops/backends from this checkout, installed or not
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(env_overrides)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute(env=env)
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f"{path.name}: a cell failed\n{e}", pytrace=False)
    return nb


def figures(nb) -> int:
    """How many PNG images the notebook's code cells show (matplotlib's inline output)."""
    return sum("image/png" in out.get("data", {}) for cell in nb.cells if cell.cell_type == "code"
               for out in cell.outputs)


def check_outputs(nb, name: str) -> None:
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if "raises-exception" in cell.metadata.get("tags", ()):
            assert errors, f"{name} cell {k} is tagged raises-exception but raised nothing:\n{cell.source}"
            assert errors[0].ename in ("CompileError", "VerifyError", "LaunchError"), \
                f"{name} cell {k} raised {errors[0].ename}: {errors[0].evalue}"
        else:
            assert not errors, f"{name} cell {k} raised {errors[0].ename}"
    assert figures(nb) >= FIGURES.get(name, 0), \
        f"{name} drew {figures(nb)} figure(s), expected {FIGURES.get(name, 0)}"


# A cluster start-up and a GEMM timing sweep: 2 minutes each on 2 cores, run with -m slow.
SLOW_NOTEBOOKS = {"07_dask_scoring", "08_gemm_speed"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p.stem in SLOW_NOTEBOOKS else [])
                                  for p in NOTEBOOKS], ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    if path.stem == TORCH and not _torch_importable():
        pytest.skip("notebook 5 trains in PyTorch: pip install 'opdsl[torch]'")
    check_outputs(execute(path, tmp_path), path.stem)


def test_notebooks_are_clean_and_complete():
    """Every required topic (first kernel, team sync/scratch, custom op in ONNX, composed op,
    train then deploy, GEMM speed) has its notebook; files are valid, python3, small, and saved
    executed: every code cell ran, and the plotting ones keep their figures."""
    stems = {p.stem for p in NOTEBOOKS}
    assert {"01_first_kernel", "02_team_sync_scratch", "03_custom_op_in_onnx", "04_composed_op",
            TORCH} | set(FIGURES) <= stems, stems
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata["kernelspec"]["name"] == "python3", path.name
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), path.name
        assert path.stat().st_size < 200_000, f"{path.name}: strip large outputs"
        not_run = [k for k, cell in enumerate(nb.cells) if cell.cell_type == "code" and cell.execution_count is None]
        assert not not_run, f"{path.name}: code cells {not_run} were saved without running; save it executed"
        assert figures(nb) >= FIGURES.get(path.stem, 0), f"{path.name}: saved without its figures"
