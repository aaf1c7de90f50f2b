"""A kernel's launch binder (dsl/runtime/fastpath.py) is generated on its first launch, not when
the kernel is defined: importing the op library defines ~100 kernels a model mostly never runs."""
import numpy as np

import dsl
from dsl import In, Out, f32


def test_the_binder_is_built_on_first_launch_and_kept():
    @dsl.kernel
    def twice(x: In[f32], y: Out[f32]):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = 2.0 * x.flat[i]

    assert "_fast" not in vars(twice)  # defining it generated nothing
    x = np.arange(5, dtype=np.float32)
    y = np.zeros_like(x)
    twice(x, y, backend="interpreter")
    np.testing.assert_array_equal(y, 2 * x)
    fast = vars(twice)["_fast"]
    assert fast is not None and twice._fast is fast  # built once, then read from the instance
    assert fast(x, y) is not None and fast(x, 3) is None  # it binds what it knows, defers the rest
