"""The elementwise op table (ops/elementwise_table.py): the families, the fusion spellings and the
export map are made from its rows, and one ``register`` of a row gives an op that runs eagerly,
in a graph, fused and exported, on every backend, against numpy; ``unregister`` takes it back.
Bad rows are refused with the row and what would be accepted."""
import collections

import numpy as np
import pytest

import dsl
import ops
from ops import elementwise_table as table
from ops.elementwise_fusion import fusion

RNG = np.random.default_rng(31)

# A fusable Tan (the built-in Tan row does not fuse) and a new Softsign version whose element is an
# expression of builtins: each is one row.
TAN = table.Elementwise("Tan", 7, expr="dsl.tan({0})", builtin="dsl.tan", fuse=True, name="FusedTan",
                        doc="tan(x), fusable.")
SOFTSIGN = table.Elementwise("Softsign", 22, expr="{0} / (1 + abs({0}))", fuse=True, keeps_padding=True,
                             name="Softsign22")
NUMPY = {"Tan": np.tan, "Softsign": lambda x: x / (1 + np.abs(x))}


@pytest.fixture(params=[TAN, SOFTSIGN], ids=lambda r: r.onnx)
def row(request):
    cls = table.register(request.param)
    try:
        yield request.param, cls
    finally:
        table.unregister(cls)


def test_families_are_made_from_the_rows():
    for r in table.ROWS:
        cls = table.class_of(r)
        assert (cls.op_type, cls.since, cls.until) == (r.onnx, r.since, r.until)
        assert table.row_of(cls) is r
        if r.family != "custom":
            assert tuple(cls.allowed) == tuple(r.dtypes) and cls.__name__ == r.class_name
            assert dsl.opgraph.registry.find("", r.onnx, r.since) is cls
    assert ops.Sqrt.kernels["float"] is ops.Exp.kernels["float"]  # one shared kernel, an op code each
    assert len({ops.Add.kernels["default"], ops.Sub.kernels["default"], ops.Mul.kernels["default"]}) == 1
    assert table.export_since("Round") == 11 and table.export_since("Equal") == 11
    assert fusion(ops.Tan) is None and fusion(ops.Sqrt) is not None
    assert table.fusing_row("Clip") is table.row_of(ops.Clip) and table.fusing_row("Clip", 6) is table.row_of(ops.ClipV6)


def test_a_row_runs_eagerly_in_a_graph_fused_and_exported(row, backend):
    r, cls = row
    want = NUMPY[r.onnx]
    x = RNG.uniform(-1.2, 1.2, (3, 4, 5)).astype(np.float32)
    # eagerly, on the row's own kernel (the shared ladder is the library's rows')
    np.testing.assert_allclose(cls(x, backend=backend), want(x), rtol=2e-6, atol=1e-6)
    assert cls.kernels["float"] is not ops.Sqrt.kernels["float"]

    def build(fuse):
        g = dsl.Graph("row")
        g.opset_imports[""] = max(r.since, 13)
        xi = g.input("x", (3, 4, 5), dsl.f32)
        b = g.constant("b", np.float32(0.5))
        g.output(ops.Mul(cls(xi), b), "y")
        return g, g.compile(backend=backend, fuse=fuse)

    # in a graph (by op type: the registry answers the row's class), then fused with the Mul
    g, plain = build(False)
    assert [n.op_type for n in plain.graph.nodes] == [r.onnx, "Mul"]
    np.testing.assert_allclose(plain.run({"x": x})["y"], want(x) * 0.5, rtol=2e-6, atol=1e-6)
    _, fused = build(True)
    assert [n.op_type for n in fused.graph.nodes] == ["FusedElementwise"]
    np.testing.assert_allclose(fused.run({"x": x})["y"], want(x) * 0.5, rtol=2e-6, atol=1e-6)

    # exported: the graph as it is, and the fused graph written back as standard ONNX
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    for model in (g.to_onnx(), fused.graph.to_onnx()):
        onnx.checker.check_model(model, full_check=True)
        kinds = collections.Counter((n.domain, n.op_type) for n in model.graph.node)
        assert not any(d for d, _ in kinds), kinds  # nothing left in com.opdsl
        if r.builtin:
            assert kinds[("", r.onnx)] == 1
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want(x) * 0.5, rtol=2e-6, atol=1e-6)
        back = dsl.load_onnx(model, backend=backend)
        np.testing.assert_allclose(back.run({"x": x})["y"], want(x) * 0.5, rtol=2e-6, atol=1e-6)


def test_unregister_takes_the_row_back():
    cls = table.register(TAN)
    assert dsl.opgraph.registry.find("", "Tan", 7) is cls and table.fusing_row("Tan") is TAN
    table.unregister(cls)
    assert dsl.opgraph.registry.find("", "Tan", 7) is ops.Tan
    assert table.fusing_row("Tan") is None and "Tan@7" not in table.fusing_ops()
    assert table.export_since("Tan") == 7  # the built-in Tan still exports
    assert table.row_of(cls) is None and TAN not in table.rows()


@pytest.mark.parametrize("bad, message", [
    (table.Elementwise("Foo", 1, family="custom", expr="{0}"), "family 'custom' cannot be generated"),
    (table.Elementwise("Foo", 1, family="nope", expr="{0}"), "family 'nope' cannot be generated; accepted: math"),
    (table.Elementwise("Foo", 1), "needs expr"),
    (table.Elementwise("Foo", 1, int_expr="~{0}", dtypes=table.INTEGERS, fuse=True), "fuse=True needs expr"),
])
def test_bad_rows_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        table.register(bad)
    assert bad not in table.rows()


def test_a_hand_written_class_needs_its_row():
    class Nothing(dsl.Op):
        op_type, since = "NoSuchElementwise", 1
    with pytest.raises(ValueError, match="no custom row for NoSuchElementwise since 1"):
        table.implements(Nothing)
