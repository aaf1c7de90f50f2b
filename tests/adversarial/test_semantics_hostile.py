"""Hostile inputs to the semantics of part 4: each case in its own process (a crash fails one case).

Division, shift, power and conversion edges are where C and LLVM are undefined (a SIGFPE on
INT_MIN / -1 or a division by zero would kill the process); the generated code must define them.
"""
import pytest

from tests.adversarial.isolated import run

BACKENDS = ("interpreter", "numba", "opencl")

EDGES = """
import numpy as np, dsl, sys, tempfile, textwrap, importlib.util, os
src = textwrap.dedent('''
    import dsl
    from dsl import In, Out, i64, i32, u32, f64

    @dsl.kernel(threads=1)
    def edges(a: In[i64], b: In[i64], f: In[f64], o: Out[i64], p: Out[i32], q: Out[u32]):
        for k in range(a.size):
            o[k, 0] = a[k] // b[k]
            o[k, 1] = a[k] % b[k]
            o[k, 2] = a[k] << b[k]
            o[k, 3] = a[k] >> b[k]
            o[k, 4] = a[k] ** b[k]
            o[k, 5] = int(f[k])
            p[k] = i32(a[k]) // i32(b[k]) + i32(f[k])
            q[k] = u32(a[k] & 255) // u32(b[k] & 3) + u32(a[k] & 255) % u32(b[k] & 3)
''')
d = tempfile.mkdtemp()
path = os.path.join(d, "edges_mod.py")
open(path, "w").write(src)
spec = importlib.util.spec_from_file_location("edges_mod", path)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
a = np.array([-2**63, -2**63, -2**31, 5, 0, -1], np.int64)
b = np.array([-1, 0, -1, 0, -200, 2**62], np.int64)
f = np.array([float("nan"), float("inf"), -float("inf"), 1e300, -0.0, 3.99], np.float64)
outs = [np.zeros((6, 6), np.int64), np.zeros(6, np.int32), np.zeros(6, np.uint32)]
m.edges(a, b, f, *outs, backend=sys.argv[1] if len(sys.argv) > 1 else BACKEND)
print("OK", outs[0].tolist(), outs[1].tolist(), outs[2].tolist())
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_undefined_in_c_edges_neither_crash_nor_differ(backend):
    results = {}
    for b in ("interpreter", backend):
        out = run(f"BACKEND = {b!r}\n" + EDGES, timeout=300)
        assert "OK" in out.stdout, out.describe()
        results[b] = out.stdout.strip().splitlines()[-1]
    assert results[backend] == results["interpreter"]


def test_hostile_log_formats_are_compile_errors_not_crashes():
    code = """
    import numpy as np, dsl, tempfile, os, importlib.util, textwrap
    bad = ["%n", "%p", "%*d", "%ld", "%", "%.*f", "%lld", "%hhd", "%q", "%1$d", "%-", "%99999999999999999999d"]
    for fmt in bad:
        src = textwrap.dedent(f'''
            import dsl
            from dsl import Out, i64
            @dsl.kernel(threads=1)
            def k(o: Out[i64]):
                dsl.log.error({fmt!r}, o[0])
        ''')
        d = tempfile.mkdtemp(); path = os.path.join(d, "m.py"); open(path, "w").write(src)
        spec = importlib.util.spec_from_file_location("m", path); m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        try:
            m.k(np.zeros(1, np.int64), backend="numba")
        except dsl.CompileError as e:
            assert "error:" in str(e), str(e)
            continue
        except Exception as e:
            raise SystemExit(f"{fmt!r}: {type(e).__name__}: {e}")
        raise SystemExit(f"{fmt!r} was accepted")
    print("ALL REJECTED")
    """
    out = run(code, timeout=300)
    assert "ALL REJECTED" in out.stdout, out.describe()
