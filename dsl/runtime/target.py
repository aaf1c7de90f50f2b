"""``dsl.target(backend)``: what the hardware behind a backend can do, for an op's ``select``
hook to pick a kernel written for it (an AVX-512 tiling, a kernel that needs f64 on an OpenCL
device, a vector width to tile by).

Each backend answers for itself (``Backend.target()``: the host CPU for numba and the
interpreter, the chosen device for OpenCL); this module only names the backend, fills the default
and gives the answer a public, frozen, hashable type so ops may use it in cache keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Tuple

from backends import base
from backends.host import TargetInfo
from dsl import config
from dsl.lang.types import DType


@dataclass(frozen=True)
class Target:
    """What one backend's hardware can do (see docs/ops.md, "Target queries").

    ``features``: lower-case names; ISA features as LLVM names them on CPUs (``avx2``,
    ``avx512f``, ``sse4.2``, ``neon``...), OpenCL extensions in full on devices (``cl_khr_fp16``),
    and on every backend the language's names ``fp64``, ``f16``, ``bf16`` (and on CPUs
    ``f16_arith``/``bf16_arith``; OpenCL adds ``int64_atomics``, ``subgroups``).
    ``"avx512f" in target`` asks the same as ``"avx512f" in target.features``.
    """

    backend: str
    device: str               # the CPU model, or the OpenCL device's description
    features: FrozenSet[str]
    vector_bits: int          # widest SIMD register (CPU); preferred float vector x 32 (OpenCL)
    compute_units: int        # logical CPUs this process may use, or OpenCL compute units
    local_mem_bytes: int = 0  # OpenCL local memory; 0 on CPUs
    cache_bytes: int = 0      # the largest CPU cache level; 0 when unknown or not a CPU
    cpu: str = ""             # LLVM's name of the host CPU (e.g. 'skylake-avx512'); '' on devices
    # what the backend's code generation makes of it (backends/base.py, Backend):
    parallel: bool = False               # team threads run across the cores; a model's tiles run side by side
    packed_kernels: bool = False         # packed SIMD GEMM/convolution kernels are the fast path
    fastmath_keeps_inf_nan: bool = False  # fastmath=True only reorders: inf and NaN keep their meaning

    @property
    def cores(self) -> int:
        return self.compute_units

    def vector_width(self, dtype: DType) -> int:
        """Lanes of ``dtype`` in one vector: ``vector_bits`` // its bits (a bool takes a byte), >= 1."""
        bits = max(8, dtype.bits)
        return max(1, self.vector_bits // bits)

    def __contains__(self, feature: object) -> bool:
        return isinstance(feature, str) and feature.lower() in self.features

    def __repr__(self) -> str:
        shown = sorted(self.features)
        more = ""
        if len(shown) > 12:
            # the names an op most likely asks about first, then a count of the rest
            key = ("fp64", "f16", "bf16", "avx512f", "avx2", "fma", "neon", "subgroups", "int64_atomics")
            shown = [f for f in key if f in self.features] + [f for f in shown if f not in key]
            more, shown = f", +{len(shown) - 12} more", shown[:12]
        extras = (f", local_mem_bytes={self.local_mem_bytes}" if self.local_mem_bytes else "") + \
                 (f", cpu={self.cpu!r}" if self.cpu else "")
        return (f"Target(backend={self.backend!r}, device={self.device!r}, vector_bits={self.vector_bits}, "
                f"compute_units={self.compute_units}{extras}, features={{{', '.join(shown)}{more}}})")


_made: Dict[str, Tuple[TargetInfo, Target]] = {}  # backend name -> (the facts it gave, their Target)


def target(backend: Optional[str] = None) -> Target:
    """What ``backend`` (default: ``dsl.config.default_backend()``) runs on.  An unknown name is
    the ``ValueError`` every backend lookup gives; a backend with no usable device raises its own
    error with the reason (OpenCL: ``NoDevice``, device by device)."""
    name = config.default_backend() if backend is None else backend
    backend_obj = base.get(name)
    info = backend_obj.target()
    made = _made.get(name)
    if made is not None and made[0] is info:
        return made[1]
    result = Target(backend=name, device=info.device, features=frozenset(info.features),
                    vector_bits=int(info.vector_bits), compute_units=int(info.compute_units),
                    local_mem_bytes=int(getattr(info, "local_mem_bytes", 0)),
                    cache_bytes=int(getattr(info, "cache_bytes", 0)), cpu=str(getattr(info, "cpu", "")),
                    parallel=bool(backend_obj.parallel), packed_kernels=bool(backend_obj.packed_kernels),
                    fastmath_keeps_inf_nan=bool(backend_obj.fastmath_keeps_inf_nan))
    _made[name] = (info, result)
    return result
