"""Manifest schema errors: each names <manifest>:<line>: <key> and what is accepted."""
import re

import pytest

import dsl
from dsl.package import FORMAT_VERSION, PackageError, check_package

from tests.package.helpers import KERNELS

GOOD = """
name: demo
version: 1
ops:
  - type: Scale
    domain: com.test
    inputs:
      - {name: x, max_rank: 4, dtypes: [f32]}
    outputs:
      - {name: y, like: x}
    params:
      - {name: alpha, dtype: f32, default: 2.0}
    implementations:
      - {backend: numba, kernel: "kernels.py:scale"}
      - {backend: interpreter, kernel: "kernels.py:scale"}
"""


def _error(make_package, manifest, files=None, folder="pkg") -> PackageError:
    root = make_package(manifest, folder, **({"kernels.py": KERNELS} if files is None else files))
    with pytest.raises(PackageError) as e:
        check_package(root)
    manifest_path = str(root / "opdsl-package.yaml")
    assert str(e.value).startswith(f"{manifest_path}:{e.value.line}: "), str(e.value)
    assert isinstance(e.value, ValueError)
    return e.value


def _replace(old, new):
    assert old in GOOD
    return GOOD.replace(old, new)


def test_the_good_manifest_builds(make_package):
    pkg = check_package(make_package(GOOD, **{"kernels.py": KERNELS}))
    assert (pkg.name, pkg.version, [c.op_type for c in pkg.ops]) == ("demo", 1, ["Scale"])
    assert pkg.ops[0].param_table()["alpha"].default == 2.0


@pytest.mark.parametrize("old, new, line, key, message", [
    ("version: 1", "version: 1\ncolor: red", 3, "color", "unknown key; accepted: name, version, ops"),
    ("    domain: com.test", "    domain: com.test\n    sinse: 2", 6, "ops[0].sinse", "unknown key; accepted: type"),
    ("max_rank: 4,", "max_rnk: 4,", 7, "ops[0].inputs[0].max_rnk", "accepted: name, max_rank, dtypes, constant"),
    ("like: x}", "like: x, shape: 3}", 9, "ops[0].outputs[0].shape", "accepted: name, like"),
    ("default: 2.0}", "default: 2.0, min: 0}", 11, "ops[0].params[0].min",
     "accepted: name, dtype, default, size, from"),
    ('kernel: "kernels.py:scale"}\n      - {backend: interpreter',
     'kernel: "kernels.py:scale", threads: 4}\n      - {backend: interpreter', 13,
     "ops[0].implementations[0].threads", "accepted: backend, kernel, source, function, build_options"),
    ("dtype: f32, default", "dtype: float32, default", 11, "ops[0].params[0].dtype",
     "unknown dtype str 'float32'; accepted: f32, f64, i64, bool, str"),
    ("dtypes: [f32]", "dtypes: [f32, fp16]", 7, "ops[0].inputs[0].dtypes[1]", "unknown dtype str 'fp16'"),
    ("version: 1", f"version: {FORMAT_VERSION + 1}", 2, "version",
     f"format version {FORMAT_VERSION + 1} is newer than this opdsl reads; accepted: 1 to {FORMAT_VERSION}"),
    ("version: 1", "version: one", 2, "version", "expected the package format version"),
    ("default: 2.0}", "default: yes}", 11, "ops[0].params[0].default", "bool True does not fit dtype f32"),
    ("dtype: f32, default: 2.0}", "dtype: f32, size: 2, default: [1.0]}", 11, "ops[0].params[0].default",
     "expected a list of 2 f32 values"),
    ("like: x}", "like: z}", 9, "ops[0].outputs[0].like", "'z' is not an input of Scale; accepted: x"),
    ("{backend: numba,", "{backend: cuda,", 13, "ops[0].implementations[0].backend",
     "unknown backend 'cuda'; accepted: "),
    ('{backend: numba, kernel: "kernels.py:scale"}', '{backend: numba, kernel: "kernels.py"}', 13,
     "ops[0].implementations[0].kernel", 'accepted: "file.py:name"'),
    ('{backend: numba, kernel: "kernels.py:scale"}', '{backend: numba, source: "k.cl", function: f}', 13,
     "ops[0].implementations[0].source", "raw OpenCL source is for backend opencl"),
    ('{backend: numba, kernel: "kernels.py:scale"}', '{backend: opencl, source: "k.cl"}', 13,
     "ops[0].implementations[0]", "missing required key 'function'"),
    ('{backend: numba, kernel: "kernels.py:scale"}', '{backend: opencl}', 13,
     "ops[0].implementations[0]", "give exactly one of 'kernel'"),
    ("    - {name: alpha, dtype: f32, default: 2.0}", "    - {name: alpha, default: 2.0}", 11,
     "ops[0].params[0]", "missing required key 'dtype'"),
    ("    - {name: alpha, dtype: f32, default: 2.0}", "    - {name: alpha, from: x.offset}", 11,
     "ops[0].params[0].from", "accepted: <input>.scale or <input>.zero_point"),
    ("    - {name: alpha, dtype: f32, default: 2.0}", "    - {name: alpha, from: w.scale}", 11,
     "ops[0].params[0].from", "'w' is not an input of Scale"),
    ("    - {name: alpha, dtype: f32, default: 2.0}", "    - {name: alpha, dtype: i64, from: x.scale}", 11,
     "ops[0].params[0].dtype", "i64 cannot hold an input's scale; accepted: f32, f64"),
    ("    - {name: alpha, dtype: f32, default: 2.0}", "    - {name: x, dtype: f32}", 11,
     "ops[0].params[0]", "name 'x' is already used at line 7"),
    ("    - {name: alpha, dtype: f32, default: 2.0}", "    - {name: 2x, dtype: f32}", 11,
     "ops[0].params[0].name", "accepted: a Python identifier"),
    ("    - {name: alpha, dtype: f32, default: 2.0}", "    - {name: alpha, dtype: str, size: 2}", 11,
     "ops[0].params[0].size", "a str param cannot be a vector"),
    ("    outputs:\n      - {name: y, like: x}\n", "    outputs: []\n", 8, "ops[0].outputs",
     "the list is empty"),
    ("  - type: Scale\n", "  - since: 1\n", 4, "ops[0]", "missing required key 'type'"),
    ("    domain: com.test", "    domain: com.test\n    since: 0", 6, "ops[0].since",
     "expected an integer >= 1, got int 0"),
    ("    domain: com.test", "    domain: com.test\n    since: 3\n    until: 2", 7, "ops[0].until",
     "expected an integer >= 3, got int 2"),
    ("max_rank: 4,", "max_rank: -1,", 7, "ops[0].inputs[0].max_rank", "expected an integer >= 0"),
    ("dtypes: [f32]", "dtypes: f32", 7, "ops[0].inputs[0].dtypes", "expected a list, got str 'f32'"),
    ("dtypes: [f32]", "dtypes: [f32], constant: 1", 7, "ops[0].inputs[0].constant",
     "expected true or false, got int 1"),
    ("    implementations:", "    scratch: [{name: tmp, bytes: 0}]\n    implementations:", 12,
     "ops[0].scratch[0].bytes", "expected an integer >= 1"),
    ("    implementations:", "    functions: functions.txt\n    implementations:", 12, "ops[0].functions",
     "'functions.txt' is not accepted; accepted: a .py file"),
    ('{backend: numba, kernel: "kernels.py:scale"}', '{backend: numba, kernel: "kernels.py:scale", function: f}',
     13, "ops[0].implementations[0].function", "only for raw OpenCL implementations"),
    ('{backend: numba, kernel: "kernels.py:scale"}',
     '{backend: opencl, source: "k.cl", function: f, build_options: [1]}', 13,
     "ops[0].implementations[0].build_options", "expected a string of compiler options"),
    ("    outputs:\n      - {name: y, like: x}\n", "    outputs: {name: y}\n", 8, "ops[0].outputs",
     "expected a list, got a mapping"),
    ("name: demo", "name: my ops", 1, "name", "'my ops' is not accepted; accepted: letters, digits"),
])
def test_schema_errors_name_line_key_and_accepted(make_package, old, new, line, key, message):
    e = _error(make_package, _replace(old, new))
    assert e.line == line, str(e)
    assert e.key == key, str(e)
    assert message in str(e), str(e)


def test_yaml_level_errors(make_package):
    e = _error(make_package, "name: a\nname: b\n")
    assert (e.line, e.key) == (2, "name") and "given twice (first at line 1)" in str(e)
    e = _error(make_package, "name: a\nversion: [1\n")
    assert "not valid YAML" in str(e)
    e = _error(make_package, "")
    assert e.line == 0 and "the manifest is empty" in str(e)
    e = _error(make_package, "name: a\n---\nname: b\n")
    assert "one YAML document" in str(e)
    e = _error(make_package, "- just\n- a list\n")
    assert (e.line, e.key) == (1, "") or "expected a mapping" in str(e)
    e = _error(make_package, "name: a\nversion: 1\n")
    assert (e.line, e.key) == (1, "(top level)") and "missing required key 'ops'" in str(e)


def test_yaml_is_safe_loaded(make_package, tmp_path):
    e = _error(make_package, "name: !!python/object/apply:os.system ['touch /tmp/pwned']\nversion: 1\nops: []\n")
    assert e.line == 1 and "YAML tag 'tag:yaml.org,2002:python/object/apply:os.system' is not accepted" in str(e)
    e = _error(make_package, "name: !custom x\nversion: 1\nops: []\n")
    assert e.line == 1 and "is not accepted" in str(e)


def test_missing_manifest_and_folder(tmp_path):
    with pytest.raises(PackageError, match=r"opdsl-package.yaml:0: the folder has no opdsl-package.yaml"):
        check_package(tmp_path)
    with pytest.raises(PackageError, match=r":0: no such folder"):
        dsl.register_package(tmp_path / "nowhere")


def test_overlapping_opset_ranges(make_package):
    text = GOOD + """
  - type: Scale
    domain: com.test
    since: 1
    outputs: [{name: y}]
    implementations: [{backend: numba, kernel: "kernels.py:scale"}]
"""
    e = _error(make_package, text)
    assert e.line == 16 and "overlap the entry at line 4" in str(e)


def test_missing_kernel_function_and_file(make_package):
    e = _error(make_package, _replace("kernels.py:scale\"}\n      - {backend: interpreter",
                                      "kernels.py:scael\"}\n      - {backend: interpreter"))
    assert (e.line, e.key) == (13, "ops[0].implementations[0].kernel")
    assert "kernels.py defines no 'scael'; it defines: " in str(e) and "scale" in str(e)
    e = _error(make_package, GOOD, files={}, folder="empty")
    assert (e.line, e.key) == (13, "ops[0].implementations[0].kernel")
    assert re.search(r"kernel module 'kernels.py' does not exist", str(e))


def test_output_without_like_needs_an_infer_hook(make_package):
    e = _error(make_package, _replace("{name: y, like: x}", "{name: y}"))
    assert (e.line, e.key) == (9, "ops[0].outputs[0]") and "has no 'like' and the op has no infer" in str(e)


def test_functions_module_without_hooks(make_package):
    text = _replace("    implementations:", "    functions: functions.py\n    implementations:")
    e = _error(make_package, text, files={"kernels.py": KERNELS, "functions.py": "def helper(op):\n    pass\n"})
    assert (e.line, e.key) == (12, "ops[0].functions") and "defines none of the hooks" in str(e)


def test_param_named_like_an_op_attribute(make_package):
    e = _error(make_package, _replace("{name: alpha, dtype: f32, default: 2.0}", "{name: infer, dtype: f32}"))
    assert (e.line, e.key) == (11, "ops[0].params[0].name") and "dsl.Op attribute" in str(e)


def test_opencl_function_missing_from_the_source(make_package):
    text = _replace('- {backend: interpreter, kernel: "kernels.py:scale"}',
                    '- {backend: opencl, source: "scale.cl", function: scale}')
    e = _error(make_package, text, files={"kernels.py": KERNELS,
                                          "scale.cl": "__kernel void other(__global float* x) {}\n"})
    assert (e.line, e.key) == (14, "ops[0].implementations[1].function")
    assert "has no '__kernel void scale(...)'" in str(e)


def test_import_error_in_a_package_module(make_package):
    e = _error(make_package, GOOD, files={"kernels.py": "import dsl\n\nx = 1 / 0\n"})
    assert (e.line, e.key) == (13, "ops[0].implementations[0].kernel")
    assert "importing kernels.py failed (line 3): ZeroDivisionError" in str(e)
