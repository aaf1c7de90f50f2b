"""Launch plans (dsl/opgraph/launch_plan.py): ops declare the launches a model binds once; a
value-dependent op falls back to run() at every run; recorded_plan; the errors of a bad plan."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32

RNG = np.random.default_rng(28)


@dsl.kernel
def affine_k(x: In[f32], y: Out[f32], a: f32, b: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + b


@dsl.kernel
def add_k(x: In[f32], w: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + w.flat[i]


@dsl.kernel
def row_sum_k(x: In[f32, 2], y: Out[f32, 1]):
    lo, hi = dsl.split(y.size)
    for r in range(lo, hi):
        acc = x[r, 0]
        for c in range(1, x.shape[1]):
            acc += x[r, c]
        y[r] = acc


class AffineRowSums(dsl.Op):
    """y[r] = sum_c (a * x[r, c] + b): two launches through a scratch buffer, declared by hand."""
    a: float = 1.0
    b: float = 0.0
    kernels = {"default": row_sum_k}
    calls = 0

    def infer(self, x):
        return dsl.TensorSpec((x.shape[0],), x.dtype)

    def run(self, impl, inputs, outputs, backend):
        type(self).calls += 1
        x = inputs[0]
        tmp = np.empty(x.shape, np.float32)
        affine_k(x.reshape(-1), tmp.reshape(-1), self.a, self.b, backend=backend)
        impl(tmp, outputs[0], backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        x = inputs[0]
        tmp = dsl.Scratch(0, (x.size,), np.float32)
        return [dsl.Launch(affine_k, (x.reshape(-1), tmp, self.a, self.b), backend=backend),
                dsl.Launch(impl, (tmp.reshape(x.shape), outputs[0]), backend=backend)]


class ShiftByFirst(dsl.Op):
    """y = x + k[0]: the launch takes k's *value*, so only a constant k gives a plan."""
    kernels = {"default": affine_k}
    calls = 0

    def infer(self, x, k):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        type(self).calls += 1
        impl(inputs[0], outputs[0], 1.0, float(inputs[1].flat[0]), backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        k = inputs[1].spec.value
        if k is None:
            return None  # k arrives at run time: run() reads it at every run
        return [dsl.Launch(impl, (inputs[0], outputs[0], 1.0, float(k.flat[0])), backend=backend)]


class RecordedAffine(dsl.Op):
    """run() takes flat views; ``plan = dsl.recorded_plan`` records it once."""
    a: float = 1.0
    kernels = {"default": affine_k}
    calls = 0

    def infer(self, x):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        type(self).calls += 1
        impl(inputs[0].reshape(-1), outputs[0].reshape(-1), a=self.a, b=0.5, backend=backend)

    plan = dsl.recorded_plan


class DoubledAfter(RecordedAffine):
    """run() writes its output with numpy after the launch: not recordable, run() every time."""
    calls = 0

    def run(self, impl, inputs, outputs, backend):
        type(self).calls += 1
        impl(inputs[0].reshape(-1), outputs[0].reshape(-1), a=self.a, b=0.5, backend=backend)
        outputs[0] *= 2


class RunOnlyChild(AffineRowSums):
    """Overrides run() but not plan(): the parent's declared launches do not describe it."""
    calls = 0

    def run(self, impl, inputs, outputs, backend):
        super().run(impl, inputs, outputs, backend)  # counts the call in RunOnlyChild.calls
        outputs[0] += 1


@dsl.kernel
def scaled_copy_k(x: In[f32], y: Out[f32], a: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i]


class PacksItsActivation(dsl.Op):
    """run() packs x with a second kernel, then launches impl on the packed copy: a plan recorded
    on the stand-in would replay impl on zeros, so the guard must refuse it."""
    kernels = {"default": affine_k}
    plan = dsl.recorded_plan
    calls = 0

    def infer(self, x):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        type(self).calls += 1
        packed = np.empty(inputs[0].size, np.float32)
        scaled_copy_k(inputs[0].reshape(-1), packed, 2.0, backend=backend)
        impl(packed, outputs[0].reshape(-1), 1.0, 0.5, backend=backend)


class PacksItsWeight(dsl.Op):
    """run() packs w with a second kernel, then adds it to x with impl: plain ``recorded_plan``,
    so the guard alone tells a constant w (packed once) from a graph input (run() every time)."""
    kernels = {"default": add_k}
    plan = dsl.recorded_plan
    calls = 0

    def infer(self, x, w):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        type(self).calls += 1
        packed = np.empty(inputs[1].size, np.float32)
        scaled_copy_k(inputs[1].reshape(-1), packed, 3.0, backend=backend)
        impl(inputs[0].reshape(-1), packed, outputs[0].reshape(-1), backend=backend)


def _model(op_cls, backend, shape=(3, 5), **params):
    g = dsl.Graph("plans")
    x = g.input("x", shape, dsl.f32)
    g.output(op_cls(**params)(x), "y")
    return g.compile(backend=backend)


def test_declared_plan_runs_without_run(backend):
    AffineRowSums.calls = 0
    model = _model(AffineRowSums, backend, a=2.0, b=-1.0)
    assert "1 of 1 nodes planned" in str(model)
    for _ in range(3):
        xv = RNG.standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": xv})["y"], (2 * xv - 1).sum(1), rtol=1e-5, atol=1e-5)
    assert AffineRowSums.calls == 0  # the model launched the declared plan, never run()


def test_value_dependent_op_calls_run_at_every_run(backend):
    ShiftByFirst.calls = 0
    g = dsl.Graph("shift")
    x = g.input("x", (4,), dsl.f32)
    k = g.input("k", (1,), dsl.f32)
    g.output(ShiftByFirst()(x, k), "y")
    model = g.compile(backend=backend)
    assert "0 of 1 nodes planned" in str(model)
    xv = np.arange(4, dtype=np.float32)
    for kv in (0.5, -2.0, 3.0):
        np.testing.assert_allclose(model.run({"x": xv, "k": np.array([kv], np.float32)})["y"], xv + kv)
    assert ShiftByFirst.calls == 3


def test_value_dependent_op_with_a_constant_is_planned(backend):
    ShiftByFirst.calls = 0
    g = dsl.Graph("shift_const")
    x = g.input("x", (4,), dsl.f32)
    g.output(ShiftByFirst()(x, g.constant("k", np.array([1.5], np.float32))), "y")
    model = g.compile(backend=backend)
    xv = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(model.run({"x": xv})["y"], xv + 1.5)
    assert ShiftByFirst.calls == 0 and "1 of 1 nodes planned" in str(model)


def test_recorded_plan_calls_run_once_while_planning(backend):
    RecordedAffine.calls = 0
    model = _model(RecordedAffine, backend, a=3.0)
    assert RecordedAffine.calls == 1  # recorded on stand-ins when the model was planned
    for _ in range(2):
        xv = RNG.standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": xv})["y"], 3 * xv + 0.5, rtol=1e-6)
    assert RecordedAffine.calls == 1


def test_recorded_plan_of_a_0d_tensor():
    """0-d stand-ins (a DynamicQuantizeLinear scale): filled bytewise like any other."""
    model = _model(RecordedAffine, "interpreter", shape=(), a=2.0)
    assert "1 of 1 nodes planned" in str(model)
    for v in (1.5, -4.0):
        np.testing.assert_allclose(model.run({"x": np.array(v, np.float32)})["y"], 2 * v + 0.5)


def test_recorded_run_writing_its_output_falls_back_to_run(backend):
    DoubledAfter.calls = 0
    model = _model(DoubledAfter, backend, a=3.0)
    assert "0 of 1 nodes planned" in str(model)
    calls = DoubledAfter.calls
    xv = RNG.standard_normal((3, 5)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(model.run({"x": xv})["y"], 2 * (3 * xv + 0.5), rtol=1e-6)
    assert DoubledAfter.calls == calls + 2


def test_a_run_packing_its_activation_with_another_kernel_gets_no_plan(backend):
    PacksItsActivation.calls = 0
    model = _model(PacksItsActivation, backend)
    assert "0 of 1 nodes planned" in str(model)
    calls = PacksItsActivation.calls
    for _ in range(2):  # different inputs: a plan replaying the stand-in's packing would repeat 0.5
        xv = RNG.standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": xv})["y"], 2 * xv + 0.5, rtol=1e-6)
    assert PacksItsActivation.calls == calls + 2


def test_a_run_packing_a_constant_weight_with_another_kernel_is_planned(backend):
    PacksItsWeight.calls = 0
    wv = RNG.standard_normal((3, 5)).astype(np.float32)
    g = dsl.Graph("packs_weight")
    x = g.input("x", (3, 5), dsl.f32)
    g.output(PacksItsWeight()(x, g.constant("w", wv)), "y")
    model = g.compile(backend=backend)
    assert "1 of 1 nodes planned" in str(model) and PacksItsWeight.calls == 1
    for _ in range(2):
        xv = RNG.standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": xv})["y"], xv + 3 * wv, rtol=1e-6)
    assert PacksItsWeight.calls == 1  # the weight was packed once, while planning


def test_the_guard_sees_launches_of_a_non_constant_weight(backend):
    PacksItsWeight.calls = 0
    g = dsl.Graph("packs_input")
    x, w = g.input("x", (3, 5), dsl.f32), g.input("w", (3, 5), dsl.f32)
    g.output(PacksItsWeight()(x, w), "y")
    model = g.compile(backend=backend)
    assert "0 of 1 nodes planned" in str(model)
    xv = RNG.standard_normal((3, 5)).astype(np.float32)
    for _ in range(2):
        wv = RNG.standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_allclose(model.run({"x": xv, "w": wv})["y"], xv + 3 * wv, rtol=1e-6)


def test_recording_guard_refuses_overlap_and_lets_other_memory_through():
    """The guard itself: the recorded plan is None exactly when a watched buffer is touched."""
    from dsl.opgraph.launch_plan import refs
    from dsl.opgraph.recorded_plan import recorded_plan
    x = np.zeros((3, 5), np.float32)
    spec = dsl.TensorSpec((3, 5), dsl.f32)
    ins, outs = refs([spec], "in", [x]), refs([spec], "out", [x])
    assert recorded_plan(PacksItsActivation(), affine_k, ins, outs, "interpreter") is None
    const = dsl.TensorSpec((3, 5), dsl.f32, value=np.ones((3, 5), np.float32))
    ins2 = refs([spec, const], "in", [x, const.value])
    plan = recorded_plan(PacksItsWeight(), add_k, ins2, outs, "interpreter")
    assert plan is not None and len(plan) == 1 and plan[0].args[0].kind == "in"


def test_a_subclass_overriding_run_only_does_not_inherit_the_plan():
    RunOnlyChild.calls = 0
    model = _model(RunOnlyChild, "interpreter", a=1.0, b=0.0)
    xv = RNG.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(model.run({"x": xv})["y"], xv.sum(1) + 1, rtol=1e-5)
    assert RunOnlyChild.calls == 1


class _BadPlan(dsl.Op):
    kernels = {"default": affine_k}
    answer = None

    def infer(self, x):
        return x.spec.with_()

    def run(self, impl, inputs, outputs, backend):
        impl(inputs[0], outputs[0], 1.0, 0.0, backend=backend)

    def plan(self, impl, inputs, outputs, backend):
        return type(self).answer(impl, inputs, outputs)


@pytest.mark.parametrize("answer, message", [
    (lambda impl, ins, outs: "launch it", r"node '.*'.*plan returned 'launch it'; accepted: a list of "
                                          r"dsl.opgraph.launch_plan.Launch, or None"),
    (lambda impl, ins, outs: [dsl.Launch(np.copyto, (outs[0], ins[0]))], r"not a dsl.kernel"),
    (lambda impl, ins, outs: [dsl.Launch(impl, (ins[0], type(outs[0])("out", 3, (3, 5), np.float32), 1.0, 0.0))],
     r"launch 0 uses <output 3 float32\[3, 5\]>, but the node has 1 inputs and 1 outputs"),
    (lambda impl, ins, outs: [dsl.Launch(impl, (ins[0], outs[0].reshape(5, 3)[:, ::2].reshape(-1), 1.0, 0.0))],
     r"would copy"),
])
def test_bad_plans_are_clear_errors(answer, message):
    cls = type("BadPlan", (_BadPlan,), {"answer": staticmethod(answer)})
    with pytest.raises(dsl.VerifyError, match=message):
        _model(cls, "interpreter")


def test_plan_of_every_planned_node_matches_its_run():
    """Debug check: each declared plan launches what run() launches (same results) on a model of
    library ops with hand-written and recorded plans."""
    import ops
    g = dsl.Graph("lib")
    x = g.input("x", (2, 3, 4), dsl.f32)
    y = ops.Softmax(ops.Transpose(ops.Relu(x), perm=[0, 2, 1]), axis=-1)
    g.output(ops.Reshape(ops.Add(y, g.constant("c", np.ones((3,), np.float32))),
                         g.constant("s", np.array([4, 6], np.int64))), "y")
    planned = g.compile(backend="interpreter")
    assert f"{len(planned.graph.nodes)} of {len(planned.graph.nodes)} nodes planned" in str(planned)
    xv = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    by_node = planned._run_by_node([xv])  # every node through its run()
    np.testing.assert_allclose(planned.run({"x": xv})["y"], by_node["y"], rtol=1e-6)
