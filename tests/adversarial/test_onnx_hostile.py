"""Loading untrusted ONNX models (issue 7 §8): no file outside the model's folder is read, no
tensor beyond the size cap is read, folded or allocated, and malformed fields are
OnnxImportErrors naming the field.  Cases where a missing check would allocate terabytes run
in their own process (tests/adversarial/isolated.py)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as H

import dsl
from tests.adversarial import isolated

SECRET = np.array([1.5, -2.5, 3.25, 42.0], np.float32)


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),)):
    graph = H.make_graph(nodes, "hostile", inputs, outputs, list(initializers))
    return H.make_model(graph, opset_imports=[H.make_opsetid(d, v) for d, v in opsets])


def _external_weight_model(location, offset=None, length=None):
    """y = x + w, with w's 4 floats stored in an external file at ``location``."""
    w = TP()
    w.name, w.data_type = "w", TP.FLOAT
    w.dims.extend([4])
    w.data_location = TP.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, str(value)
    return _model([H.make_node("Add", ["x", "w"], ["y"], name="add")],
                  [H.make_tensor_value_info("x", TP.FLOAT, [4])], [H.make_tensor_value_info("y", TP.FLOAT, [4])],
                  [w])


def _run(model, **kwargs):
    return dsl.load_onnx(model, backend="interpreter", **kwargs).run({"x": np.zeros(4, np.float32)})["y"]


# --------------------------------------------------------------------------- external data

def test_bytes_never_read_external_data_from_the_working_directory(tmp_path):
    """The seen exploit: location="secret.bin" loaded a file of the working directory as a weight."""
    (tmp_path / "secret.bin").write_bytes(SECRET.tobytes())
    model = _external_weight_model("secret.bin")
    code = f"""
import dsl, onnx
model = onnx.load_model_from_string({model.SerializeToString()!r})
for given in (model.SerializeToString(), model):
    try:
        dsl.load_onnx(given, backend="interpreter")
    except dsl.OnnxImportError as e:
        assert "external file ('secret.bin')" in str(e) and "base_dir=" in str(e), e
        print("refused")
"""
    out = isolated.run(code, cwd=tmp_path)
    assert out.stdout.split() == ["refused", "refused"]


def test_bytes_read_external_data_from_an_explicit_base_dir(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8 + SECRET.tobytes())
    model = _external_weight_model("weights.bin", offset=8, length=16)
    np.testing.assert_array_equal(_run(model.SerializeToString(), base_dir=str(tmp_path)), SECRET)


def test_a_model_file_reads_its_own_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w.bin").write_bytes(SECRET.tobytes())
    onnx.save(_external_weight_model("data/w.bin"), str(tmp_path / "m.onnx"))
    np.testing.assert_array_equal(_run(str(tmp_path / "m.onnx")), SECRET)


@pytest.mark.parametrize("location, says", [
    ("../secret.bin", "must be a relative path inside the model's folder"),
    ("sub/../../secret.bin", "must be a relative path inside the model's folder"),
    ("ABSOLUTE", "must be a relative path inside the model's folder"),
    ("link.bin", "leads outside the model's folder"),
    ("linkdir/secret.bin", "leads outside the model's folder"),
    ("missing.bin", "cannot open external data file 'missing.bin'"),
    ("sub", "not a regular file"),
])
def test_a_model_file_reads_nothing_outside_its_folder(tmp_path, location, says):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(SECRET.tobytes())
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    os.symlink(outside / "secret.bin", folder / "link.bin")
    os.symlink(outside, folder / "linkdir")
    if location == "ABSOLUTE":
        location = str(outside / "secret.bin")
    if location == "../secret.bin":
        (tmp_path / "secret.bin").write_bytes(SECRET.tobytes())
    onnx.save(_external_weight_model(location), str(folder / "m.onnx"))
    with pytest.raises(dsl.OnnxImportError, match=says):
        _run(str(folder / "m.onnx"))


@pytest.mark.parametrize("offset, length, says", [
    (0, 32, "has 16 bytes; the tensor asks for 32 bytes at offset 0"),
    (12, 16, "has 16 bytes; the tensor asks for 16 bytes at offset 12"),
    (-4, None, "must be >= 0"),
    ("x", None, "must be integers"),
])
def test_external_data_bounds(tmp_path, offset, length, says):
    (tmp_path / "w.bin").write_bytes(SECRET.tobytes())
    onnx.save(_external_weight_model("w.bin", offset=offset, length=length), str(tmp_path / "m.onnx"))
    with pytest.raises(dsl.OnnxImportError, match=says):
        _run(str(tmp_path / "m.onnx"))


# --------------------------------------------------------------------------- size cap

FOUR_TIB = 4 * 2 ** 40


def _huge_input_model():
    """Four small nodes over an input declared 2^20 x 2^20 f32 (4 TiB), all shapes known at load."""
    n = 2 ** 20
    nodes = [H.make_node("Relu", ["x"], ["a"], name="relu"), H.make_node("Add", ["a", "a"], ["b"], name="add"),
             H.make_node("Mul", ["b", "b"], ["c"], name="mul"), H.make_node("Sigmoid", ["c"], ["y"], name="sig")]
    return _model(nodes, [H.make_tensor_value_info("x", TP.FLOAT, [n, n])],
                  [H.make_tensor_value_info("y", TP.FLOAT, [n, n])])


def test_declared_terabytes_are_refused_at_load():
    code = f"""
import dsl, onnx
model = onnx.load_model_from_string({_huge_input_model().SerializeToString()!r})
try:
    dsl.load_onnx(model, backend="interpreter")
except ValueError as e:
    assert "graph 'hostile' input 'x'" in str(e) and "{FOUR_TIB} bytes" in str(e) and "4.0 TiB" in str(e), e
    assert "OPDSL_MAX_TENSOR_BYTES" in str(e), e
    print("refused")
"""
    assert "refused" in isolated.run(code, timeout=120).stdout


def test_folding_a_broadcast_into_terabytes_is_refused(tmp_path):
    """(2^20, 1) + (1, 2^20) constants: 8 MiB in, 4 TiB out, if folded."""
    n = 2 ** 20
    col = H.make_tensor("col", TP.FLOAT, [n, 1], np.zeros(n, np.float32).tobytes(), raw=True)
    row = H.make_tensor("row", TP.FLOAT, [1, n], np.zeros(n, np.float32).tobytes(), raw=True)
    model = _model([H.make_node("Add", ["col", "row"], ["big"], name="blowup"),
                    H.make_node("Add", ["big", "x"], ["y"], name="use")],
                   [H.make_tensor_value_info("x", TP.FLOAT, [1])], [H.make_tensor_value_info("y", TP.FLOAT, None)],
                   [col, row])
    onnx.save(model, str(tmp_path / "blowup.onnx"))
    code = f"""
import dsl
model = {str(tmp_path / "blowup.onnx")!r}
try:
    dsl.load_onnx(model, backend="interpreter")
except ValueError as e:
    assert "constant folding of node 'blowup'" in str(e) and "{FOUR_TIB} bytes" in str(e), e
    print("refused")
"""
    assert "refused" in isolated.run(code, timeout=120).stdout


def test_an_initializer_declaring_terabytes_is_refused_before_reading():
    big = TP()
    big.name, big.data_type = "w", TP.FLOAT
    big.dims.extend([2 ** 30, 2 ** 10])
    model = _model([H.make_node("Add", ["x", "w"], ["y"])], [H.make_tensor_value_info("x", TP.FLOAT, [1])],
                   [H.make_tensor_value_info("y", TP.FLOAT, None)], [big])
    with pytest.raises(dsl.OnnxImportError, match=f"initializer 'w'.*{FOUR_TIB} bytes"):
        dsl.load_onnx(model.SerializeToString(), backend="interpreter")


def test_the_cap_is_configurable():
    model = _model([H.make_node("Relu", ["x"], ["y"], name="relu")], [H.make_tensor_value_info("x", TP.FLOAT, [256])],
                   [H.make_tensor_value_info("y", TP.FLOAT, [256])])
    with pytest.raises(ValueError, match="input 'x'.*1024 bytes.*over the limit of 512 bytes"):
        dsl.load_onnx(model, backend="interpreter", max_tensor_bytes=512)
    dsl.load_onnx(model, backend="interpreter", max_tensor_bytes=1024)
    code = f"""
import dsl, onnx
model = onnx.load_model_from_string({model.SerializeToString()!r})
try:
    dsl.load_onnx(model, backend="interpreter")
except ValueError as e:
    assert "limit of 512 bytes" in str(e), e
    print("refused")
"""
    assert "refused" in isolated.run(code, env={"OPDSL_MAX_TENSOR_BYTES": "512"}).stdout
    assert "refused" not in isolated.run(code, env={"OPDSL_MAX_TENSOR_BYTES": "1K"}).stdout


def test_run_time_shapes_are_capped_too():
    """A shape computed from input values (run node by node) is checked before allocating."""
    import ops
    g = dsl.Graph("dyn")
    x = g.input("x", (None,), dsl.f32)
    s = g.input("s", (2,), dsl.i64)
    g.output(ops.Relu(ops.Reshape(x, s)), "y")
    model = g.compile(backend="interpreter", max_tensor_bytes=64)
    np.testing.assert_array_equal(model.run({"x": np.ones(16, np.float32), "s": np.array([4, 4])})["y"],
                                  np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="128 bytes.*over the limit of 64 bytes"):
        model.run({"x": np.ones(32, np.float32), "s": np.array([4, 8])})


# --------------------------------------------------------------------------- malformed fields

def _relu(inputs, opsets=(("", 17),)):
    return _model([H.make_node("Relu", ["x"], ["y"])], inputs, [H.make_tensor_value_info("y", TP.FLOAT, None)],
                  opsets=opsets)


def test_duplicate_graph_input_names():
    model = _relu([H.make_tensor_value_info("x", TP.FLOAT, [2]), H.make_tensor_value_info("x", TP.FLOAT, [3])])
    with pytest.raises(dsl.OnnxImportError, match="graph.input name 'x' is declared twice"):
        dsl.load_onnx(model.SerializeToString())


def test_negative_dims():
    model = _relu([H.make_tensor_value_info("x", TP.FLOAT, [2, -3])])
    with pytest.raises(dsl.OnnxImportError, match=r"graph input 'x': shape.dim\[1\].dim_value is -3"):
        dsl.load_onnx(model.SerializeToString())
    bad = H.make_tensor("w", TP.FLOAT, [2], [1.0, 2.0])
    bad.dims[0] = -2
    model = _model([H.make_node("Add", ["x", "w"], ["y"])], [H.make_tensor_value_info("x", TP.FLOAT, [2])],
                   [H.make_tensor_value_info("y", TP.FLOAT, None)], [bad])
    with pytest.raises(dsl.OnnxImportError, match=r"initializer 'w': dims\[0\] is -2"):
        dsl.load_onnx(model.SerializeToString())


@pytest.mark.parametrize("opsets, says", [
    ((("", 10 ** 6),), "version 1000000 for domain 'ai.onnx' is not a known opset; accepted: 1.."),
    ((("", 0),), "version 0 for domain 'ai.onnx'"),
    ((("", 17), ("ai.onnx", 13)), "lists domain 'ai.onnx' twice"),
    ((("", 17), ("com.example", 10 ** 9)), "version 1000000000 for domain 'com.example'"),
])
def test_unknown_opset_versions(opsets, says):
    model = _relu([H.make_tensor_value_info("x", TP.FLOAT, [2])], opsets=opsets)
    with pytest.raises(dsl.OnnxImportError, match=says):
        dsl.load_onnx(model.SerializeToString())


def test_the_newest_onnx_opset_is_accepted():
    newest = onnx.defs.onnx_opset_version()
    model = _relu([H.make_tensor_value_info("x", TP.FLOAT, [2])], opsets=(("", newest),))
    x = np.array([-1, 2], np.float32)
    np.testing.assert_array_equal(dsl.load_onnx(model, backend="interpreter").run({"x": x})["y"], [0, 2])


@pytest.mark.parametrize("shape", [(2.5,), (2.0,), (True,), ("n", 1.5)])
def test_non_integer_shapes_are_refused_not_truncated(shape):
    g = dsl.Graph("g")
    with pytest.raises(TypeError, match=r"graph 'g' input 'x': TensorSpec shape must be a tuple of int or None"):
        g.input("x", shape, dsl.f32)
    with pytest.raises(TypeError, match="TensorSpec shape must be a tuple of int or None"):
        dsl.TensorSpec(shape, dsl.f32)


def test_a_float_shape_tensor_is_refused_by_name():
    shape = H.make_tensor("shape", TP.FLOAT, [1], [2.5])
    model = _model([H.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
                   [H.make_tensor_value_info("x", TP.FLOAT, [2])], [H.make_tensor_value_info("y", TP.FLOAT, None)],
                   [shape])
    with pytest.raises(dsl.OnnxImportError, match="'reshape'"):
        dsl.load_onnx(model.SerializeToString())


# --------------------------------------------------------------------------- FIFOs, devices, endless files

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifos_and_devices_are_refused_at_once_not_waited_on(tmp_path):
    """A FIFO as the model or its external data hung in open(); /dev/zero was read until the OOM killer came."""
    onnx.save(_external_weight_model("w.bin"), str(tmp_path / "m.onnx"))
    os.mkfifo(tmp_path / "w.bin")
    os.mkfifo(tmp_path / "fifo.onnx")
    code = f"""
import dsl
for path, says in [({str(tmp_path / "m.onnx")!r}, "external data 'w.bin' is a FIFO (named pipe), not a regular file"),
                   ({str(tmp_path / "fifo.onnx")!r}, "fifo.onnx' is a FIFO (named pipe), not a regular file"),
                   ("/dev/zero", "'/dev/zero' is a character device, not a regular file")]:
    try:
        dsl.load_onnx(path, backend="interpreter")
    except dsl.OnnxImportError as e:
        assert says in str(e), e
        print("refused")
"""
    out = isolated.run(code, timeout=120)
    assert out.stdout.split() == ["refused"] * 3, out.describe()


def test_a_model_file_is_read_only_up_to_the_cap(tmp_path):
    path = tmp_path / "big.onnx"
    onnx.save(_model([H.make_node("Relu", ["x"], ["y"])], [H.make_tensor_value_info("x", TP.FLOAT, [4])],
                     [H.make_tensor_value_info("y", TP.FLOAT, [4])]), str(path))
    with open(path, "ab") as f:
        f.truncate(1 << 20)  # sparse: a MiB the parser would have to read
    with pytest.raises(dsl.OnnxImportError, match=r"big.onnx' is larger than the cap of 65536 bytes"):
        dsl.load_onnx(str(path), backend="interpreter", max_tensor_bytes=65536)


def _chained_functions(n: int):
    """f0 calls f1 calls ... f(n-1), which calls Relu: n levels of model-local functions."""
    opsets = [H.make_opsetid("", 17), H.make_opsetid("local", 1)]
    fns = [H.make_function("local", f"f{i}", ["x"], ["y"],
                           [H.make_node("Relu", ["x"], ["y"]) if i == n - 1
                            else H.make_node(f"f{i + 1}", ["x"], ["y"], domain="local")], opsets)
           for i in range(n)]
    graph = H.make_graph([H.make_node("f0", ["x"], ["y"], domain="local")], "chain",
                         [H.make_tensor_value_info("x", TP.FLOAT, [4])], [H.make_tensor_value_info("y", TP.FLOAT, [4])])
    return H.make_model(graph, functions=fns, opset_imports=opsets)


@pytest.mark.parametrize("levels", [50, 2000])
def test_deeply_chained_functions_are_refused_by_name(levels):
    with pytest.raises(dsl.OnnxImportError, match="functions nest deeper than 32 levels"):
        dsl.load_onnx(_chained_functions(levels), backend="interpreter")
    np.testing.assert_array_equal(  # control: a chain inside the limit runs
        _run(_chained_functions(8)), np.zeros(4, np.float32))
