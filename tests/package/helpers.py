"""Shared test data for tests/package: the example package's folder and a small kernels.py, and
the op registry restored after a test that registers packages (tests/cli uses it too)."""
import contextlib
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qaic_package"

KERNELS = '''
import dsl
from dsl import In, Out, f32

@dsl.kernel
def scale(x: In[f32], y: Out[f32], alpha: f32):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = alpha * x.flat[i]
'''


@contextlib.contextmanager
def registry_restored():
    """Unregister every op registered inside: other tests list the registered ops."""
    from dsl.opgraph import registry
    before = {k: list(v) for k, v in registry._TABLE.items()}
    yield
    for cls in registry.all_ops():
        if cls not in before.get((cls.domain, cls.op_type), []):
            registry.unregister(cls)
