"""benchmarks/bench_f32_cpu.py's reading of its blocks (no timing): each block's best-to-best
ratio, their median and range, and the child report --processes reads back."""
import json

import numpy as np

from benchmarks import bench_f32_cpu


def test_spread_reports_each_blocks_ratio_its_median_and_range():
    text = bench_f32_cpu.spread("resnet50", [(0.060, 0.060), (0.066, 0.060), (0.057, 0.060)], "3 blocks")
    assert "ratio per block 1.00 1.10 0.95" in text
    assert "median 1.00x, range 0.95-1.10x (spread 15 %)" in text
    assert "opdsl best per block 57.00-66.00 ms, onnxruntime 60.00-60.00 ms" in text


def test_a_child_reports_every_round_of_every_block(monkeypatch, capsys):
    """--json (what a --processes child prints): one line per model with each side's times per
    block, read back as they were measured."""
    calls = iter(range(1000))
    monkeypatch.setattr(bench_f32_cpu, "alternate",
                        lambda ours, theirs, reps, clock: (np.full(reps, 2.0 + next(calls)), np.full(reps, 1.0)))

    class Model:
        def run(self, feeds):
            return {"y": np.ones(3, np.float32)}

    class Session:
        def __init__(self, *a, **k):
            pass

        def run(self, outputs, feeds):
            return [np.ones(3, np.float32)]
    import dsl
    import onnxruntime
    monkeypatch.setattr(dsl, "load_onnx", lambda path, backend: Model())
    monkeypatch.setattr(onnxruntime, "InferenceSession", Session)
    monkeypatch.setattr(bench_f32_cpu.models, "random_feeds", lambda proto: {"x": np.ones(3, np.float32)})
    bench_f32_cpu.run_models(reps=3, only="squeezenet", blocks=2, as_json=True)
    row = json.loads(capsys.readouterr().out.strip())
    assert row["model"] == "squeezenet" and row["opdsl"] == [[2.0] * 3, [3.0] * 3]
    assert row["onnxruntime"] == [[1.0] * 3, [1.0] * 3]
