"""JAX arrays as kernel arguments (issue 27 §1): CPU JAX arrays bind as inputs with no copy,
numpy's checks apply, and writing into one (JAX arrays are immutable) or passing a tracer is a
TypeError naming the parameter.  Skipped where jax is not installed (it is not in the test extra:
jaxlib is an ~85 MB wheel)."""
import subprocess
import sys

import numpy as np
import pytest

import dsl
from dsl import In, InOut, Out, bf16, f32, i32
from dsl.runtime import foreign

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@dsl.kernel(threads=2)
def gather_scale(table: In[f32, 2], idx: In[i32], w: In[f32], y: Out[f32, 2]):
    lo, hi = dsl.split(idx.shape[0])
    for r in range(lo, hi):
        for j in range(table.shape[1]):
            y[r, j] = table[idx[r], j] * w[j]


@dsl.kernel(threads=2)
def widen(x: In[bf16], h: In[dsl.f16], y: Out[f32]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        y[i] = f32(x[i]) + f32(h[i])


@dsl.kernel(threads=2)
def accumulate(x: In[f32], y: InOut[f32]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        y[i] += x[i]


@dsl.kernel(threads=2)
def squares(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.shape[0])
    for i in range(lo, hi):
        y[i] = x[i] * x[i] * dsl.sin(x[i])


def test_jax_arrays_bind_as_inputs(backend):
    rng = np.random.default_rng(0)
    table_np = rng.standard_normal((6, 5)).astype(np.float32)
    idx_np = np.array([5, 0, 3, 3], np.int32)
    w_np = rng.standard_normal(5).astype(np.float32)
    y = np.zeros((4, 5), np.float32)
    gather_scale(jnp.asarray(table_np), jnp.asarray(idx_np), jnp.asarray(w_np), y, backend=backend)
    np.testing.assert_allclose(y, table_np[idx_np] * w_np, rtol=1e-6)


def test_jax_input_is_a_view_not_a_copy():
    a = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    view = foreign.as_numpy("k", "x", In[f32, 2], a)
    assert view.ctypes.data == a.unsafe_buffer_pointer()
    assert view.shape == (3, 4) and not view.flags.writeable


def test_jax_half_and_bfloat16_inputs(backend):
    """bfloat16 is a dtype DLPack cannot carry to numpy: it comes through the array's host buffer."""
    x = jnp.asarray([1.5, -2.0, 0.25], dtype=jnp.bfloat16)
    h = jnp.asarray([0.5, 0.5, -1.0], dtype=jnp.float16)
    y = np.zeros(3, np.float32)
    widen(x, h, y, backend=backend)
    np.testing.assert_array_equal(y, [2.0, -1.5, -0.75])
    assert foreign.as_numpy("widen", "x", In[bf16], x).ctypes.data == x.unsafe_buffer_pointer()


@pytest.mark.parametrize("kernel, args, name", [
    (accumulate, lambda: (np.ones(3, np.float32), jnp.zeros(3, jnp.float32)), "y"),
    (gather_scale, lambda: (np.ones((2, 2), np.float32), np.zeros(1, np.int32), np.ones(2, np.float32),
                            jnp.zeros((1, 2), jnp.float32)), "y"),
])
def test_writing_into_a_jax_array_is_an_error_naming_the_parameter(kernel, args, name):
    with pytest.raises(TypeError, match=rf"argument '{name}' \((InOut|Out)\[dsl.f32(, 2)?\]\) would be written, "
                                        r"but JAX arrays are immutable: pass a numpy array"):
        kernel(*args())


def test_a_jax_tracer_is_an_error_naming_the_parameter():
    def traced(x):
        squares(x, np.zeros(3, np.float32))
        return x

    with pytest.raises(TypeError, match=r"argument 'x' \(In\[dsl.f32\]\) is a JAX tracer .*outside the traced "
                                        r"function, or through jax.pure_callback"):
        jax.jit(traced)(jnp.ones(3, jnp.float32))


def test_numpy_checks_apply_to_jax_arrays():
    with pytest.raises(TypeError, match=r"gather_scale\(\).*'idx'.*i32"):
        gather_scale(np.zeros((2, 2), np.float32), jnp.zeros(2, jnp.float32), np.zeros(2, np.float32),
                     np.zeros((2, 2), np.float32))
    with pytest.raises((TypeError, ValueError), match=r"'table'"):
        gather_scale(jnp.zeros(4, jnp.float32), np.zeros(2, np.int32), np.zeros(2, np.float32),
                     np.zeros((2, 2), np.float32))


def test_gradient_kernel_reads_jax_arrays(backend):
    x_np = np.linspace(-1.0, 1.0, 7).astype(np.float32)
    gy_np = np.random.default_rng(1).standard_normal(7).astype(np.float32)
    gx = np.zeros(7, np.float32)
    dsl.grad(squares)(jnp.asarray(x_np), np.zeros(7, np.float32), jnp.asarray(gy_np), gx, backend=backend)
    expect = gy_np * (2 * x_np * np.sin(x_np) + x_np * x_np * np.cos(x_np))
    np.testing.assert_allclose(gx, expect, rtol=1e-5, atol=1e-6)


def test_import_dsl_does_not_import_jax():
    code = "import sys, dsl, dsl.runtime.foreign; dsl.Op; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
