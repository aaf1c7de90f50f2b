"""Package modules are imported under a private name per package folder."""
import sys

import numpy as np

import dsl
from dsl.opgraph import registry

MANIFEST = """
name: same_name
version: 1
ops:
  - type: TYPE
    domain: com.test
    inputs: [{name: x}]
    outputs: [{name: y, like: x}]
    implementations:
      - {backend: interpreter, kernel: "kernels.py:apply"}
      - {backend: numba, kernel: "kernels.py:apply"}
"""

KERNELS = """
import dsl
from dsl import In, Out, f32
from . import helpers          # a relative import finds this package's helpers.py
from .sub import more

@dsl.kernel
def apply(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * FACTOR + OFFSET

FACTOR = helpers.FACTOR
OFFSET = more.OFFSET
"""


def test_two_packages_with_the_same_module_names(make_package):
    a = make_package(MANIFEST.replace("TYPE", "TimesTwo"), "a", **{
        "kernels.py": KERNELS, "helpers.py": "FACTOR = 2.0\n", "sub/more.py": "OFFSET = 0.0\n"})
    b = make_package(MANIFEST.replace("TYPE", "TimesThree"), "b", **{
        "kernels.py": KERNELS, "helpers.py": "FACTOR = 3.0\n", "sub/more.py": "OFFSET = 1.0\n"})
    pa, pb = dsl.register_package(a), dsl.register_package(b)
    x = np.arange(4, dtype=np.float32)
    for backend in ("interpreter", "numba"):
        np.testing.assert_array_equal(pa.ops[0](x, backend=backend), 2 * x)
        np.testing.assert_array_equal(pb.ops[0](x, backend=backend), 3 * x + 1)
    ma, mb = pa.ops[0].__module__, pb.ops[0].__module__
    assert ma != mb and ma.startswith("_opdsl_pkg_same_name_") and mb.startswith("_opdsl_pkg_same_name_")
    assert sys.modules[f"{ma}.kernels"].FACTOR == 2.0 and sys.modules[f"{mb}.kernels"].FACTOR == 3.0
    assert "kernels" not in sys.modules or not hasattr(sys.modules["kernels"], "FACTOR")
    assert "helpers" not in sys.modules


def test_registering_again_replaces_the_ops(make_package):
    root = make_package(MANIFEST.replace("TYPE", "Again"), **{
        "kernels.py": KERNELS, "helpers.py": "FACTOR = 2.0\n", "sub/more.py": "OFFSET = 0.0\n"})
    first = dsl.register_package(root)
    (root / "helpers.py").write_text("FACTOR = 5.0\n")
    second = dsl.register_package(root)
    entries = [c for c in registry.all_ops() if (c.domain, c.op_type) == ("com.test", "Again")]
    assert entries == [second.ops[0]] and first.ops[0] is not second.ops[0]
    assert registry.lookup("com.test", "Again", 1) is second.ops[0]
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(second.ops[0](x, backend="interpreter"), 5 * x)
    second.unregister()
    assert registry.find("com.test", "Again", 1) is None


def test_check_package_does_not_register(make_package):
    root = make_package(MANIFEST.replace("TYPE", "Unlisted"), **{
        "kernels.py": KERNELS, "helpers.py": "FACTOR = 2.0\n", "sub/more.py": "OFFSET = 0.0\n"})
    pkg = dsl.check_package(root)
    assert pkg.ops[0].op_type == "Unlisted" and registry.find("com.test", "Unlisted", 1) is None
