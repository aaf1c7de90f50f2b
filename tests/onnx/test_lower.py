"""The lowering registry (dsl/onnx/lower.py): opdsl's own ops register their standard ONNX forms
from their own modules, and the first question about a com.opdsl op with no lowering yet loads
the op library, so neither ``import dsl`` nor the registry imports ``ops``."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("onnx")
ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import sys
    from types import SimpleNamespace as NS
    import dsl
    from dsl.onnx import lower
    assert "ops" not in sys.modules, "import dsl / dsl.onnx.lower imported the op library"
    spec = dsl.TensorSpec((2, 3), dsl.f32)
    node = NS(name="mm", op=NS(domain="com.opdsl", op_type="FusedMatMul"),
              inputs=[NS(name=n, spec=spec) for n in ("a", "b", "bias")], outputs=[NS(name="y")])
    nodes = lower.lower(node, 17, lambda hint: hint, in_function=False)
    assert "ops" in sys.modules, "the first com.opdsl lookup did not load the op library"
    print([n.op_type for n in nodes])
    user = NS(name="u", op=NS(domain="com.example", op_type="Scale"), inputs=[], outputs=[])
    print(lower.lower(user, 17, lambda hint: hint))
""")


def test_first_com_opdsl_lookup_loads_the_library():
    out = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["['MatMul', 'Add']", "None"]


def test_each_own_op_registers_its_lowering():
    from dsl.onnx import lower
    lower.registry.load_builtin_library()  # as a com.opdsl lookup does: the own ops register on loading
    for op_type in ("FullyConnected", "DataConvert", "FusedConv", "FusedConvPool", "FusedConvGlobalPool",
                    "FusedMatMul", "FusedElementwise", "Reorder", "RecurrentScan"):
        fn, _ = lower._LOWERINGS[("com.opdsl", op_type)]
        assert not fn.__module__.startswith("dsl.onnx"), (op_type, fn.__module__)
