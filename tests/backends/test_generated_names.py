"""Generated helper names and module aliases never collide with a kernel's own names.

The names are read from what the generators emit (the numba module's source and the OpenCL C of a
kernel that exercises SIMD, math, logging, split, scratch, sync, a @dsl.func, integer helpers and
debug checks), not copied by hand, so a helper added later is covered too. Every one of them then
becomes a local of the kernel (set and used before its sync(), in the code that calls the helpers:
live across the barrier they would only become state arrays) and of its @dsl.func, and the kernel
must still compile and compute the same results.
"""
import ast
import builtins
import importlib.util
import keyword
import re
import textwrap

import numpy as np
import pytest

BACKENDS = ("interpreter", "numba", "opencl")

BODY = '''
import dsl
from dsl import In, Out, f32, i64

@dsl.func
def helper(t: In[f32], i: i64) -> f32:
{func_locals}
    return t[i] * 2.0{func_sum}

@dsl.kernel(threads=4, debug={debug})
def rich(x: In[f32], q: In[i64], y: Out[f32], z: Out[i64], w: Out[i64]):
{kernel_locals}
    s = dsl.scratch((4,), f32)
    acc = dsl.local((2,), f32)
    lo, hi = dsl.split(x.size, 8)
    for i in range(lo, hi, 8):
        v = x.vload(i, 8)
        acc[0] += dsl.reduce_add(dsl.exp(v) * 0.0 + v)
        acc[i % 2] += helper(x, i)
    s[dsl.thread_id()] = acc[0] + acc[1]
    if dsl.thread_id() == 0:
        dsl.log.debug("part %f", s[0])
        for j in range(q.size):
            z[j] = q[j] // 3 + (q[j] % 5) ** 2 + (q[j] << 2)
{kernel_uses}
    dsl.sync()
    if dsl.thread_id() == 0:
        y[0] = s[0] + s[1] + s[2] + s[3]
'''


def load(tmp_path, name, kernel_names=(), func_names=(), debug=False):
    kl = "".join(f"    {n} = i64({k})\n" for k, n in enumerate(kernel_names)) or "    pass\n"
    uses = "".join(f"        w[{k}] = {n}\n" for k, n in enumerate(kernel_names))
    fl = "    total_of_locals = f32(0)\n" + "".join(f"    {n} = f32(0)\n    total_of_locals += {n}\n"
                                                   for n in func_names)
    fsum = " + total_of_locals"
    src = BODY.format(debug=debug, kernel_locals=kl, kernel_uses=uses, func_locals=fl, func_sum=fsum)
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, src


def args(n_names):
    x, q = np.arange(64, dtype=np.float32), np.arange(-5, 10, dtype=np.int64)
    return x, q, np.zeros(1, np.float32), np.zeros(q.size, np.int64), np.zeros(max(n_names, 1), np.int64)


def python_names(source):
    """Every identifier a generated Python module binds or reads."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.add(node.asname or node.name.split(".")[0])
    return out


def c_names(source):
    """Every identifier in generated C, comments and string literals removed."""
    source = re.sub(r"//[^\n]*|\"(\\.|[^\"\\])*\"", " ", source)
    return set(re.findall(r"\b[A-Za-z_]\w*\b", source))


@pytest.fixture(scope="module")
def generated_names(tmp_path_factory):
    """The helper names and aliases the numba and OpenCL generators emit for the rich kernel
    (debug off and on), minus what the kernel's own module names (its parameters, locals, imports
    and the Python builtins its body calls: shadowing those changes the kernel, not the backend)."""
    a = args(0)
    names = set()
    for debug in (False, True):
        mod, src = load(tmp_path_factory.mktemp("names"), f"names_probe_{debug}", debug=debug)
        names |= python_names(mod.rich.source("numba", *a))
        names |= c_names(mod.rich.source("opencl", *a))
    own = python_names(textwrap.dedent(src)) | set(dir(builtins))
    return sorted(n for n in names - own if n.isidentifier() and not keyword.iskeyword(n))


@pytest.fixture(scope="module")
def taken_module(generated_names, tmp_path_factory):
    return load(tmp_path_factory.mktemp("names"), "names_taken", generated_names, generated_names)[0]


def test_the_probe_finds_the_generators_aliases(generated_names):
    # the module aliases and hidden names each generator uses, seen in their output
    for n in ("sm", "rt", "np", "nm", "fmt", "ix", "opdsl_intr", "get_local_id"):
        assert n in generated_names
    assert len(generated_names) > 60


@pytest.mark.parametrize("backend", BACKENDS)
def test_locals_named_like_every_generated_helper_compile_and_agree(taken_module, generated_names, backend):
    x, q, y, z, w = args(len(generated_names))
    taken_module.rich(x, q, y, z, w, backend=backend)
    assert y[0] == pytest.approx(float(x.sum() + 2 * x[::8].sum()))
    assert z.tolist() == (q // 3 + (q % 5) ** 2 + (q << 2)).tolist()
    assert w.tolist() == list(range(len(generated_names)))


def test_the_issue_case_a_simd_local_named_sm(tmp_path):
    src = textwrap.dedent('''
        import dsl
        from dsl import In, Out, f32

        @dsl.kernel(threads=1)
        def rows(x: In[f32, 2], y: Out[f32]):
            for r in range(x.shape[0]):
                sm = dsl.splat(f32(0), 8)
                for c in range(0, x.shape[1], 8):
                    sm = sm + x.vload(r * x.shape[1] + c, 8) * 2.0
                y[r] = dsl.reduce_add(sm)
    ''')
    (tmp_path / "sm_mod.py").write_text(src)
    spec = importlib.util.spec_from_file_location("sm_mod", tmp_path / "sm_mod.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    for backend in BACKENDS:
        y = np.zeros(3, np.float32)
        mod.rows(x, y, backend=backend)
        assert np.allclose(y, 2 * x.sum(axis=1)), backend
