"""Read-only arrays (a model's constants) through In parameters: the same results on every
backend, and on numba the same machine code as writable ones -- no second compile of the entry
point (backends/numba/backend.py ``_accept_read_only``)."""
import numpy as np

import dsl
from dsl import In, Out, f32


@dsl.kernel
def weighted(x: In[f32], w: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] * w.flat[i % w.size]


def _frozen(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def test_read_only_inputs_every_combination(backend):
    x = np.linspace(-2, 2, 40).astype(np.float32)
    w = np.arange(1, 6, dtype=np.float32)
    ref = x * np.tile(w, 8)
    for xs, ws in ((x, w), (_frozen(x), w), (x, _frozen(w)), (_frozen(x), _frozen(w))):
        y = np.empty_like(x)
        weighted(xs, ws, y, backend=backend)
        np.testing.assert_array_equal(y, ref)


def test_numba_compiles_once_for_read_only_inputs():
    x = np.linspace(-2, 2, 1 << 18).astype(np.float32)  # large: the parallel entry point too
    w = _frozen(np.arange(1, 6, dtype=np.float32))
    k = weighted.variant(defines={})  # its own variants, whatever ran before
    for xs in (x, _frozen(x)):
        for n in (16, x.size):
            y = np.empty(n, np.float32)
            k(xs[:n], w, y, backend="numba")
            np.testing.assert_array_equal(y, xs[:n] * np.tile(w, n // 5 + 1)[:n])
    (launcher,) = [v for (b, _), v in k._variants.items() if b == "numba"]
    for fn in (launcher._serial, launcher._ready["launch_parallel"]):
        assert len(fn.signatures) == 1, fn.signatures  # one compile (or cache load) each
