"""``opdsl new-package``: a package skeleton from a model's custom-domain ops."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import dsl

onnx = pytest.importorskip("onnx")
yaml = pytest.importorskip("yaml")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as H  # noqa: E402
from onnx import numpy_helper as NH  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def custom_model(path):
    """Relu -> CustomRelu (twice, alpha the same, beta not) -> RMSNorm (constant weight, ints and
    string attributes; onnx sorts a node's attributes by name) -> Pair (two outputs, types unknown); Frob (its
    input u a graph input of unknown type)."""
    nodes = [H.make_node("Relu", ["x"], ["r"], name="relu"),
             H.make_node("CustomRelu", ["r"], ["c"], domain="com.example", name="cr1", alpha=0.5, beta=0.2),
             H.make_node("RMSNorm", ["c", "w"], ["n"], domain="com.example", name="rms", epsilon=1e-5,
                         mode="fast", axes=[-1]),
             H.make_node("CustomRelu", ["n"], ["y"], domain="com.example", name="cr2", alpha=0.5, beta=0.3),
             H.make_node("Pair", ["y"], ["p0", "p1"], domain="org.other", name="pair", count=3),
             H.make_node("Frob", ["u"], ["z"], domain="org.other", name="frob")]
    g = H.make_graph(nodes, "m", [H.make_tensor_value_info("x", TP.FLOAT, ["batch", 8]),
                                  H.make_tensor_value_info("u", TP.UNDEFINED, None)],
                     [H.make_tensor_value_info("y", TP.FLOAT, ["batch", 8]),
                      H.make_tensor_value_info("p1", TP.INT64, [2]),
                      H.make_tensor_value_info("z", TP.FLOAT16, None)],
                     [NH.from_array(np.ones(8, np.float32), "w")],
                     value_info=[H.make_tensor_value_info("c", TP.FLOAT, ["batch", 8]),
                                 H.make_tensor_value_info("n", TP.FLOAT, ["batch", 8])])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("com.example", 1),
                                       H.make_opsetid("org.other", 3)])
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """(folder, stdout) of `opdsl new-package` on the model above."""
    from dsl.cli import main
    tmp = tmp_path_factory.mktemp("newpkg")
    model = custom_model(tmp / "custom.onnx")
    folder = tmp / "my_ops"
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main.main(["new-package", str(model), "-o", str(folder)]) == 0
    return folder, out.getvalue()


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_skeleton_passes_check_package(package):
    from dsl.package import check_package
    folder, _ = package
    pkg = check_package(folder)
    assert pkg.name == "my_ops" and pkg.version == 1
    assert len(pkg.ops) == 4


def test_a_registered_stub_raises_naming_the_op_in_a_model(package, backend):
    """Registered as a package and run in a graph, a stub kernel stops the run with the op's name
    (it must not write zeros); a backend the skeleton has no implementation for is refused."""
    from dsl.package import register_package
    folder, _ = package
    pkg = register_package(folder)
    try:
        relu = next(cls for cls in pkg.ops if cls.op_type == "CustomRelu")
        g = dsl.Graph("stub")
        x = g.input("x", (2, 8), dsl.f32)
        g.output(relu()(x), "y")
        if backend == "opencl":  # the skeleton lists OpenCL as a commented-out line
            with pytest.raises(dsl.VerifyError, match=r"CustomRelu: no implementation for backend 'opencl'; "
                                                      r"the package gives: numba, interpreter"):
                g.compile(backend=backend)
            return
        with pytest.raises(NotImplementedError, match=r"^CustomRelu \(com.example\): kernels.py:custom_relu is a stub "):
            g.compile(backend=backend).run({"x": np.ones((2, 8), np.float32)})
    finally:
        pkg.unregister()


def test_files_and_the_note(package):
    folder, out = package
    assert sorted(p.name for p in folder.iterdir()) == [
        "custom_relu_functions.py", "frob_functions.py", "kernels.py", "opdsl-package.yaml", "pair_functions.py",
        "rms_norm_functions.py", "test_my_ops.py"]
    lines = out.splitlines()
    assert lines[:6] == [
        "com.example::CustomRelu: 2 node(s), 1 input(s), 1 output(s), params: alpha, beta",
        "com.example::RMSNorm: 1 node(s), 2 input(s), 1 output(s), params: axes, epsilon, mode",
        "org.other::Pair: 1 node(s), 1 input(s), 2 output(s), params: count",
        "org.other::Frob: 1 node(s), 1 input(s), 1 output(s), params: none",
        f"wrote {folder / 'opdsl-package.yaml'}",
        f"wrote {folder / 'kernels.py'}"]
    assert (f"next: write each kernel in {folder / 'kernels.py'} (the stubs raise NotImplementedError), infer in "
            f"pair_functions.py, frob_functions.py, and the numpy references in {folder / 'test_my_ops.py'}; "
            f"`opdsl check {folder}` validates the package and `python -m pytest {folder}` tests it.") in out


def test_the_manifest_follows_the_schema(package):
    folder, _ = package
    m = yaml.safe_load((folder / "opdsl-package.yaml").read_text())
    impl = lambda k: [{"backend": "numba", "kernel": f"kernels.py:{k}"},  # noqa: E731
                      {"backend": "interpreter", "kernel": f"kernels.py:{k}"}]
    assert m == {"name": "my_ops", "version": 1, "ops": [
        {"type": "CustomRelu", "domain": "com.example", "since": 1,
         "inputs": [{"name": "x", "max_rank": 2, "dtypes": ["f32"]}],
         "outputs": [{"name": "y", "like": "x"}],
         "params": [{"name": "alpha", "dtype": "f32", "default": 0.5},
                    {"name": "beta", "dtype": "f32", "default": 0.2}],
         "functions": "custom_relu_functions.py", "implementations": impl("custom_relu")},
        {"type": "RMSNorm", "domain": "com.example", "since": 1,
         "inputs": [{"name": "x0", "max_rank": 2, "dtypes": ["f32"]},
                    {"name": "x1", "max_rank": 1, "dtypes": ["f32"], "constant": True}],
         "outputs": [{"name": "y", "like": "x0"}],
         "params": [{"name": "axes", "dtype": "i64", "size": 1, "default": [-1]},
                    {"name": "epsilon", "dtype": "f32", "default": 1e-5},
                    {"name": "mode", "dtype": "str", "default": "fast"}],
         "functions": "rms_norm_functions.py", "implementations": impl("rms_norm")},
        {"type": "Pair", "domain": "org.other", "since": 3,
         "inputs": [{"name": "x", "max_rank": 2, "dtypes": ["f32"]}],
         "outputs": [{"name": "y0"}, {"name": "y1"}],
         "params": [{"name": "count", "dtype": "i64", "default": 3}],
         "functions": "pair_functions.py", "implementations": impl("pair")},
        {"type": "Frob", "domain": "org.other", "since": 3,
         "inputs": [{"name": "x", "max_rank": 8}],
         "outputs": [{"name": "y"}],
         "functions": "frob_functions.py", "implementations": impl("frob")}]}
    text = (folder / "opdsl-package.yaml").read_text()
    assert "beta, dtype: f32, default: 0.2}   # the model's nodes use different values" in text
    assert "{name: x, max_rank: 8}   # rank not known from the model" in text
    assert "{name: y1}   # model: i64, rank 1; infer in pair_functions.py" in text


def test_kernel_stubs_take_the_declared_params_and_compile(package, backend):
    from dsl.cli.compile import example_args, kernels_in, load_module, parse_dtypes
    folder, _ = package
    ks = {k.__name__: k for k in kernels_in(load_module(str(folder / "kernels.py")))}
    m = yaml.safe_load((folder / "opdsl-package.yaml").read_text())
    for op in m["ops"]:
        k = ks[op["implementations"][0]["kernel"].split(":")[1]]
        want = [t["name"] for t in op["inputs"] + op["outputs"]]
        want += [p["name"] for p in op.get("params", []) if p["dtype"] != "str"]  # str params: functions only
        assert [p.name for p in k.params] == want, op["type"]
    assert repr(ks["custom_relu"].params[0].annotation) == "In[dsl.f32]"
    assert repr(ks["rms_norm"].params[3].annotation) == "Vec[dsl.i64, 1]"
    assert repr(ks["frob"].params[0].annotation) == "In[dsl.TypeVar('T_frob_x')]"
    assert repr(ks["frob"].params[1].annotation) == "Out[dsl.f16]"
    assert repr(ks["pair"].params[2].annotation) == "Out[dsl.i64]"
    # the stubs are valid kernels whose launch raises NotImplementedError naming the op
    x = np.ones((2, 8), np.float32)
    with pytest.raises(NotImplementedError, match=r"^CustomRelu \(com.example\): kernels.py:custom_relu is a stub "):
        ks["custom_relu"](x, np.zeros_like(x), 0.5, 0.2, backend=backend)
    kw, shown = example_args(ks["frob"], parse_dtypes(["x=f64"]))
    assert shown == {"T_frob_x": "f64"}
    with pytest.raises(NotImplementedError, match=r"^Frob \(org.other\): kernels.py:frob is a stub "):
        ks["frob"](np.ones(3), np.zeros(3, np.float16), backend=backend)


def test_the_stubs_compile_from_the_command_line(package, cli):
    folder, _ = package
    code, out, err = cli("compile", folder / "kernels.py", "--backend", "interpreter", "--dtype", "x=f64",
                         "--dtype", "y0=f32")
    assert code == 0, err
    assert out.splitlines() == ["custom_relu: compiled for interpreter", "rms_norm: compiled for interpreter",
                                "pair: compiled for interpreter (T_pair_y0=f32)", "frob: compiled for interpreter (T_frob_x=f64)"]


def test_verify_template_and_infer_stub(package):
    folder, _ = package
    for fname, kernel in (("custom_relu_functions.py", "custom_relu"), ("pair_functions.py", "pair")):
        mod = load(folder / fname, f"newpkg_{kernel}_functions")
        assert mod.verify(object()) is None  # accepts everything until the user writes checks
    assert not hasattr(load(folder / "custom_relu_functions.py", "newpkg_cr"), "infer")  # like: x
    pair = load(folder / "pair_functions.py", "newpkg_pair")
    with pytest.raises(NotImplementedError, match="Pair: infer the output specs in pair_functions.py"):
        pair.infer(object())
    assert "y1: i64, shape [2]" in pair.infer.__doc__


def test_the_generated_test_file_builds_models_opdsl_loads(package):
    folder, _ = package
    t = load(folder / "test_my_ops.py", "newpkg_test")
    assert [n for n in vars(t) if n.startswith("test_")] == ["test_custom_relu", "test_rms_norm", "test_pair",
                                                              "test_frob"]
    with pytest.raises(NotImplementedError, match="CustomRelu: write the numpy reference"):
        t.reference_custom_relu(x=None, alpha=0.5, beta=0.2)
    import dsl
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    model = t.one_node_model("LeakyRelu", "", 1, {"x": x}, {}, ["y"], {"alpha": 0.5})  # a built-in op
    got = dsl.load_onnx(model, backend="interpreter").run({"x": x})["y"]
    np.testing.assert_allclose(got, np.where(x > 0, x, 0.5 * x))
    src = (folder / "test_my_ops.py").read_text()
    assert "constants = {'x1': random((8,), 'float32', rng)}" in src
    assert "attrs = {'axes': [-1], 'epsilon': 1e-05, 'mode': 'fast'}" in src
    assert "inputs = {'x': random((2, 8), 'float32', rng)}" in src  # symbolic batch -> 2


def test_refuses_a_non_empty_folder_and_models_without_custom_ops(tmp_path, cli):
    model = custom_model(tmp_path / "custom.onnx")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    code, _, err = cli("new-package", model, "-o", tmp_path / "full")
    assert code == 2 and err.strip() == (f"opdsl: error: -o {tmp_path / 'full'}: the folder is not empty; "
                                         "new-package never overwrites files (give a new or empty folder)")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    (tmp_path / "empty").mkdir()
    code, _, err = cli("new-package", model, "-o", tmp_path / "empty", "--name", "other")
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "empty" / "opdsl-package.yaml").read_text())["name"] == "other"
    g = H.make_graph([H.make_node("Relu", ["x"], ["y"])], "m", [H.make_tensor_value_info("x", TP.FLOAT, [2])],
                     [H.make_tensor_value_info("y", TP.FLOAT, [2])])
    onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]), str(tmp_path / "std.onnx"))
    code, _, err = cli("new-package", tmp_path / "std.onnx", "-o", tmp_path / "new")
    assert code == 2 and err.strip() == (
        f"opdsl: error: {tmp_path / 'std.onnx'} has no op of a custom domain (its nodes use \"\" domain); "
        "new-package writes packages for ops outside the standard ONNX domain")
    assert not (tmp_path / "new").exists()
    code, _, err = cli("new-package", tmp_path / "nope.onnx", "-o", tmp_path / "new")
    assert code == 2 and err.strip() == f"opdsl: error: no such file: {tmp_path / 'nope.onnx'}"
    (tmp_path / "afile").write_text("")
    code, _, err = cli("new-package", model, "-o", tmp_path / "afile")
    assert code == 2 and err.strip() == f"opdsl: error: -o {tmp_path / 'afile'}: exists and is not a folder; give a folder (created if missing)"


def test_yaml_values_read_back():
    from dsl.cli.skeleton import yaml_value
    for v in (0.5, 1e-05, 3.0, -2, True, "fast", "yes", "a b", "", "1.5", [1, 2], [0.25], float("inf"), "x:y"):
        assert yaml.safe_load(f"v: {yaml_value(v)}")["v"] == v, v


def test_kernel_names():
    from dsl.cli.new_package import snake
    assert [snake(n) for n in ("CustomRelu", "RMSNorm", "Conv2D", "HTTPServer", "x", "3D")] == [
        "custom_relu", "rms_norm", "conv2_d", "http_server", "x", "op_3_d"]


def test_subgraph_ops_are_found_and_local_functions_need_no_package(tmp_path, cli):
    then = H.make_graph([H.make_node("Twist", ["a"], ["t"], domain="com.sub", name="tw", k=2)], "then", [],
                        [H.make_tensor_value_info("t", TP.FLOAT, [3])])
    other = H.make_graph([H.make_node("Identity", ["a"], ["e"])], "else", [],
                         [H.make_tensor_value_info("e", TP.FLOAT, [3])])
    fn = onnx.helper.make_function("com.local", "Double", ["v"], ["w"], [H.make_node("Add", ["v", "v"], ["w"])],
                                   [H.make_opsetid("", 17)])
    g = H.make_graph([H.make_node("If", ["c"], ["o"], then_branch=then, else_branch=other),
                      H.make_node("Double", ["o"], ["d"], domain="com.local")], "m",
                     [H.make_tensor_value_info("c", TP.BOOL, []), H.make_tensor_value_info("a", TP.FLOAT, [3])],
                     [H.make_tensor_value_info("d", TP.FLOAT, [3])])
    m = H.make_model(g, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("com.sub", 1),
                                       H.make_opsetid("com.local", 1)], functions=[fn])
    onnx.save(m, str(tmp_path / "m.onnx"))
    code, out, err = cli("new-package", tmp_path / "m.onnx", "-o", tmp_path / "p")
    assert code == 0, err
    assert out.startswith("com.sub::Twist: 1 node(s), 1 input(s), 1 output(s), params: k\n")
    ops = yaml.safe_load((tmp_path / "p" / "opdsl-package.yaml").read_text())["ops"]
    assert [o["type"] for o in ops] == ["Twist"]
    assert ops[0]["inputs"] == [{"name": "x", "max_rank": 1, "dtypes": ["f32"]}]
    only_local = H.make_graph([H.make_node("Double", ["a"], ["d"], domain="com.local")], "m",
                              [H.make_tensor_value_info("a", TP.FLOAT, [3])], [H.make_tensor_value_info("d", TP.FLOAT, [3])])
    onnx.save(H.make_model(only_local, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("com.local", 1)],
                           functions=[fn]), str(tmp_path / "local.onnx"))
    code, _, err = cli("new-package", tmp_path / "local.onnx", "-o", tmp_path / "q")
    assert code == 2 and err.strip() == (f"opdsl: error: {tmp_path / 'local.onnx'}: its custom ops (com.local::Double) "
                                         "are functions the model defines, which opdsl runs from their bodies; "
                                         "no package is needed")
    code, _, err = cli("new-package", tmp_path / "m.onnx", "-o", tmp_path / "r", "--name", "my-ops")
    assert code == 2 and err.strip() == ("opdsl: error: --name 'my-ops': a package name is a Python identifier "
                                         "(letters, digits, '_', not starting with a digit), e.g. my_ops")


def quant_model(path):
    """x (f32) -> QuantizeLinear(0.05, 128) -> QAdd (a param named `import`, gain) -> Twice (its input made
    by a custom op, typed nowhere in the model) -> y."""
    nodes = [H.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
             H.make_node("QAdd", ["xq"], ["h"], domain="com.q", name="qadd", **{"import": 1, "gain": 2.0}),
             H.make_node("Twice", ["h"], ["y"], domain="com.q", name="twice")]
    g = H.make_graph(nodes, "m", [H.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
                     [H.make_tensor_value_info("y", TP.UINT8, None)],
                     [NH.from_array(np.array(0.05, np.float32), "s"), NH.from_array(np.array(128, np.uint8), "zp")])
    onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("com.q", 1)]), str(path))
    return path


def test_quantized_inputs_chained_ops_and_keyword_attributes(tmp_path, cli):
    """QuantizeLinear -> custom op gives `from: x.scale` / `x.zero_point` params; an input made by
    another custom op gets that op's input type (not 'rank not known'); an attribute named like a
    Python keyword is left out with a note, so `opdsl check` accepts what new-package writes; and
    the generated test, once its kernels and references are written, feeds quantized data and passes."""
    import re
    import subprocess
    folder = tmp_path / "qpkg"
    code, out, err = cli("new-package", quant_model(tmp_path / "q.onnx"), "-o", folder)
    assert code == 0, err
    assert "note: attribute import (a package param is a Python identifier, not a keyword" in out
    m = yaml.safe_load((folder / "opdsl-package.yaml").read_text())
    qadd, twice = m["ops"]
    assert qadd["params"] == [{"name": "gain", "dtype": "f32", "default": 2.0},
                              {"name": "x_scale", "dtype": "f32", "from": "x.scale"},
                              {"name": "x_zero_point", "dtype": "i64", "from": "x.zero_point"}]
    assert twice["inputs"] == [{"name": "x", "max_rank": 2, "dtypes": ["u8"]}]
    assert "rank and dtype assumed: made by a custom op" in (folder / "opdsl-package.yaml").read_text()
    code, _, err = cli("check", folder)
    assert code == 0, err
    # write the bodies the way a user would: QAdd y = x - zero point, Twice y = 2x (u8 wraps)
    k = (folder / "kernels.py").read_text()
    k = re.sub(r"@dsl.kernel\(grid=stub\(.*\)\)\n", "@dsl.kernel\n", k)
    k = k.replace("y.flat[i] = 0  # TODO QAdd", "y.flat[i] = x.flat[i] - u8(x_zero_point)")
    k = k.replace("y.flat[i] = 0  # TODO Twice", "y.flat[i] = x.flat[i] + x.flat[i]")
    (folder / "kernels.py").write_text(k)
    for f in ("q_add_functions.py", "twice_functions.py"):
        text = (folder / f).read_text()
        (folder / f).write_text(re.sub(r"    raise NotImplementedError\(.*\)\n", "    return specs[0]\n", text))
    t = (folder / "test_qpkg.py").read_text()
    t = t.replace("    raise NotImplementedError('QAdd: write the numpy reference in ' + __file__)",
                  "    assert x.dtype == np.uint8 and x_zero_point == 128 and abs(x_scale - 0.05) < 1e-7\n"
                  "    return (x - np.uint8(x_zero_point)).astype(np.uint8)")
    t = t.replace("    raise NotImplementedError('Twice: write the numpy reference in ' + __file__)",
                  "    return (x + x).astype(np.uint8)")
    (folder / "test_qpkg.py").write_text(t)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                        str(folder / "test_qpkg.py"), "-k", "interpreter"],
                       capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
