"""Shared test data for tests/package: the example package's folder and a small kernels.py."""
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
