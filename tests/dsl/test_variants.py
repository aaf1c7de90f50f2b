"""Per-implementation compile options: ``Kernel.variant(defines=..., features=...)`` and
``RawOpenCL.variant``: each define set compiles its own specialization on every backend,
caches on disk under its own key, reaches only the variant that asked for it, and bad
options are clear errors."""
import numpy as np
import pytest

import dsl
from backends import cache
from dsl import In, Out, f32

SCALE = 2          # module constants the kernel folds in; variants override them
OFFSET = 0.5
CLAMP = False


@dsl.func
def scaled(v):
    return v * SCALE  # a helper of the same module follows the define too


@dsl.kernel
def affine(x: In[f32], y: Out[f32]):
    lo, hi = dsl.split(x.size)
    for i in range(lo, hi):
        v = scaled(x.flat[i]) + OFFSET
        if CLAMP:
            v = dsl.clamp(v, f32(-1), f32(1))
        y.flat[i] = v


def _ref(x, scale=2, offset=0.5, clamp=False):
    y = x * np.float32(scale) + np.float32(offset)
    return np.clip(y, -1, 1) if clamp else y


X = np.linspace(-3, 3, 37).astype(np.float32)


def test_defines_override_module_constants_per_variant(backend):
    wide = affine.variant(defines={"SCALE": 5})
    clamped = wide.variant(defines={"CLAMP": True, "OFFSET": 1})  # defines accumulate; int -> float ok
    for k, ref in ((affine, _ref(X)), (wide, _ref(X, 5)), (clamped, _ref(X, 5, 1.0, True)),
                   (affine, _ref(X))):  # the original is untouched after its variants compiled
        y = np.empty_like(X)
        k(X, y, backend=backend)
        np.testing.assert_allclose(y, ref, rtol=1e-6)
    assert clamped.defines == (("CLAMP", True), ("OFFSET", 1.0), ("SCALE", 5))
    assert clamped.base is affine and "SCALE=5" in repr(clamped)
    assert SCALE == 2 and scaled.fn.__globals__["SCALE"] == 2  # the module itself never changes


def test_each_define_set_has_its_own_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("OPDSL_CACHE_DIR", str(tmp_path / "cache"))
    cache.reset()
    try:
        a, b, c = affine.variant(defines={"SCALE": 3}), affine.variant(defines={"SCALE": 4}), \
            affine.variant(defines={"SCALE": 3})
        values, key = affine.bind((X, np.empty_like(X)), {})

        def code_key(k):  # the key its code is stored under (x and y read flat: shared by every rank)
            return k.request("numba", key, values).key
        keys = {code_key(k) for k in (affine, a, b)}
        assert len(keys) == 3 and code_key(a) == code_key(c)
        y = np.empty_like(X)
        for k in (a, b):
            k(X, y, backend="numba")
        stored = " ".join(p.name for p in (tmp_path / "cache").rglob("*"))
        assert code_key(a) in stored and code_key(b) in stored
        # a fresh variant with the same defines (as in a new process) loads its own entry
        c(X, y, backend="numba")
        np.testing.assert_allclose(y, _ref(X, 3), rtol=1e-6)
    finally:
        cache.reset()


def test_source_shows_the_defined_value():
    src = affine.variant(defines={"OFFSET": 0.25}).source("opencl", X, np.empty_like(X))
    assert "0.25" in src and "0.5f" not in src


@pytest.mark.parametrize("defines, err, match", [
    ({"SCALEE": 3}, ValueError, r"'SCALEE' is not a module-level int/float/bool constant of module "
                                r"'.*test_variants'.*\(constants: CLAMP, OFFSET, SCALE\)"),
    ({"np": 3}, ValueError, "'np' is not a module-level int/float/bool constant"),
    ({"SCALE": 2.5}, TypeError, r"SCALE is int \(SCALE = 2 in .*\), got float 2.5"),
    ({"CLAMP": 1}, TypeError, r"CLAMP is bool \(CLAMP = False in .*\), got int 1"),
    ([("SCALE", 3)], TypeError, "takes a dict of constant name -> value, got list"),
])
def test_bad_defines_name_the_constant_and_what_is_accepted(defines, err, match):
    with pytest.raises(err, match=match):
        affine.variant(defines=defines)


def test_features_gate_an_implementation(backend):
    have = sorted(dsl.target(backend).features)
    ok = affine.variant(features={have[0].upper()})
    assert ok.features == {have[0]} and ok.supported(backend)
    y = np.empty_like(X)
    ok(X, y, backend=backend)
    np.testing.assert_allclose(y, _ref(X), rtol=1e-6)
    missing = affine.variant(features={"no_such_feature"})
    assert not missing.supported(backend)
    with pytest.raises(dsl.CompileError, match=rf"kernel 'affine' needs target feature\(s\) no_such_feature, "
                                               rf"which the {backend} target \(.*\) lacks"):
        missing(X, y, backend=backend)
    with pytest.raises(TypeError, match="takes a set of feature names"):
        affine.variant(features="avx2")


# ---------------------------------------------------------------- in an op's kernels mapping

@dsl.op("AffineVariants", domain="test.variants")
class Affine(dsl.Op):
    """Picks a define set by param; 'fancy' needs a feature no target has."""

    mode: str = "plain"
    kernels = {"plain": affine, "scale4": affine.variant(defines={"SCALE": 4}),
               "clamped": affine.variant(defines={"CLAMP": True}),
               "fancy": affine.variant(features={"no_such_feature"})}

    def infer(self, x):
        return x.spec

    def select(self, x, *, backend):
        return self.mode


@pytest.mark.parametrize("mode, ref", [("plain", _ref(X)), ("scale4", _ref(X, 4)), ("clamped", _ref(X, clamp=True))])
def test_op_variants_in_a_graph(backend, mode, ref):
    g = dsl.Graph("variants")
    x = g.input("x", (None,), dsl.f32)
    g.output(Affine(mode=mode)(x), "y")
    model = g.compile(backend=backend)
    np.testing.assert_allclose(model.run({"x": X})["y"], ref, rtol=1e-6)
    np.testing.assert_allclose(Affine(X, mode=mode, backend=backend), ref, rtol=1e-6)


def test_op_variant_missing_features_fails_at_compile(backend):
    g = dsl.Graph("fancy")
    x = g.input("x", (4,), dsl.f32)
    g.output(Affine(mode="fancy")(x), "y")
    with pytest.raises(dsl.VerifyError, match=r"implementation 'fancy': kernel 'affine' needs target feature\(s\) "
                                              r"no_such_feature"):
        g.compile(backend=backend)


# ---------------------------------------------------------------- raw OpenCL

RAW = """
#ifndef SCALE
#define SCALE 1
#endif
__kernel void scale_f32(__global const float* x, __global float* y) {
    size_t i = get_global_id(0);
    y[i] = SCALE * x[i] + BIAS;
}
"""


@pytest.fixture
def raw_op():
    from backends import base
    reason = base.get("opencl").available()
    if reason:
        pytest.skip(f"opencl: {reason}")
    from dsl.runtime.raw_opencl import RawOpenCL
    return RawOpenCL("scale", RAW, inputs=("x",), outputs=("y",),
                     select=lambda dts, p: ("scale_f32", "-DBIAS=0.5f"),
                     enqueue=lambda ins, outs, p: ((ins[0].size,), None),
                     shape=lambda ins, p: [(ins[0].shape, ins[0].dtype)])


def test_raw_opencl_defines_apply_only_to_their_variant(raw_op):
    three = raw_op.variant(defines={"SCALE": 3})
    half = raw_op.variant(defines={"SCALE": 0.5})
    for op, scale in ((raw_op, 1), (three, 3), (raw_op, 1), (half, 0.5), (three, 3)):
        np.testing.assert_allclose(op(X), np.float32(scale) * X + np.float32(0.5), rtol=1e-6, atol=1e-6)
    assert raw_op.build_options == "" and three.build_options == "-DSCALE=3"
    assert half.build_options == "-DSCALE=0.5f"
    manifest = raw_op.variant(build_options=" -DSCALE=4 ")  # a package manifest's string, as given
    np.testing.assert_allclose(manifest(X), np.float32(4) * X + np.float32(0.5), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(raw_op(X), X + np.float32(0.5), rtol=1e-6, atol=1e-6)


def test_raw_opencl_variant_errors(raw_op):
    with pytest.raises(ValueError, match="macro name '1X' is not a C identifier"):
        raw_op.variant(defines={"1X": 1})
    with pytest.raises(TypeError, match=r"SCALE = 'a b'; accepted: int, bool, finite float, or a string"):
        raw_op.variant(defines={"SCALE": "a b"})
    with pytest.raises(TypeError, match=r"variant\(build_options=...\) takes a string such as '-DX=1', got list"):
        raw_op.variant(build_options=["-DX=1"])
    gated = raw_op.variant(features={"no_such_feature"})
    assert not gated.supported()
    with pytest.raises(ValueError, match=r"raw OpenCL op scale needs target feature\(s\) no_such_feature"):
        gated(X)


def test_autotuned_variants_store_their_winners_apart():
    plain = dsl.autotune(configs=[{"grid": 1}])(affine)
    three = dsl.autotune(configs=[{"grid": 1}])(affine.variant(defines={"SCALE": 3}))
    assert "defines" not in plain._identity("interpreter", ())
    assert three._identity("interpreter", ())["defines"] == "(('SCALE', 3),)"
    y = np.empty_like(X)
    three(X, y, backend="interpreter")
    np.testing.assert_allclose(y, _ref(X, 3), rtol=1e-6)
