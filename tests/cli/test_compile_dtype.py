"""``opdsl compile --dtype``: generic kernels compiled from the command line."""
import textwrap

import numpy as np
import pytest

GENERIC = textwrap.dedent("""
    import dsl
    from dsl import In, Out
    T = dsl.TypeVar("T")
    U = dsl.TypeVar("U", (dsl.f32, dsl.f64))

    @dsl.kernel
    def axpy(x: In[T], y: Out[T], a: T):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = a * x.flat[i]

    @dsl.kernel
    def half(x: In[U], y: Out[U], k: U = 0.5):
        lo, hi = dsl.split(x.size)
        for i in range(lo, hi):
            y.flat[i] = x.flat[i] * k

    @dsl.kernel
    def count(x: In, n: Out[dsl.i64, 1]):
        n[0] = x.size
""")


@pytest.fixture
def generic(tmp_path):
    p = tmp_path / "generic.py"
    p.write_text(GENERIC)
    return p


def test_dtype_binds_the_typevar_of_every_generic_kernel(generic, backend, cli, monkeypatch, tmp_path):
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = cli("compile", generic, "--backend", backend, "--dtype", "x=f64")
    assert code == 0, err
    assert out.splitlines() == [f"axpy: compiled for {backend} (T=f64)", f"half: compiled for {backend} (U=f64)",
                                f"count: compiled for {backend} (x=f64)"]


def test_the_bound_specialization_is_the_one_emitted_and_run(generic, cli):
    code, out, err = cli("compile", generic, "--backend", "ir", "--emit", "--dtype", "y=i32", "--kernel", "axpy")
    assert code == 0, err
    assert out.startswith("# ---- axpy (ir, T=i32)\n")
    assert "name='x', dtype=dsl.i32" in out and "name='a', dtype=dsl.i32" in out
    from dsl.cli.compile import example_args, load_module, parse_dtypes
    k = load_module(str(generic)).axpy
    kwargs, shown = example_args(k, parse_dtypes(["a=i16"]))  # a scalar binds T too
    assert shown == {"T": "i16"} and kwargs["x"].dtype == np.int16 and kwargs["a"].dtype == np.int16
    x = np.arange(4, dtype=np.int16)
    y = np.zeros_like(x)
    k(x, y, np.int16(3), backend="interpreter")
    assert y.tolist() == [0, 3, 6, 9]


def test_unbound_and_bad_dtypes_are_clean_errors(generic, cli):
    code, out, err = cli("compile", generic, "--backend", "ir")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "opdsl: error: axpy: generic kernel: unbound dtype T (of x, y, a); bind it with --dtype PARAM=DTYPE, e.g. --dtype x=f32",
        "opdsl: error: half: generic kernel: unbound dtype U (of x, y); bind it with --dtype PARAM=DTYPE, e.g. --dtype x=f32",
        "opdsl: error: count: generic kernel: unbound dtype x (bare In/Out); bind it with --dtype PARAM=DTYPE, e.g. --dtype x=f32"]
    code, out, err = cli("compile", generic, "--backend", "ir", "--dtype", "x=i32", "--kernel", "half")
    assert code == 2 and err.strip() == "opdsl: error: half: --dtype x=i32: x has dtype U, which accepts f32, f64"
    code, out, err = cli("compile", generic, "--backend", "ir", "--dtype", "x=f32", "--dtype", "y=f64",
                         "--kernel", "axpy")
    assert code == 2 and err.strip() == "opdsl: error: axpy: --dtype x=f32 and --dtype y=f64 disagree: both are T in axpy"
    for args, says in ((["--dtype", "z=i32"], "--dtype z: no kernel compiled here has a generic (TypeVar) parameter "
                                              "'z'; generic parameters: a, k, x, y"),
                       (["--dtype", "n=i32"], "--dtype n: no kernel compiled here has a generic (TypeVar) parameter "
                                              "'n'; generic parameters: a, k, x, y"),
                       (["--dtype", "x=float"], "--dtype x=float: unknown dtype 'float'; accepted: bool, i8, u8, i16, "
                                                "u16, i32, u32, i64, u64, f16, bf16, f32, f64"),
                       (["--dtype", "x"], "--dtype expects PARAM=DTYPE (e.g. x=f32), got 'x'"),
                       (["--dtype", "x=f32", "--dtype", "x=f64"], "--dtype x is given twice (f32 and f64)")):
        code, out, err = cli("compile", generic, "--backend", "ir", *args)
        assert (code, err.strip()) == (2, f"opdsl: error: {says}"), args


def test_concrete_kernels_keep_their_specialization_and_output(cli, tmp_path):
    p = tmp_path / "k.py"
    p.write_text(textwrap.dedent("""
        import dsl
        from dsl import In, Out, f32
        T = dsl.TypeVar("T")

        @dsl.kernel
        def scale(x: In[f32], y: Out[f32], a: f32 = 2.0):
            y[0] = x[0] * a

        @dsl.kernel
        def copy(x: In[T], y: Out[T]):
            y[0] = x[0]
    """))
    code, out, err = cli("compile", p, "--backend", "interpreter", "--dtype", "x=u8")
    assert code == 0, err
    assert out.splitlines() == ["scale: compiled for interpreter", "copy: compiled for interpreter (T=u8)"]
