"""No path of a manifest may leave the package folder, and nothing is imported before every
path has been checked."""
import os
import sys

import pytest

from dsl.package import PackageError, check_package

from tests.package.helpers import KERNELS

MANIFEST = """
name: paths
version: 1
ops:
  - type: Scale
    domain: com.test
    inputs: [{name: x}]
    outputs: [{name: y, like: x}]
    params: [{name: alpha, dtype: f32}]
    functions: functions.py
    implementations:
      - {backend: numba, kernel: "kernels.py:scale"}
      - {backend: interpreter, kernel: "KERNEL"}
"""

# importing this module records it: the tests check it was never imported
MARKER = "import sys\nsys.modules.setdefault('opdsl_test_imported', []).append(__file__)\n" + KERNELS
FUNCTIONS = "import sys\nsys.modules.setdefault('opdsl_test_imported', []).append(__file__)\n" \
            "def verify(op, x):\n    pass\n"


@pytest.fixture(autouse=True)
def _no_marker():
    sys.modules.pop("opdsl_test_imported", None)
    yield
    sys.modules.pop("opdsl_test_imported", None)


def _check(root, line, fragment):
    with pytest.raises(PackageError) as e:
        check_package(root)
    assert e.value.line == line and e.value.key == "ops[0].implementations[1].kernel", str(e.value)
    assert fragment in str(e.value)
    assert "opdsl_test_imported" not in sys.modules, "a package module was imported before the path check"


def test_dotdot_is_refused_before_any_import(make_package, tmp_path):
    (tmp_path / "evil.py").write_text(MARKER)
    root = make_package(MANIFEST.replace("KERNEL", "../evil.py:scale"), **{"kernels.py": MARKER,
                                                                           "functions.py": FUNCTIONS})
    _check(root, 12, "'../evil.py' leaves the package folder; accepted: a path inside it")


def test_absolute_path_is_refused(make_package, tmp_path):
    (tmp_path / "evil.py").write_text(MARKER)
    root = make_package(MANIFEST.replace("KERNEL", f"{tmp_path / 'evil.py'}:scale"),
                        **{"kernels.py": MARKER, "functions.py": FUNCTIONS})
    _check(root, 12, "is an absolute path; accepted: a path relative to the package folder")


def test_symlink_out_of_the_folder_is_refused(make_package, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text(MARKER)
    root = make_package(MANIFEST.replace("KERNEL", "link.py:scale"), **{"kernels.py": MARKER,
                                                                       "functions.py": FUNCTIONS})
    os.symlink(outside / "evil.py", root / "link.py")
    _check(root, 12, "outside the package folder")
    os.remove(root / "link.py")  # a symlinked folder is the same escape
    os.symlink(outside, root / "sub")
    root2 = make_package(MANIFEST.replace("KERNEL", "sub/evil.py:scale"), **{"kernels.py": MARKER,
                                                                            "functions.py": FUNCTIONS})
    _check(root2, 12, "(a symlink pointing out)")


def test_symlinked_manifest_out_of_the_folder(tmp_path):
    (tmp_path / "elsewhere.yaml").write_text("name: x\n")
    root = tmp_path / "pkg"
    root.mkdir()
    os.symlink(tmp_path / "elsewhere.yaml", root / "opdsl-package.yaml")
    with pytest.raises(PackageError, match=r"opdsl-package.yaml:0: opdsl-package.yaml is a symlink out"):
        check_package(root)


def test_symlink_inside_the_folder_is_fine(make_package):
    root = make_package(MANIFEST.replace("KERNEL", "alias.py:scale"), **{"kernels.py": KERNELS,
                                                                        "functions.py": "def verify(op, x):\n"
                                                                                        "    pass\n"})
    os.symlink(root / "kernels.py", root / "alias.py")
    pkg = check_package(root)
    assert pkg.ops[0].op_type == "Scale"


def test_functions_path_and_opencl_source_are_checked_too(make_package, tmp_path):
    text = MANIFEST.replace("KERNEL", "kernels.py:scale").replace("functions.py", "../functions.py")
    root = make_package(text, **{"kernels.py": MARKER})
    with pytest.raises(PackageError) as e:
        check_package(root)
    assert (e.value.line, e.value.key) == (9, "ops[0].functions") and "leaves the package folder" in str(e.value)
    assert "opdsl_test_imported" not in sys.modules
    text = MANIFEST.replace('{backend: interpreter, kernel: "KERNEL"}',
                            '{backend: opencl, source: "/etc/passwd", function: f}')
    root = make_package(text, "pkg2", **{"kernels.py": MARKER, "functions.py": FUNCTIONS})
    with pytest.raises(PackageError) as e:
        check_package(root)
    assert (e.value.line, e.value.key) == (12, "ops[0].implementations[1].source")
    assert "absolute path" in str(e.value) and "opdsl_test_imported" not in sys.modules


def test_kernel_file_must_be_python(make_package):
    root = make_package(MANIFEST.replace("KERNEL", "kernels.txt:scale"), **{"kernels.py": KERNELS})
    with pytest.raises(PackageError, match=r":12: ops\[0\].implementations\[1\].kernel: .*accepted: \"file.py:name\""):
        check_package(root)
