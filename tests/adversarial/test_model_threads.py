"""Model.run from 8 threads at once (issue 7 §3): every run gets the result a lone run gets.

Each case runs in its own process (tests/adversarial/isolated.py): a data race in a backend can
crash rather than fail.  Inputs differ per thread and per run, so two runs sharing an
intermediate buffer would hand one thread another's numbers.
"""
from __future__ import annotations

import pytest

from tests.adversarial import isolated

PRELUDE = """
import threading
import numpy as np
import dsl, ops

def hammer(model, feeds_list, threads=8):
    '''Run every feed from `threads` threads at once; compare with a lone run of the same feed.'''
    expected = [model.run(f) for f in feeds_list]
    start = threading.Barrier(threads)
    errors = []
    def work(t):
        try:
            start.wait()
            for k in range(len(feeds_list)):
                i = (k + t) % len(feeds_list)
                got = model.run(feeds_list[i])
                for name, want in expected[i].items():
                    np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6,
                                               err_msg=f"thread {t}, feed {i}, output {name}")
        except BaseException as e:
            errors.append(e)
    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool: th.start()
    for th in pool: th.join()
    if errors:
        raise errors[0]
"""

CHAIN = """
rng = np.random.default_rng(0)
g = dsl.Graph("chain")
x = g.input("x", {shape!r}, dsl.f32)
wv = rng.standard_normal(({cols}, {cols})).astype(np.float32)
w = g.constant("w", wv)
h = ops.Relu(ops.Add(x, x))                     # intermediates live in the shared arena
h = ops.Tanh(ops.MatMul(h, w))
g.output(ops.Mul(h, ops.Sigmoid(h)), "y")
model = g.compile(backend={backend!r})
feeds = [{{"x": rng.standard_normal(({rows}, {cols})).astype(np.float32)}} for _ in range(6)]
for f in feeds:  # the single-threaded result is right, too
    xv = f["x"]; hv = np.tanh(np.maximum(2 * xv, 0) @ wv)
    np.testing.assert_allclose(model.run(f)["y"], hv / (1 + np.exp(-hv)), rtol=1e-5, atol=1e-5)
hammer(model, feeds)
print("ok")
"""

SIZES = {"interpreter": (3, 4), "numba": (64, 32), "opencl": (2, 4)}


def _env(backend):
    return {"OPDSL_BACKEND": backend}


@pytest.mark.parametrize("dynamic_rows", [False, True], ids=["static", "run-time-dims"])
def test_model_run_from_8_threads(backend, dynamic_rows):
    rows, cols = SIZES[backend]
    shape = (None if dynamic_rows else rows, cols)
    out = isolated.run(PRELUDE + CHAIN.format(shape=shape, rows=rows, cols=cols, backend=backend), timeout=600)
    assert out.stdout.strip().endswith("ok")


def test_value_dependent_model_from_8_threads(backend):
    """``_run_by_node``: shapes come from an input's values, so every run infers and allocates."""
    code = PRELUDE + f"""
rng = np.random.default_rng(1)
g = dsl.Graph("dyn")
x = g.input("x", (None, 6), dsl.f32)
s = g.input("s", (2,), dsl.i64)
g.output(ops.Relu(ops.Add(ops.Reshape(x, s), ops.Reshape(x, s))), "y")
model = g.compile(backend={backend!r})
feeds = [{{"x": rng.standard_normal((2, 6)).astype(np.float32), "s": np.array(t, np.int64)}}
         for t in ([3, 4], [6, 2], [12, 1], [2, 6], [4, 3])]
for f in feeds:
    np.testing.assert_array_equal(model.run(f)["y"], np.maximum(2 * f["x"], 0).reshape(f["s"]))
hammer(model, feeds)
print("ok")
"""
    out = isolated.run(code, timeout=600)
    assert out.stdout.strip().endswith("ok")


def test_runs_of_one_model_overlap():
    """Runs are not serialized: two runs must be inside the same node at the same time to pass
    a two-party barrier (a model-wide lock would time the barrier out)."""
    code = """
import threading
import numpy as np
import dsl

meet = threading.Barrier(2, timeout=20)

def rendezvous(x, y):
    meet.wait()
    np.multiply(x, 3, out=y)

class Meet(dsl.Op):
    kernels = {"default": rendezvous}
    def infer(self, x):
        return x.spec

g = dsl.Graph("meet")
x = g.input("x", (4,), dsl.f32)
g.output(Meet()(Meet()(x)), "y")
model = g.compile(backend="interpreter")
results = {}
def work(t):
    results[t] = model.run({"x": np.full(4, t, np.float32)})["y"]
th = [threading.Thread(target=work, args=(t,)) for t in (1, 2)]
for t in th: t.start()
for t in th: t.join()
for t in (1, 2):
    np.testing.assert_array_equal(results[t], np.full(4, 9 * t, np.float32))
print("ok")
"""
    out = isolated.run(code, timeout=120)
    assert out.stdout.strip().endswith("ok")
