"""The quantization context: ``dsl.Quant`` on ``TensorSpec.quant`` (validation), its
propagation through graphs (QuantizeLinear sets it, data-moving ops keep it, other ops drop
it), and ``Op.run`` receiving the input specs so a kernel can read an input's scale and zero
point (the Cloud AI 100 guide's getInputScale / getInputOffset)."""
import numpy as np
import pytest

import dsl
import ops
from dsl import In, Out, f32, i8, u8

RNG = np.random.default_rng(5)


# --------------------------------------------------------------------------- dsl.Quant

def test_quant_per_tensor_and_per_axis():
    s = dsl.TensorSpec((2, 3), dsl.u8, quant=(0.5, 10))
    assert s.quant == dsl.Quant(0.5, 10) and s.quant.axis is None and not s.quant.per_axis
    assert (s.quant[0], s.quant[1]) == (0.5, 10)  # reads like the old (scale, zero_point) tuple
    p = dsl.TensorSpec((2, 3), dsl.i8, quant=dsl.Quant(np.array([0.1, 0.2, 0.3], np.float32), [1, 2, 3], 1))
    assert p.quant.axis == 1 and p.quant.zero_point == (1, 2, 3) and len(p.quant.scale) == 3
    assert isinstance(p.quant.scale[0], float) and "along axis 1" in str(p.quant)
    assert dsl.TensorSpec((2, 3), dsl.i8, quant=((0.1, 0.2), 0, 0)).quant.zero_point == (0, 0)
    assert p.with_(shape=(None, 3)).quant == p.quant       # the axis is still there
    assert p.with_(shape=(3, 2)).quant is None              # it is not
    assert s.with_(dtype=dsl.f32).quant is None             # not an integer tensor any more
    assert dsl.TensorSpec((4,), dsl.i16, quant=(0.1, -300)).quant.zero_point == -300


@pytest.mark.parametrize("dtype,quant,err,match", [
    (dsl.i32, (0.1, 0), ValueError, r"quant .* of a i32 tensor: only i8, u8, i16, u16 tensors may be quantized"),
    (dsl.i64, (0.1, 0), ValueError, r"index types like i32/i64 never are"),
    (dsl.f32, (0.1, 0), ValueError, r"of a f32 tensor: only i8, u8"),
    (dsl.u8, (0.0, 0), ValueError, r"scale must be a positive finite float, got 0.0"),
    (dsl.u8, (float("nan"), 0), ValueError, r"scale must be a positive finite float"),
    (dsl.u8, (0.1, 256), ValueError, r"zero point 256 is outside the range of u8 \[0, 255\]"),
    (dsl.i8, (0.1, 1.5), TypeError, r"zero point must be an int, got 1.5"),
    (dsl.i8, ((0.1, 0.2), (0, 0)), ValueError, r"per-axis scales and zero points need an axis"),
    (dsl.i8, ((0.1, 0.2), (0, 0), 2), ValueError, r"axis must be an int in 0..1 \(rank 2\), got 2"),
    (dsl.i8, ((0.1, 0.2, 0.3), (0, 0, 0), 0), ValueError, r"3 scales for axis 0 of size 2"),
    (dsl.i8, ((0.1, 0.2), (0, 0, 0), 0), ValueError, r"2 scales but 3 zero points"),
    (dsl.i8, 0.5, TypeError, r"expected dsl.Quant\(scale, zero_point, axis=None\)"),
])
def test_bad_quant_is_refused_naming_the_tensor(dtype, quant, err, match):
    with pytest.raises(err, match=match):
        dsl.TensorSpec((2, 3), dtype, quant=quant)


def test_graph_input_quant_is_checked():
    g = dsl.Graph("g")
    with pytest.raises(ValueError, match=r"graph 'g' input 'ids': TensorSpec quant .* of a i64 tensor"):
        g.input("ids", (4,), dsl.i64, quant=(0.1, 0))


# --------------------------------------------------------------------------- propagation

def _quantized_graph():
    g = dsl.Graph("q")
    x = g.input("x", (2, 3, 4), dsl.f32)
    q = ops.QuantizeLinear(x, g.constant("s", np.float32(0.25)), g.constant("z", np.int8(-2)))
    return g, x, q


def test_quantize_linear_sets_quant_per_tensor_and_per_axis():
    g, x, q = _quantized_graph()
    assert q.spec.quant == dsl.Quant(0.25, -2)
    scales = np.array([0.5, 0.25, 0.125], np.float32)
    qa = ops.QuantizeLinear(x, g.constant("sa", scales), g.constant("za", np.array([0, 1, 2], np.uint8)), axis=1)
    assert qa.spec.quant == dsl.Quant((0.5, 0.25, 0.125), (0, 1, 2), 1)
    qn = ops.QuantizeLinear(x, g.constant("sn", scales), g.constant("zn", np.zeros(3, np.uint8)), axis=-2)
    assert qn.spec.quant.axis == 1  # normalized
    # a scale computed at run time: the quantization is not known, so there is none
    s = ops.Abs(g.input("s_run", (), dsl.f32))
    assert ops.QuantizeLinear(x, s, g.constant("z2", np.uint8(0))).spec.quant is None


def test_dequantize_linear_marks_its_constant_or_input_data_as_quantized():
    g = dsl.Graph("dq")
    w = g.constant("w", np.array([[1, -2], [3, 4]], np.int8))
    ops.DequantizeLinear(w, g.constant("s", np.array([0.5, 0.25], np.float32)),
                         g.constant("z", np.array([0, 1], np.int8)), axis=0)
    assert w.spec.quant == dsl.Quant((0.5, 0.25), (0, 1), 0) and w.spec.value is not None
    x = g.input("x", (3,), dsl.u8)
    ops.DequantizeLinear(x, g.constant("s2", np.float32(0.1)))
    assert x.spec.quant == dsl.Quant(float(np.float32(0.1)), 0)
    b = g.constant("b", np.array([5, 6], np.int32))  # an i32 bias: never quantized
    ops.DequantizeLinear(b, g.constant("s3", np.float32(0.1)))
    assert b.spec.quant is None
    # compiling keeps the constants' quantization (here through a folded Transpose)
    g.output(ops.Transpose(w), "w_t")
    m = g.compile(backend="interpreter")
    assert m.graph.outputs[0].spec.quant == dsl.Quant((0.5, 0.25), (0, 1), 1)


def test_data_moving_ops_keep_quant_and_others_drop_it():
    g, x, q = _quantized_graph()
    want = dsl.Quant(0.25, -2)
    shape = g.constant("shape", np.array([6, 4], np.int64))
    moved = {
        "Reshape": ops.Reshape(q, shape),
        "Transpose": ops.Transpose(q, perm=[2, 0, 1]),
        "Flatten": ops.Flatten(q),
        "Unsqueeze": ops.Unsqueeze(q, g.constant("ax", np.array([0], np.int64))),
        "Slice": ops.Slice(q, g.constant("st", np.array([1], np.int64)), g.constant("en", np.array([3], np.int64)),
                           g.constant("axs", np.array([2], np.int64))),
        "Gather": ops.Gather(q, g.constant("idx", np.array([0, 0, 1], np.int64)), axis=1),
        "Concat": ops.Concat(q, q, axis=0),
        "Identity": ops.Identity(q),
        "Split": ops.Split(q, axis=2, num_outputs=2)[1],
    }
    for name, t in moved.items():
        assert t.spec.quant == want, name
    assert ops.Shape(q).spec.quant is None  # an i64 result
    assert ops.Add(q, q).spec.quant is None  # integer arithmetic: the values mean something else
    other = ops.QuantizeLinear(g.input("x2", (2, 3, 4), dsl.f32), g.constant("s2", np.float32(0.5)),
                               g.constant("z2", np.int8(0)))
    assert ops.Concat(q, other, axis=0).spec.quant is None  # two quantizations: no single one


def test_an_equal_quant_made_by_the_op_is_kept():
    """QLinearMatMul requantizing to its input's own scale and zero point: a new Quant, kept."""
    g = dsl.Graph("q")
    a = g.input("a", (2, 4), dsl.u8, quant=(float(np.float32(0.1)), 3))
    s, z = g.constant("s", np.float32(0.1)), g.constant("z", np.uint8(3))
    b = g.constant("b", np.ones((4, 2), np.int8))
    y = ops.QLinearMatMul(a, s, z, b, g.constant("sb", np.float32(0.5)), g.constant("zb", np.int8(0)), s, z)
    assert y.spec.quant == a.spec.quant == dsl.Quant(float(np.float32(0.1)), 3)


def test_per_axis_quant_follows_the_axis():
    g = dsl.Graph("q")
    q = g.input("q", (2, 3, 4), dsl.i8, quant=dsl.Quant((0.1, 0.2, 0.3), (0, 1, 2), 1))
    assert ops.Transpose(q, perm=[1, 2, 0]).spec.quant.axis == 0
    assert ops.Transpose(q, perm=[0, 2, 1]).spec.quant.axis == 2
    sliced = ops.Slice(q, g.constant("st", np.array([1], np.int64)), g.constant("en", np.array([3], np.int64)),
                       g.constant("axs", np.array([2], np.int64)))
    assert sliced.spec.quant is None  # Slice and Gather may reorder along the axis: per tensor only
    assert ops.Gather(q, g.constant("i", np.array([0, 2], np.int64)), axis=1).spec.quant is None
    pooled = ops.MaxPool(q, kernel_shape=[2])
    pooled = pooled[0] if isinstance(pooled, tuple) else pooled
    assert pooled.spec.shape == (2, 3, 3) and pooled.spec.quant == q.spec.quant  # channels stay put
    assert ops.Identity(q).spec.quant == q.spec.quant
    assert ops.Reshape(q, g.constant("s", np.array([2, 3, 4], np.int64))).spec.quant is None  # regroups
    assert ops.Concat(q, q, axis=0).spec.quant == q.spec.quant


def test_quant_survives_compile_and_reaches_the_model(backend):
    g, x, q = _quantized_graph()
    y = ops.DataConvert(ops.Transpose(q, perm=[0, 2, 1]), dtype=dsl.f32)  # dequantizes from the quant
    g.output(y, "y")
    m = g.compile(backend=backend)
    assert m.graph.tensors[m.graph.nodes[-1].inputs[0].name].spec.quant == dsl.Quant(0.25, -2)
    xv = RNG.uniform(-40, 40, (2, 3, 4)).astype(np.float32)
    qv = np.clip(np.rint(xv / np.float32(0.25)) - 2, -128, 127)
    want = ((qv - np.float32(-2)) * np.float32(0.25)).astype(np.float32).transpose(0, 2, 1)
    np.testing.assert_array_equal(m.run({"x": xv})["y"], want)


# --------------------------------------------------------------------------- Op.run(specs=)

@dsl.kernel
def requantize_kernel(x: In[u8], y: Out[i8], in_scale: f32, in_zero_point: i8, out_scale: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = dsl.quant(dsl.dequant(x.flat[i], in_scale, in_zero_point), out_scale, 0, i8)


class Requantize(dsl.Op):
    """u8 -> i8 with zero point 0 at ``out_scale``: reads its input's (scale, zero point) from
    the specs run() is given, as a package op would (getInputScale / getInputOffset)."""

    out_scale: float = 0.1
    kernels = {"default": requantize_kernel}

    def verify(self, x):
        if x.dtype != dsl.u8:
            raise dsl.VerifyError(f"Requantize input must be u8, got {x}")

    def infer(self, x):
        return dsl.TensorSpec(x.shape, dsl.i8, quant=(self.out_scale, 0))

    def run(self, impl, inputs, outputs, backend, specs):
        q = specs[0].quant
        if q is None:  # an eager call on a plain array: the values are their own meaning
            q = dsl.Quant(1.0, 0)
        impl(inputs[0], outputs[0], q.scale, q.zero_point, self.out_scale, backend=backend)


def test_run_gets_the_input_specs_in_models_and_eager_calls(backend):
    g = dsl.Graph("rq")
    x = g.input("x", (None, 5), dsl.u8, quant=dsl.Quant(0.02, 10))
    y = Requantize(x, out_scale=0.05)
    assert y.spec.quant == dsl.Quant(0.05, 0)
    g.output(y, "y")
    xv = RNG.integers(0, 256, (3, 5)).astype(np.uint8)
    real = (xv.astype(np.float32) - np.float32(10)) * np.float32(0.02)
    want = np.clip(np.rint(real / np.float32(0.05)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(g.compile(backend=backend).run({"x": xv})["y"], want)
    eager = Requantize(xv[:, :4], out_scale=0.5, backend=backend)  # specs without quant
    np.testing.assert_array_equal(eager, np.clip(np.rint(xv[:, :4] / np.float32(0.5)), -128, 127).astype(np.int8))


def test_run_without_specs_keyword_is_called_as_before():
    from dsl.opgraph.op import takes_specs
    assert takes_specs(Requantize) and takes_specs(ops.DataConvert)
    assert not takes_specs(ops.Add) and not takes_specs(dsl.Op)
