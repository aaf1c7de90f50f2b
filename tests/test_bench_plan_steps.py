"""benchmarks/bench_plan_steps.py: a plan's steps are labelled by node and kind, and both modes
time every step of a small fire-like model (squeeze 1×1, expand 1×1 and 3×3, Concat)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from benchmarks import bench_plan_steps


def _fire_model(path):
    rng = np.random.default_rng(0)

    def conv(name, x, m, c, k, pads):
        w = numpy_helper.from_array((rng.standard_normal((m, c, k, k)) * 0.2).astype(np.float32), f"{name}_w")
        node = helper.make_node("Conv", [x, w.name], [f"{name}_c"], kernel_shape=[k, k], pads=[pads] * 4)
        return [node, helper.make_node("Relu", [f"{name}_c"], [name])], [w]

    nodes, inits = [], []
    for name, x, m, c, k, p in (("s", "x", 16, 32, 1, 0), ("e1", "s", 32, 16, 1, 0), ("e3", "s", 32, 16, 3, 1)):
        n, i = conv(name, x, m, c, k, p)
        nodes += n
        inits += i
    nodes.append(helper.make_node("Concat", ["e1", "e3"], ["y"], axis=1))
    graph = helper.make_graph(nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 9, 9])], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


@pytest.fixture(scope="module")
def fire(tmp_path_factory):
    pytest.importorskip("numba")
    return _fire_model(tmp_path_factory.mktemp("plan_steps") / "fire.onnx")


def test_steps_are_labelled_by_node_and_kind(fire):
    _, _, steps = bench_plan_steps.compiled_plan(fire)
    kinds = [kind for _, kind, _ in steps]
    assert {"1x1 reduce", "1x1 expand", "3x3"} <= set(kinds)
    assert all(callable(fn) for _, _, (fn, _) in steps)


def test_both_modes_time_every_step(fire, capsys):
    bench_plan_steps.main(["steps", fire, "--reps", "2"])
    bench_plan_steps.main(["ablate", fire, "--reps", "2"])
    out = capsys.readouterr().out
    assert "in a run" in out and "1x1 reduce" in out
    assert "all steps" in out and "without 3x3" in out and "without 1x1 expand" in out
