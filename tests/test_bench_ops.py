"""benchmarks/bench_ops.py keeps working: every section runs on tiny sizes, produces numbers
and passes its numerical check.  No timing is asserted (the machine is shared)."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("numba")

from benchmarks import bench_ops  # noqa: E402


def _measured(table, key, names):
    row = table.values[key]
    for name in names:
        assert row[name] is not None and row[name] > 0, (key, name, row)


def test_gemm_section_runs_and_checks():
    table = bench_ops.bench_gemm(sizes=(32,), repeat=1)
    assert not table.mismatches
    _measured(table, "32", ["opdsl", "opdsl eager", "numpy BLAS", "onnxruntime", "numba", "ratio"])
    assert "32^3" in table.markdown()


def test_batched_section_runs_and_checks():
    table = bench_ops.bench_batched(shapes=(((2, 8, 4), (2, 4, 8)),), repeat=1)
    assert not table.mismatches
    _measured(table, "2x8x4 @ 2x4x8", ["opdsl", "numpy", "onnxruntime", "ratio"])


def test_linear_section_runs_and_checks():
    table = bench_ops.bench_linear(shapes=(((8, 4), (4, 8)),), repeat=1)
    assert not table.mismatches
    _measured(table, "8x4 @ 4x8", ["opdsl", "numpy", "onnxruntime", "ratio"])
    assert "8x4 @ 4x8" in table.markdown()


def test_half_section_runs_and_checks():
    if "bf16" not in bench_ops.half_dtypes():
        pytest.skip("MatMul does not take bf16 here")
    table = bench_ops.bench_half(sizes=(16,), repeat=1, only=("bf16",))  # f16 is the same path: one compile less
    assert not table.mismatches
    _measured(table, "16", ["f32", "bf16", "bf16/f32"])


def test_conv_section_runs_and_checks():
    table = bench_ops.bench_conv(shapes=((3, 8, 4, 3, 1),), repeat=1)
    assert not table.mismatches
    _measured(table, "3, 8 -> 4, 3x3, s1", ["opdsl", "onnxruntime", "ratio"])
    assert table.values["geomean"]["ratio"] is not None


def test_a_wrong_result_is_reported_not_timed():
    table = bench_ops.Table("t", ["case"])
    want = np.ones((4, 4))
    good = bench_ops.checked_cases(table, {"right": lambda: np.ones((4, 4), np.float32),
                                           "wrong": lambda: np.zeros((4, 4), np.float32)}, want, "4x4")
    assert list(good) == ["right"]
    assert len(table.mismatches) == 1 and "wrong" in table.mismatches[0]


def test_numpy_child_runs_without_the_openblas_overrides(monkeypatch):
    from benchmarks.blas_child import SLOW_BLAS_VARS, numpy_matmul_times
    for name in SLOW_BLAS_VARS:
        monkeypatch.setenv(name, "Haswell" if name.endswith("CORETYPE") else "262144")
    got = numpy_matmul_times([{"name": "8", "a": [8, 8], "b": [8, 8]}], repeat=1)
    assert got["env"] == {name: None for name in SLOW_BLAS_VARS}
    assert got["results"]["8"]["best"] > 0


def test_gemm_phases_bench_runs():
    """benchmarks/bench_gemm_phases.py: every phase of a packed batched product is timed (its
    Model.run result is checked against numpy inside), and the launch-cost rows are all there."""
    from benchmarks import bench_gemm_phases
    text = bench_gemm_phases.phases(2, shapes=(((2, 64, 64), (2, 64, 64)),))
    row = [line for line in text.splitlines() if line.startswith("| 2x64x64 @ 2x64x64")]
    assert len(row) == 1 and row[0].count("|") == 10 and "nan" not in row[0]
    launch = bench_gemm_phases.launch_cost(2)
    assert "empty njit, same 30 arguments" in launch and "launcher(frozen values, grid)" in launch


def test_batched_entries_bench_runs(capsys):
    """benchmarks/bench_batched_entries.py: a round times all four sides (Model.run's result is
    checked against numpy inside)."""
    from benchmarks import bench_batched_entries
    assert bench_batched_entries.main(["--a", "2,64,64", "--b", "2,64,64", "--rounds", "1", "--repeat", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 1 and rows[0].count("|") == 6 and "nan" not in rows[0]


def test_spin_bench_batched_mode_runs(capsys):
    """benchmarks/bench_spin.py batched: every side of both modes gets a row (Model.run's result is
    checked against numpy inside; numpy runs in its own child process)."""
    from benchmarks import bench_spin
    bench_spin.batched(1, 2, 0.001, a_shape=(2, 16, 16), b_shape=(2, 16, 16))
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| back to back", "| after"))]
    assert len(rows) == 6 and all(row.count("|") == 9 and "nan" not in row for row in rows)
