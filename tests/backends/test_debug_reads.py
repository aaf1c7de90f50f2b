"""Debug mode's promises on the compiled backends: a failed read gives 0 to the rest of its
statement (OpenCL used to read element 0), and an index out of range inside a @dsl.func on a
tensor parameter is the same IndexError as in the kernel body (it was an internal KeyError 't')."""
import numpy as np
import pytest

import dsl
from dsl import In, Out, f32, i64
from backends.bounds import KernelIndexError

COMPILED = ("numba", "opencl")
SRC = open(__file__).read().splitlines()


def line_of(marker):
    return next(i + 1 for i, s in enumerate(SRC) if s.rstrip().endswith("# " + marker))


@dsl.kernel(threads=1, debug=True)
def read_past_end(x: In[f32], y: Out[f32], k: i64):
    y[0] = x[k] + 1.0


@dsl.func
def element(t: In[f32, 2], i: i64, j: i64) -> f32:
    return t[i, j]  # E-func


@dsl.kernel(threads=1, debug=True)
def through_func(x: In[f32, 2], y: Out[f32], i: i64, j: i64):
    y[0] = element(x, i, j) + 1.0


@pytest.mark.parametrize("backend", COMPILED)
def test_a_failed_read_gives_zero_to_the_rest_of_the_statement(backend):
    x = np.array([42, 7, 9], np.float32)
    y = np.full(1, -5, np.float32)
    with pytest.raises(KernelIndexError) as info:
        read_past_end(x, y, 5, backend=backend)
    assert info.value.index == (5,) and info.value.shape == (3,)
    assert y[0] == 1.0  # 0 + 1.0, not x[0] + 1.0


@pytest.mark.parametrize("backend", COMPILED)
def test_an_index_out_of_range_in_a_func_is_an_index_error_naming_it(backend):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full(1, -5, np.float32)
    with pytest.raises(IndexError) as info:
        through_func(x, y, 1, 4, backend=backend)
    e = info.value
    assert isinstance(e, dsl.LaunchError)
    assert (e.tensor, e.index, e.shape) == ("t", (1, 4), (2, 3))
    text = str(e)
    assert "@dsl.func 'element' tensor parameter 't'" in text, text
    assert "axis 1: 4 not in 0..2" in text, text
    assert f"test_debug_reads.py:{line_of('E-func')}:" in text, text
    assert y[0] == 1.0
    through_func(x, y, 1, 2, backend=backend)  # in range: the value
    assert y[0] == 6.0
