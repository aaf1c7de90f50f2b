"""benchmarks/bench_gemm_blocks.py: variants parse into TileConfigs and a run checks each result."""
import pytest

from benchmarks import bench_gemm_blocks
from ops.gemm_packed import TileConfig

BASE = TileConfig(V=16, MR=8, KC=256, MC=64, NC=2048)


def test_variants_change_only_the_fields_given():
    assert bench_gemm_blocks.parse_variant("mc192=,,,192", BASE) == ("mc192", TileConfig(16, 8, 256, 192, 2048), None)
    assert bench_gemm_blocks.parse_variant("nopf=,,,,,0", BASE) == ("nopf", BASE, 0)
    assert bench_gemm_blocks.parse_variant("target=", BASE) == ("target", BASE, None)


def test_a_run_prints_each_variant_against_numpy(capsys):
    pytest.importorskip("numba")
    bench_gemm_blocks.main(["--shapes", "20x40x36", "--variant", "own=", "--variant", "pf=,,,,,1", "--reps", "2"])
    out = capsys.readouterr().out
    assert "20x40x36: numpy" in out and " own " in out and " pf " in out
