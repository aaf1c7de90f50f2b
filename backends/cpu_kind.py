"""``OPDSL_CPU``: run this process as if on a CPU with fewer features (docs/ops.md, "Simulating
another kind of CPU").

opdsl picks kernels, tiles and lowerings from ``dsl.target`` (AVX-512 or AVX2 tiles, VNNI or
``vpmaddwd`` dot products, AMX or not), and numba compiles for the CPU numba's own
``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` name.  A kind below is this host's features less what
that kind of CPU lacks, so the simulated process still runs here; ``apply`` writes it into those
two numba variables (compile workers inherit them) and ``backends.host`` reports the same, so every
choice, the plan cache's key and the compile cache's key follow.  It simulates the instruction set
only: the timings are still this CPU's (a Zen 4 runs 512-bit operations as two halves; this does not).
"""
from __future__ import annotations

import os
import platform
from typing import Dict, Tuple

VARIABLE = "OPDSL_CPU"

_AVX512_ONLY = ("avx512", "evex512", "avx10", "amx")  # prefixes of what an AVX2-only CPU lacks
_LATER_VEX = ("avxvnni", "avxifma", "avxneconvert")     # VEX extensions after AVX2 (Alder Lake on)

# kind -> (LLVM's CPU name, its scheduling model and tuning; prefixes of the features it lacks)
KINDS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    # AMD Zen 4: AVX-512 with VNNI and BF16, no AMX, no AVX512-FP16, no VEX AVX-VNNI
    "zen4": ("znver4", ("amx", "avx512fp16", "avx512vp2intersect", "avx10") + _LATER_VEX),
    # AVX2 + FMA with the VEX AVX-VNNI dot product (Intel Alder Lake class)
    "avx2-vnni": ("alderlake", _AVX512_ONLY + ("avxifma", "avxneconvert", "avxvnniint")),
    # AVX2 + FMA only (AMD Zen 3, Intel Haswell to Skylake client)
    "avx2": ("znver3", _AVX512_ONLY + _LATER_VEX),
}
# kind -> the features it is defined by: simulating it on a host without them would only mislead
NEEDS: Dict[str, Tuple[str, ...]] = {
    "zen4": ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni"),
    "avx2-vnni": ("avx2", "fma", "avxvnni"),
    "avx2": ("avx2", "fma"),
}
ALIASES = {"zen3": "avx2", "znver4": "zen4", "znver3": "avx2", "haswell": "avx2", "alderlake": "avx2-vnni"}


def kind_name(value: str) -> str:
    """The kind ``value`` names (case and aliases forgiven), or ValueError listing the accepted ones."""
    name = value.strip().lower()
    name = ALIASES.get(name, name)
    if name not in KINDS:
        accepted = ", ".join(sorted(set(KINDS) | set(ALIASES) | {"host"}))
        raise ValueError(f"{VARIABLE}={value!r} is not a CPU kind opdsl can simulate: expected one of {accepted}")
    return name


def restricted(host_flags: Dict[str, bool], kind: str) -> Tuple[str, str]:
    """(LLVM CPU name, LLVM feature string) for ``kind`` on a host whose LLVM features are
    ``host_flags``: every host feature kept but those the kind lacks, which are turned off."""
    cpu, lacks = KINDS[kind]
    missing = [f for f in NEEDS[kind] if not host_flags.get(f)]
    if missing:
        raise ValueError(f"{VARIABLE}={kind!r} cannot be simulated on this CPU: it lacks {', '.join(missing)} "
                         f"(a kind only takes features away; unset {VARIABLE} to run as this CPU)")
    flags = []
    for name in sorted(host_flags):
        on = bool(host_flags[name]) and not name.startswith(lacks)
        flags.append(("+" if on else "-") + name)
    return cpu, ",".join(flags)


def apply(environ=os.environ) -> str:
    """Write ``OPDSL_CPU``'s kind into ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` (unless the user
    set those; they win) and return the kind, or "" when ``OPDSL_CPU`` is unset or "host".
    Called at import of ``backends.host``, before numba compiles anything."""
    value = environ.get(VARIABLE, "").strip()
    if not value or value.lower() == "host":
        return ""
    kind = kind_name(value)
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise ValueError(f"{VARIABLE}={value!r}: the kinds are x86-64 CPUs, this host is {platform.machine()}")
    if "NUMBA_CPU_NAME" in environ or "NUMBA_CPU_FEATURES" in environ:
        return kind
    from llvmlite import binding
    cpu, features = restricted(dict(binding.get_host_cpu_features()), kind)
    environ["NUMBA_CPU_NAME"] = cpu
    environ["NUMBA_CPU_FEATURES"] = features
    return kind

