"""Batch inference on Dask (docs/dask.md): ``Model.run_dask`` and ``dsl.dask.map_blocks`` on the
local scheduler and on a LocalCluster of 2 worker processes, against single-process results;
a worker killed mid-run; the errors."""
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import dsl
import ops
from dsl import In, Out, f32
from lazy_modules import optional  # tests/ is on sys.path; imported on first use, not at collection

da = optional("dask.array")
distributed = optional("distributed")

ROOT = Path(__file__).resolve().parents[2]
QAIC = ROOT / "examples" / "qaic_package"


@dsl.kernel
def axpb(x: In[f32], y: Out[f32], a: f32 = 1.0, b: f32 = 0.0):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = a * x.flat[i] + b


@dsl.kernel
def spin_copy(x: In[f32], y: Out[f32], n: dsl.i64 = 1):
    """y = x, slowly: n rounds of acc = acc/2 + x/2 (exact in f32) per element."""
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        acc = x.flat[i]
        for k in range(n):
            acc = acc * 0.5 + x.flat[i] * 0.5
        y.flat[i] = acc


class SlowCopy(dsl.Op):
    """A chunk that takes long enough to kill its worker while the job runs."""
    n: int = 1

    def infer(self, x):
        return x.spec
    kernels = {"default": spin_copy}


def _affine_model(backend):
    g = dsl.Graph("affine")
    x = g.input("x", ("batch", 6), dsl.f32)
    w = g.constant("w", np.linspace(-1, 1, 6, dtype=np.float32))
    y = ops.Relu(ops.Add(ops.Mul(x, w), w))
    g.output(y, "y")
    g.output(ops.Tanh(y), "t")
    return g.compile(backend=backend)


def _qaic_model(backend):
    sys.path.insert(0, str(QAIC))
    try:
        from build_model import build, reference
    finally:
        sys.path.remove(str(QAIC))
    proto = build()
    return dsl.load_onnx(proto, packages=[QAIC], backend=backend), lambda x: reference(proto, x)


@pytest.fixture(scope="module")
def client():
    """One cluster for the module: 2 worker processes, one thread each."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       worker_dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


# ---------------------------------------------------------------- the local scheduler

def test_run_dask_on_the_local_scheduler_matches_run(backend):
    model = _affine_model(backend)
    x = np.random.default_rng(0).standard_normal((23, 6)).astype(np.float32)
    want = model.run({"x": x})
    lazy = model.run_dask({"x": x}, chunks=5)
    assert set(lazy) == {"y", "t"} and lazy["y"].chunks == ((5, 5, 5, 5, 3), (6,))
    for name in ("y", "t"):
        np.testing.assert_allclose(lazy[name].compute(), want[name], rtol=1e-6, atol=1e-7)
    # a dask feed keeps its chunks; uneven ones are fine
    lazy = model.run_dask({"x": da.from_array(x, chunks=((10, 13), (3, 3)))})
    assert lazy["y"].chunks[0] == (10, 13)
    np.testing.assert_allclose(lazy["y"].compute(), want["y"], rtol=1e-6)


def test_the_model_is_one_key_every_chunk_depends_on():
    model = _affine_model("numba")
    lazy = model.run_dask({"x": np.zeros((12, 6), np.float32)}, chunks=3)
    graph = dict(lazy["y"].__dask_graph__())
    model_keys = [k for k in graph if str(k).startswith("opdsl-model-")]
    assert len(model_keys) == 1  # sent to each worker once, not once per chunk
    chunk_tasks = [k for k in graph if str(k[0] if isinstance(k, tuple) else k).startswith("_run_chunk")]
    assert len(chunk_tasks) == 4


def test_batch_axis_other_than_zero(backend):
    g = dsl.Graph("neg")
    x = g.input("x", (3, "n"), dsl.f32)
    g.output(ops.Neg(x), "y")
    model = g.compile(backend=backend)
    x = np.arange(30, dtype=np.float32).reshape(3, 10)
    y = model.run_dask({"x": x}, batch_axis=1, chunks=4)["y"]
    assert y.chunks == ((3,), (4, 4, 2))
    np.testing.assert_array_equal(y.compute(), -x)


def test_map_blocks_on_the_local_scheduler(backend):
    x = np.random.default_rng(1).standard_normal((9, 7)).astype(np.float32)
    y = dsl.dask.map_blocks(axpb, da.from_array(x, chunks=(4, 7)), a=2.0, b=0.5, backend=backend)
    assert y.dtype == np.float32 and y.chunks == ((4, 4, 1), (7,))
    np.testing.assert_allclose(y.compute(), 2 * x + 0.5, rtol=1e-6)


@dsl.kernel
def weighted_sum(x: In[f32], w: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        y.flat[i] = x.flat[i] + 10.0 * w.flat[i]


def test_map_blocks_pairs_inputs_chunked_differently_element_by_element(backend):
    """250- vs 300-element chunks: block k of one input used to meet block k of the other."""
    x = np.arange(1000, dtype=np.float32)
    w = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    y = dsl.dask.map_blocks(weighted_sum, da.from_array(x, chunks=250), da.from_array(w, chunks=300),
                            backend=backend)
    assert y.chunks == ((250, 250, 250, 250),)  # the first input's chunks
    np.testing.assert_allclose(y.compute(), x + 10.0 * w, rtol=1e-6)


# ---------------------------------------------------------------- a cluster of 2 processes

def test_package_model_on_the_cluster_matches_single_process(client, tmp_path):
    model, reference = _qaic_model("numba")
    x = np.random.default_rng(2).standard_normal((40, 16)).astype(np.float32)
    want = model.run({"x": x})["y"]
    np.testing.assert_allclose(want, reference(x), rtol=1e-5, atol=1e-6)
    lazy = model.run_dask({"x": x}, chunks=8)["y"]
    np.testing.assert_array_equal(lazy.compute(), want)  # the same kernels on the same rows: bit-identical


def test_raw_opencl_op_on_the_cluster(client):
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")
    from dsl.runtime.raw_opencl import RawOpenCL
    source = "__kernel void twice(__global const float *x, __global float *y) " \
             "{ size_t i = get_global_id(0); y[i] = 2.0f * x[i]; }"
    raw = RawOpenCL("twice", source, inputs=["x"], outputs=["y"], select=lambda dtypes, params: ("twice", ""),
                    enqueue=lambda ins, outs, params: ((ins[0].size,), None),
                    shape=lambda ins, params: [(ins[0].shape, ins[0].dtype)])

    class Twice(dsl.Op):  # defined here: class, hooks and OpenCL source all travel by value
        def infer(self, x):
            return x.spec
        kernels = {"default": raw}

    g = dsl.Graph("twice")
    x = g.input("x", ("batch", 4), dsl.f32)
    g.output(Twice()(x), "y")
    model = g.compile(backend="opencl")
    xv = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.testing.assert_array_equal(model.run_dask({"x": xv}, chunks=3)["y"].compute(), 2 * xv)


def test_map_blocks_on_the_cluster(client):
    x = np.random.default_rng(3).standard_normal((50, 5)).astype(np.float32)
    y = dsl.dask.map_blocks(axpb, da.from_array(x, chunks=(10, 5)), a=-1.0, b=3.0)
    np.testing.assert_allclose(y.compute(), 3.0 - x, rtol=1e-6)


def test_a_worker_killed_mid_run_and_the_job_finishes_the_same(client):
    g = dsl.Graph("slow")
    t = g.input("x", ("batch", 8), dsl.f32)
    g.output(ops.Neg(SlowCopy(n=2_000_000)(t)), "y")
    model = g.compile(backend="numba")
    x = np.random.default_rng(4).standard_normal((64, 8)).astype(np.float32)
    want = -x
    lazy = model.run_dask({"x": x}, chunks=4)["y"]  # 16 chunks, each long enough to see the job running
    pids = client.run(os.getpid)
    running = client.persist(lazy)
    deadline = time.monotonic() + 120
    while not any(s == "finished" for s in _chunk_states(client, running)) and time.monotonic() < deadline:
        time.sleep(0.01)
    victim = sorted(pids.values())[0]
    os.kill(victim, signal.SIGKILL)  # its chunks, running or done, are lost with it
    assert not all(s == "finished" for s in _chunk_states(client, running))  # the job was still running
    np.testing.assert_array_equal(running.compute(), want)
    client.wait_for_workers(2, timeout=120)  # the nanny started a new worker process
    assert victim not in client.run(os.getpid).values()


def _chunk_states(client, arr):
    futures = distributed.futures_of(arr)
    return [f.status for f in futures]


# ---------------------------------------------------------------- errors

def test_run_dask_errors_name_the_problem():
    model = _affine_model("numba")
    x = np.zeros((8, 6), np.float32)
    with pytest.raises(ValueError, match=r"feeds lack 'x'; have unknown 'z'; the model's inputs are 'x'"):
        model.run_dask({"z": x})
    with pytest.raises(TypeError, match=r"input 'x' is a dask array, chunked already; chunks= is for numpy"):
        model.run_dask({"x": da.from_array(x, chunks=4)}, chunks=2)
    with pytest.raises(ValueError, match=r"chunks=0.*positive number of rows"):
        model.run_dask({"x": x}, chunks=0)
    with pytest.raises(ValueError, match=r"chunk lengths must be positive ints adding up to the 8 rows"):
        model.run_dask({"x": x}, chunks=(3, 3))
    with pytest.raises(ValueError, match=r"input 'x' has 2 dimension\(s\), no batch_axis 2"):
        model.run_dask({"x": x}, batch_axis=2)
    g = dsl.Graph("total")
    t = g.input("x", ("batch", 6), dsl.f32)
    g.output(ops.ReduceSum(keepdims=0)(t, g.constant("axes", np.array([0]))), "s")
    with pytest.raises(ValueError, match=r"output 's' is f32\[6\] for a chunk of 4 rows: it does not keep batch_axis"):
        g.compile(backend="numba").run_dask({"x": x}, chunks=4)


def test_map_blocks_errors_name_the_problem():
    x = da.from_array(np.zeros((4, 3), np.float32), chunks=2)
    with pytest.raises(TypeError, match=r"map_blocks takes a @dsl.kernel first, got function"):
        dsl.dask.map_blocks(lambda block: -block, x)
    with pytest.raises(TypeError, match=r"axpb\(\): argument 'x' has dtype f64"):
        dsl.dask.map_blocks(axpb, x.astype(np.float64))
    with pytest.raises(TypeError, match=r"axpb\(\) got an unexpected argument 'c'"):
        dsl.dask.map_blocks(axpb, x, c=1.0)
    with pytest.raises(TypeError, match=r"at least one input must be a dask array"):
        dsl.dask.map_blocks(axpb, np.zeros(3, np.float32))


def test_without_dask_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "dask.array", None)
    with pytest.raises(ImportError, match=r'pip install "opdsl\[dask\]"'):
        dsl.dask.map_blocks(axpb, np.zeros(3, np.float32))
    with pytest.raises(ImportError, match=r'pip install "opdsl\[dask\]"'):
        _affine_model("interpreter").run_dask({"x": np.zeros((2, 6), np.float32)})


def test_dsl_imports_without_dask(tmp_path):
    import subprocess
    code = ("import sys; sys.modules['dask'] = None; import dsl, ops; import dsl.dask; "
            "print(dsl.dask.INSTALL)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert 'opdsl[dask]' in done.stdout
