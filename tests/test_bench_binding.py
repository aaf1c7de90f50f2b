"""benchmarks/bench_binding.py runs end to end (tiny shapes): both Model.run paths agree with each
other and the table has a row per case."""
import pytest

pytest.importorskip("onnxruntime")


def test_bench_binding_tiny(monkeypatch, capsys):
    from benchmarks import bench_binding
    monkeypatch.setattr(bench_binding, "CONVS", ((4, 8, 8, 1, 1),))
    monkeypatch.setattr(bench_binding, "MATMULS", (((2, 8, 4), (2, 4, 8)),))
    assert bench_binding.main(["--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| conv") or
            line.startswith("| matmul")]
    assert len(rows) == 2 and all(line.count("x |") == 2 for line in rows)
