"""What the host CPU can do, asked once per process: the facts ``Backend.target()`` gives for
backends that run on the host (numba, the interpreter) and the default for any other backend.

The features are LLVM's view of the CPU numba compiles for, not the operating system's flag list:
the host (``llvmlite.binding.get_host_cpu_features``), or the CPU numba's ``NUMBA_CPU_NAME`` /
``NUMBA_CPU_FEATURES`` name instead (which ``OPDSL_CPU``, backends/cpu_kind.py, fills in to
simulate a CPU with fewer features), so an op that picks a kernel because ``"avx512f"`` is listed
picks what the compiler will really use.  The answer does not change during a process: cached.

Derived names, so an op can ask the same question on every backend:

* ``fp64``: double precision arithmetic (every CPU opdsl runs on);
* ``f16`` / ``bf16``: the hardware *converts* between the narrow float and f32 (x86 ``f16c`` or
  ``avx512fp16``; ``avx512bf16`` or ``avxneconvert``; on Arm the base FP unit converts f16, ``bf16``
  is its own feature).  The language computes f16/bf16 in f32, so conversion is what a kernel uses;
* ``f16_arith`` / ``bf16_arith``: native narrow arithmetic too (``avx512fp16``; Arm ``fullfp16``;
  ``avx512bf16``/Arm ``bf16`` give bf16 dot products, counted as arithmetic);
* ``amx``: Intel AMX int8 tiles usable by this process: the CPU has ``amx-tile`` and ``amx-int8``
  and Linux granted the tile data (``amx_granted``); the tile builtins lower to AMX only then.
"""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from typing import FrozenSet, Optional, Tuple

from backends import cpu_kind


@dataclass(frozen=True)
class TargetInfo:
    """What one backend's target can do; ``dsl.target()`` adds the backend name and makes it public.

    ``features`` are lower-case names; ``vector_bits`` is the width of the widest SIMD register
    (CPU) or of the preferred float vector (OpenCL); ``compute_units`` counts the cores (logical
    CPUs this process may run on) or OpenCL compute units; ``local_mem_bytes`` is the OpenCL
    device's local memory (0 on a CPU); ``cache_bytes`` the largest CPU cache level's size (0 when
    unknown or not a CPU); ``cpu`` is LLVM's name of the CPU ('' for a device that is not the host).
    """

    device: str
    features: FrozenSet[str]
    vector_bits: int
    compute_units: int
    local_mem_bytes: int = 0
    cache_bytes: int = 0
    cpu: str = ""


def normalize(flags) -> FrozenSet[str]:
    """The enabled names of an LLVM feature string ('+avx2,-avx512f,...') or mapping, lower case."""
    if isinstance(flags, str):
        items = [f.strip() for f in flags.split(",") if f.strip()]
        return frozenset(f[1:].lower() for f in items if f.startswith("+"))
    return frozenset(str(k).lower() for k, on in dict(flags).items() if on)


def derived(isa: FrozenSet[str]) -> FrozenSet[str]:
    """The language-level names (module docstring) that the ISA features ``isa`` imply."""
    out = {"fp64"}
    arm = bool(isa & {"neon", "fp-armv8", "fullfp16"})
    if isa & {"f16c", "avx512fp16"} or arm:
        out.add("f16")
    if isa & {"avx512fp16", "fullfp16"}:
        out.add("f16_arith")
    if isa & {"avx512bf16", "avxneconvert", "bf16"}:
        out.add("bf16")
    if isa & {"avx512bf16", "bf16"}:
        out.add("bf16_arith")
    return frozenset(out)


def vector_bits(isa: FrozenSet[str]) -> int:
    """The widest SIMD register: 512 with AVX-512, 256 with AVX/AVX2, else 128 (SSE, NEON).

    A register width, not a promise: LLVM may still prefer 256-bit vectors on some AVX-512 CPUs."""
    if "avx512f" in isa:
        return 512
    if isa & {"avx", "avx2"}:
        return 256
    return 128


def _cpu_model() -> str:
    """The CPU's marketing name where the OS tells it cheaply, else platform's guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cores() -> int:
    """The logical CPUs this process may run on (its affinity mask where the OS has one)."""
    count = getattr(os, "process_cpu_count", None)
    if count is not None:
        return count() or 1
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _largest_cache() -> int:
    """Bytes of the largest cache level cpu0 reports through Linux sysfs; 0 elsewhere."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = 0
    try:
        entries = os.listdir(base)
    except OSError:
        return 0
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "size"), encoding="ascii") as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best


def llvm_features() -> Optional[FrozenSet[str]]:
    """LLVM's enabled host features, or None when llvmlite cannot say."""
    try:
        from llvmlite import binding
        return normalize(binding.get_host_cpu_features().flatten())
    except Exception:  # llvmlite missing, or a host LLVM cannot describe
        return None


def compiled_for(environ=os.environ) -> Tuple[Optional[str], Optional[FrozenSet[str]]]:
    """(CPU name, features) numba's environment makes it compile for instead of the host's, each
    None where unset, read as numba reads them: ``NUMBA_CPU_NAME=generic`` alone means no features."""
    name = environ.get("NUMBA_CPU_NAME") or None
    features = environ.get("NUMBA_CPU_FEATURES")
    if features is None and name is not None and name.lower() == "generic":
        features = ""
    return name, (None if features is None else normalize(features))


ARCH_REQ_XCOMP_PERM = 0x1023  # arch_prctl code: ask for an extended state component
XFEATURE_XTILEDATA = 18       # the AMX tile data component
SYS_ARCH_PRCTL = 158          # x86-64 Linux


@functools.lru_cache(maxsize=None)
def amx_granted(isa: FrozenSet[str]) -> bool:
    """Whether this process may execute AMX tile instructions: the CPU has them and Linux (5.16+)
    granted the tile data on ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, asked once
    per process (the grant covers every thread).  Without the grant the first tile instruction
    would fault, so anything else (another OS, an older kernel, a refusal) means no AMX."""
    if not {"amx-tile", "amx-int8"} <= isa or platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                            ctypes.c_long(XFEATURE_XTILEDATA)) == 0
    except (OSError, AttributeError):
        return False


@functools.lru_cache(maxsize=None)
def host() -> TargetInfo:
    """The facts of the CPU numba compiles for: the host, or what ``NUMBA_CPU_NAME`` /
    ``NUMBA_CPU_FEATURES`` (or ``OPDSL_CPU``) name (cached: they do not change in a process)."""
    name, features = compiled_for()
    isa = features if features is not None else llvm_features() or frozenset()
    try:
        from llvmlite import binding
        cpu = name or binding.get_host_cpu_name()
    except Exception:
        cpu = name or ""
    amx = frozenset({"amx"}) if amx_granted(isa) else frozenset()
    return TargetInfo(device=_cpu_model(), features=isa | derived(isa) | amx, vector_bits=vector_bits(isa),
                      compute_units=_cores(), cache_bytes=_largest_cache(), cpu=cpu)


cpu_kind.apply()  # OPDSL_CPU -> numba's variables, before anything imports numba's compiler
