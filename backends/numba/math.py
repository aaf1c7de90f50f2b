"""f32 math the numba backend inlines instead of calling libm, and the fastmath min/max.

Why: llvmlite here has no SVML, so ``math.exp`` on a float32 is a scalar libm call
per element and any loop containing it stays scalar.  The functions below are straight-line float/integer arithmetic that
LLVM inlines and vectorizes (256- or 512-bit), with the same special values as libm.

Accuracy, checked against float64 numpy on every float32 in the range that matters
(``tests/backends/test_numba_math.py`` samples it on each run):

* ``exp_f32``  <= 0.91 ulp (results are libm's or one ulp away), subnormal results
  included; used for every f32 ``exp`` (fastmath or not): at this accuracy it is as
  good as numpy's own float32 exp (the interpreter's) and well within OpenCL's 3 ulp.
* ``erf_f32``  <= 1.3 ulp; used for every f32 ``erf`` (GELU's hot function), like exp.
* ``tanh_f32`` <= 1.56 ulp over every float32 (99.7 % of results correctly rounded; glibc's
  ``tanhf`` here: <= 2.19 ulp, 0.03 % above 1.5); used for every f32 ``tanh``, so the Tanh op's
  loop vectorizes (onnxruntime's tanh is vectorized too).
* ``log_f32``  <= 1 ulp: used under ``fastmath=True`` only; plain kernels keep libm's log.

Method (coefficients fitted for this file by iteratively reweighted least squares,
i.e. near-minimax, in float64 and rounded to float32):

* exp: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, with FMA; e**r by a degree-6
  polynomial whose two lowest coefficients are exactly 1 (Horner, all FMAs); 2**n by
  ldexp where that is one instruction (AVX-512 ``vscalefps``), else from exponent bits.
  Either way results down in the subnormals are rounded once, correctly.
* log: x = m 2**e with m in [sqrt(1/2), sqrt(2)) from the bits (subnormals scaled
  first); log(m) = f - f**2/2 + f**3 P(f), f = m - 1, P of degree 8.
* tanh: x + x**3 P(x**2) for |x| < 0.55 (P of degree 4), else
  sign(x) (1 - 2 / (e**(2|x|) + 1)), where the result is >= 1/2 so the subtraction
  loses at most one bit.  Both are computed and one selected, so the loop vectorizes.

The helpers are compiled without fastmath flags on purpose: reassociation would undo
the Cody-Waite split.  Their callers may use any flags.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir as llir
from numba import njit, types
from numba.extending import intrinsic

from backends.numba.runtime import bits_f32, f32_bits

# only compiled code calls these: no Python or C wrapper to build and optimize on every cold compile
_JIT = dict(nogil=True, cache=False, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)

F32 = np.float32

# --------------------------------------------------------------------------- intrinsics


def _llvm_float(t):
    return llir.FloatType() if t.bitwidth == 32 else llir.DoubleType()


@intrinsic
def fma_f32(typingctx, a, b, c):
    """a * b + c with one rounding (llvm.fma: a hardware FMA where the CPU has one)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, sig, args):
        f = llir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f], llir.FunctionType(f, [f, f, f]))
        return builder.call(fn, args)
    return sig, codegen


def _nan_propagating(name):
    def typer(typingctx, a, b):
        if not (isinstance(a, types.Float) and isinstance(b, types.Float)):
            return None
        t = a if a.bitwidth >= b.bitwidth else b

        def codegen(context, builder, sig, args):
            x, y = (context.cast(builder, v, s, t) for v, s in zip(args, sig.args))
            f = _llvm_float(t)
            fn = builder.module.declare_intrinsic(name, [f], llir.FunctionType(f, [f, f]))
            return builder.call(fn, [x, y])
        return t(a, b), codegen
    return typer


@intrinsic
def rint_f32(typingctx, x):
    """Round to the nearest integer, ties to even (llvm.rint: one ``vroundps``)."""
    sig = types.float32(types.float32)

    def codegen(context, builder, sig, args):
        f = llir.FloatType()
        return builder.call(builder.module.declare_intrinsic("llvm.rint", [f], llir.FunctionType(f, [f])), args)
    return sig, codegen


@intrinsic
def ldexp_f32(typingctx, x, n):
    """x * 2**n with one rounding (llvm.ldexp)."""
    sig = types.float32(types.float32, types.int32)

    def codegen(context, builder, sig, args):
        f, i = llir.FloatType(), llir.IntType(32)
        fn = builder.module.declare_intrinsic("llvm.ldexp", [f, i], llir.FunctionType(f, [f, i]))
        return builder.call(fn, args)
    return sig, codegen


maximum = intrinsic(_nan_propagating("llvm.maximum"))
maximum.__doc__ = """Float max as llvm.maximum: NaN if either is NaN (like np.maximum), +0 > -0.

Unlike Python's ``max`` (a compare-and-select whose result depends on the order of
NaNs), it is associative, so LLVM vectorizes a running maximum.  fastmath only."""
minimum = intrinsic(_nan_propagating("llvm.minimum"))
minimum.__doc__ = """Float min as llvm.minimum (see ``maximum``).  fastmath only."""

# --------------------------------------------------------------------------- exp

_LOG2E = F32(1.4426950408889634)
_LN2_HI = F32(0.6931471805599453)                               # float32 nearest ln 2
_LN2_LO = F32(0.6931471805599453 - float(np.float32(0.6931471805599453)))  # the rest
_EXP_P = [F32(c) for c in (0.4999999403953552, 0.1666652113199234, 0.041668377816677094,
                           0.008368685841560364, 0.0013815131969749928)]
_E0, _E1, _E2, _E3, _E4 = _EXP_P
_ONE = F32(1.0)
_EXP_HI = F32(89.0)     # exp(89) overflows f32: the result becomes inf
_EXP_LO = F32(-104.0)   # exp(-104) is below half the smallest subnormal: the result becomes 0


# inline="always": numba pastes it into its two callers instead of compiling (and emitting machine code
# for) one more function; every kernel calling dsl.exp paid ~0.15 s more for its first call without it.
@njit(inline="always", **_JIT)
def _exp_reduced(x):
    """(e**r, n) with x = n ln2 + r, |r| <= ln2/2, for x clamped to [-104, 89] (NaN kept)."""
    x = _EXP_HI if x > _EXP_HI else x   # comparisons, not min/max: a NaN passes through
    x = _EXP_LO if x < _EXP_LO else x
    n = rint_f32(x * _LOG2E)
    r = fma_f32(-n, _LN2_HI, x)
    r = fma_f32(-n, _LN2_LO, r)
    p = fma_f32(fma_f32(fma_f32(fma_f32(_E4, r, _E3), r, _E2), r, _E1), r, _E0)
    return fma_f32(fma_f32(p, r, _ONE), r, _ONE), np.int32(n)


@njit(**_JIT)
def exp_f32_scalef(x):
    """e**x, 2**n applied by ldexp: one ``vscalefps`` on AVX-512 (rounds subnormals once)."""
    p, n = _exp_reduced(x)
    return ldexp_f32(p, n)


@njit(**_JIT)
def exp_f32_bits(x):
    """e**x, 2**n built from exponent bits as two factors 2**(n//2) * 2**(n - n//2), so the
    scale stays a normal float and results down in the subnormals are rounded once."""
    p, n = _exp_reduced(x)
    n1 = n >> np.int32(1)
    s1 = bits_f32(np.uint32((n1 + np.int32(127)) << np.int32(23)))
    s2 = bits_f32(np.uint32((n - n1 + np.int32(127)) << np.int32(23)))
    return p * s1 * s2


def _has_scalef() -> bool:
    """Whether numba compiles for a CPU with AVX-512F, where LLVM turns a vector ldexp into
    ``vscalefps``; elsewhere it becomes a libm call per element and the bits version wins."""
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else get_host_cpu_features()
    return "+avx512f" in features.split(",")


exp_f32 = exp_f32_scalef if _has_scalef() else exp_f32_bits
exp_f32.__doc__ = """e**x for a float32 (<= 1 ulp; inf, 0, subnormals and NaN as libm gives them)."""


# --------------------------------------------------------------------------- log

_LOG_P = [F32(c) for c in (0.3333331346511841, -0.25000008940696716, 0.2000211477279663,
                           -0.16667988896369934, 0.14219635725021362, -0.1240573599934578,
                           0.11887709051370621, -0.1167469397187233, 0.06746527552604675)]
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8 = _LOG_P
_SQRT_HALF_BITS = np.int32(0x3F3504F3)   # bits of sqrt(1/2)
_TWO23 = F32(8388608.0)
_SMALLEST_NORMAL = F32(1.1754943508222875e-38)


@njit(**_JIT)
def log_f32(x):
    """Natural log of a float32, <= 1 ulp; log(0) = -inf, log(<0) = NaN, log(inf) = inf."""
    sub = x < _SMALLEST_NORMAL
    xs = x * _TWO23 if sub else x        # subnormals (and 0, negatives: fixed below) made normal
    b = np.int32(f32_bits(xs)) - _SQRT_HALF_BITS
    e = (b >> np.int32(23)) - (np.int32(23) if sub else np.int32(0))
    m = bits_f32(np.uint32((b & np.int32(0x7FFFFF)) + _SQRT_HALF_BITS))   # in [sqrt(1/2), sqrt(2))
    f = m - F32(1.0)
    p = fma_f32(_L8, f, _L7)
    p = fma_f32(p, f, _L6)
    p = fma_f32(p, f, _L5)
    p = fma_f32(p, f, _L4)
    p = fma_f32(p, f, _L3)
    p = fma_f32(p, f, _L2)
    p = fma_f32(p, f, _L1)
    p = fma_f32(p, f, _L0)
    f2 = f * f
    ef = F32(e)
    lo = fma_f32(p * f, f2, fma_f32(ef, _LN2_LO, F32(-0.5) * f2))
    y = fma_f32(ef, _LN2_HI, f + lo)
    y = -np.inf if x == F32(0.0) else y
    y = np.nan if x < F32(0.0) else y
    return x if (x == np.inf or x != x) else y   # inf and NaN: themselves


# --------------------------------------------------------------------------- tanh

_TANH_P = [F32(c) for c in (-0.33333316445350647, 0.13332587480545044, -0.05385247617959976,
                            0.021072356030344963, -0.006275166291743517)]
_T0, _T1, _T2, _T3, _T4 = _TANH_P
_TANH_SMALL = F32(0.55)
TANH_MAX_ULP = 1.57   # measured: 1.5614 ulp at x = 0.5562 over every float32 (test_numba_math.py, slow)


@njit(**_JIT)
def tanh_f32(x):
    """tanh of a float32, <= 1.6 ulp; +-1 for large |x|, NaN for NaN, -0.0 for -0.0."""
    a = abs(x)   # tanh is odd: work on |x|, put the sign back with copysign (keeps -0.0)
    a2 = a * a
    small = fma_f32(fma_f32(fma_f32(fma_f32(fma_f32(_T4, a2, _T3), a2, _T2), a2, _T1), a2, _T0) * a2, a, a)
    big = F32(1.0) - F32(2.0) / (exp_f32(a + a) + F32(1.0))
    return np.copysign(small if a < _TANH_SMALL else big, x)


# --------------------------------------------------------------------------- erf

_ERF_SMALL = [F32(c) for c in (0.12837915122509003, -0.3761250674724579, 0.11281930655241013,
                               -0.02677033469080925, 0.0049981242045760155, -0.0006013923557475209)]
_ERF_R = [F32(c) for c in (0.21849872171878815, -0.07958526164293289, 0.027494395151734352,
                           -0.009066004306077957, 0.002866389462724328, -0.000873839424457401,
                           0.0002595220576040447, -7.319235010072589e-05, 1.8208762412541546e-05,
                           -5.293378308124375e-06, 2.217758947153925e-06, -5.002622174288263e-07)]
_S0, _S1, _S2, _S3, _S4, _S5 = _ERF_SMALL
_R0, _R1, _R2, _R3, _R4, _R5, _R6, _R7, _R8, _R9, _R10, _R11 = _ERF_R
_ERF_SPLIT = F32(0.921875)
_ERF_ONE = F32(3.92)      # erf(3.92) rounds to 1 in float32
_ERF_MID = F32(2.4)       # R is fitted around this point


@njit(**_JIT)
def erf_f32(x):
    """erf of a float32, <= 1.3 ulp: |x| < 0.921875: x + x P(x**2) (P of degree 5); below
    3.92: 1 - e**(-x**2) R(|x|), R(a) = erfc(a) e**(a**2) of degree 11 in a - 2.4, whose result
    is >= 0.8 so the subtraction loses nothing; else 1.  Sign by copysign, NaN kept."""
    a = abs(x)
    u = a * a
    p = fma_f32(fma_f32(fma_f32(fma_f32(fma_f32(_S5, u, _S4), u, _S3), u, _S2), u, _S1), u, _S0)
    small = fma_f32(a, p, a)
    t = a - _ERF_MID
    r = fma_f32(fma_f32(fma_f32(fma_f32(fma_f32(fma_f32(_R11, t, _R10), t, _R9), t, _R8), t, _R7), t, _R6),
                t, _R5)
    r = fma_f32(fma_f32(fma_f32(fma_f32(fma_f32(r, t, _R4), t, _R3), t, _R2), t, _R1), t, _R0)
    big = F32(1.0) - exp_f32(-u) * r
    y = small if a < _ERF_SPLIT else (big if a < _ERF_ONE else F32(1.0))
    return x if x != x else np.copysign(y, x)


# --------------------------------------------------------------------------- vector width

@intrinsic
def prefer_wide_vectors(typingctx):
    """Let LLVM vectorize the calling function's loops with the widest vectors the CPU has.

    On AVX-512 CPUs LLVM defaults to 256-bit vectors (``prefer-vector-width=256``: older
    Xeons lowered their clock for 512-bit code); a compute-bound loop such as softmax's
    exp pass runs ~1.25x faster with 512-bit ones, a memory-bound one can run slower (the
    code generator decides where, codegen.Gen.wide_vectors).  On CPUs without
    AVX-512 the attribute changes nothing."""
    def codegen(context, builder, sig, args):
        # llvmlite only accepts enum attributes by name; a string attribute is written as is
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()
    return types.void(), codegen
