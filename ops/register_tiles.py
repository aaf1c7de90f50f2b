"""How many SIMD registers a target's register tiles may fill: the one fact the GEMM and
convolution kernels' tile choices (``tile_config``, ``direct_config``, ``pointwise_config``,
``row_tile``) need beyond ``dsl.target``'s vector width.

x86 has 32 vector registers with AVX-512 (zmm0-31) and 16 without (ymm0-15); AArch64 NEON
and SVE have 32.  A tile of A accumulators, L loaded vectors and one broadcast must fit, or
LLVM spills accumulators to the stack inside the FMA loop (an AVX-512 tile of 24
accumulators ran ~2.5x slower on an AVX2 Zen 3; benchmarks/RESULTS.md, issue 29 f32 slice).
"""
from __future__ import annotations

import dsl


def vector_registers(target) -> int:
    """SIMD registers of ``target`` (a ``dsl.Target``): 32 with AVX-512 or on Arm, else 16."""
    feats = target.features
    if "avx512f" in feats or "neon" in feats or "sve" in feats:
        return 32
    return 16


def fits(accumulators: int, loads: int, backend: str = "numba") -> bool:
    """Whether a tile of ``accumulators`` vectors, ``loads`` vectors loaded per step and one
    broadcast fits in ``backend``'s vector registers."""
    return accumulators + loads + 1 <= vector_registers(dsl.target(backend))
