"""Timing, machine description and table printing shared by the benchmark scripts.

Timings are wall-clock (``time.perf_counter``) after warm-up calls, reported as
the best and the median of several samples: the best is what the code can do,
the median shows how noisy the machine was.  Calls much shorter than a
millisecond are batched (``inner`` calls per sample) so the timer's own cost
and resolution do not dominate.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence


@dataclass
class Timing:
    """Seconds per call: ``best`` and ``median`` over ``samples`` samples of ``inner`` calls each."""

    best: float
    median: float
    samples: int
    inner: int

    def __str__(self) -> str:
        return f"{fmt_seconds(self.best)} (median {fmt_seconds(self.median)}, {self.samples}x{self.inner})"


def measure(fn: Callable[[], object], *, repeat: int = 15, warmup: int = 2,
            min_sample_s: float = 0.002, max_inner: int = 100_000, pause_s: float = 0.0) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeat`` samples.

    ``inner`` (calls per sample) is chosen so a sample lasts at least
    ``min_sample_s``; for large kernels it stays 1.  ``pause_s`` > 0 sleeps that
    long (untimed) before each single-call sample: the latency of a launch that
    follows other work, when worker threads have gone idle."""
    for _ in range(max(warmup, 1)):
        fn()
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    inner = 1
    if pause_s > 0:
        per_call = []
        for _ in range(repeat):
            time.sleep(pause_s)
            t0 = time.perf_counter()
            fn()
            per_call.append(time.perf_counter() - t0)
        return Timing(min(per_call), statistics.median(per_call), repeat, 1)
    if once < min_sample_s:
        inner = min(max_inner, max(1, int(min_sample_s / max(once, 1e-9))))
    per_call: List[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        per_call.append((time.perf_counter() - t0) / inner)
    return Timing(min(per_call), statistics.median(per_call), repeat, inner)


def measure_interleaved(fns: Dict[str, Callable[[], object]], *, repeat: int = 15, block: int = 5,
                        warmup: int = 2) -> Dict[str, Timing]:
    """Time several long-running calls in rounds of blocks (``dsl.cli.bench.time_in_blocks``:
    ``warmup`` untimed and ``block`` timed calls of each case per round, one call per sample),
    so background drift hits every case alike and each case's thread pool settles first."""
    from dsl.cli.bench import time_in_blocks

    samples = time_in_blocks(list(fns.values()), repeat, warmup, block)
    return {name: Timing(min(v), statistics.median(v), len(v), 1) for name, v in zip(fns, samples)}


def fmt_seconds(s: Optional[float]) -> str:
    """A duration with a unit a reader can compare at a glance."""
    if s is None:
        return "n/a"
    if s >= 1.0:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} us"


# --------------------------------------------------------------------------- machine

def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def lscpu_model_name() -> str:
    """``lscpu``'s "Model name" (what a reader looks the CPU up by), else /proc/cpuinfo's."""
    import subprocess
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if line.strip().startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return cpu_model()


def avx512_flags() -> List[str]:
    """The avx512* feature flags /proc/cpuinfo reports for this machine, read now (a VM may
    hide what the host CPU has; an empty list means no AVX-512 or not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return sorted(flag for flag in line.split(":", 1)[1].split() if flag.startswith("avx512"))
    except OSError:
        pass
    return []


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def machine_info() -> List[str]:
    """Lines describing where the numbers came from (CPU, cores, library versions)."""
    lines = [f"CPU: {cpu_model()} ({platform.machine()}), {usable_cores()} usable cores "
             f"(os.cpu_count()={os.cpu_count()})",
             f"OS: {platform.platform()}",
             f"Python {platform.python_version()} ({sys.executable})"]
    versions = []
    for mod in ("numpy", "numba", "llvmlite", "onnxruntime", "onnx", "pyopencl"):
        try:
            m = __import__(mod)
            versions.append(f"{mod} {getattr(m, '__version__', '?')}")
        except Exception:
            versions.append(f"{mod} missing")
    lines.append(", ".join(versions))
    try:
        import numba
        lines.append(f"numba threads: {numba.config.NUMBA_NUM_THREADS}, threading layer requested: "
                     f"{numba.config.THREADING_LAYER}, SVML: {numba.config.USING_SVML}")
    except Exception:
        pass
    try:
        import llvmlite.binding as llvm
        lines.append(f"LLVM host CPU: {llvm.get_host_cpu_name()}")
        if os.environ.get("OPDSL_CPU") or os.environ.get("NUMBA_CPU_NAME"):  # a simulated kind (docs/ops.md)
            lines.append(f"compiling as: OPDSL_CPU={os.environ.get('OPDSL_CPU', '')!r}, "
                         f"NUMBA_CPU_NAME={os.environ.get('NUMBA_CPU_NAME', '')!r}")
    except Exception:
        pass
    lines.append(f"load average at start (1/5/15 min): {load_text()}")
    return lines


def load_text() -> str:
    """Other processes on the machine skew every number; the load average shows whether they ran."""
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "unknown"


def wait_until_idle(max_load: float, timeout_s: float, log: Callable[[str], None]) -> bool:
    """Sleep until the 1-minute load average drops below ``max_load`` (or ``timeout_s`` passes)."""
    t0 = time.monotonic()
    while os.getloadavg()[0] >= max_load:
        if time.monotonic() - t0 > timeout_s:
            log(f"machine still busy after {timeout_s:.0f} s (load {load_text()}); measuring anyway")
            return False
        log(f"waiting for an idle machine (load {load_text()}, want < {max_load})")
        time.sleep(15)
    return True


_BOOST_ENV = "OPDSL_BENCH_BOOSTED"


def run_boosted(module: str, argv: List[str]) -> Optional[int]:
    """Re-run ``python -m module argv`` in a session of its own at the highest CPU priority.

    On a machine shared with other jobs, Linux's autogroup scheduling gives every session an
    equal share of the CPU, so a parallel kernel cannot get both cores however ``nice`` it
    is.  A new session (``setsid``) is a new autogroup whose priority we may raise without
    touching anyone else's processes; it disappears when the benchmark ends.  Returns the
    child's exit code, or None when we are already the boosted child (or cannot boost)."""
    if os.environ.get(_BOOST_ENV) or not sys.platform.startswith("linux"):
        return None
    import subprocess
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, **{_BOOST_ENV: "1", "PYTHONPATH": root + (os.pathsep + path if path else "")})
    return subprocess.call([sys.executable, "-m", module, *argv], env=env, start_new_session=True)


def apply_boost() -> str:
    """In the boosted child: raise this session's autogroup and this process to nice -20."""
    if not os.environ.get(_BOOST_ENV):
        return ""
    done = []
    if os.getsid(0) == os.getpid():  # our own session: its autogroup is ours alone
        try:
            Path("/proc/self/autogroup").write_text("-20")
            done.append("autogroup nice -20")
        except OSError:
            pass
    try:
        os.nice(-20 - os.nice(0))
        done.append("nice -20")
    except OSError:
        pass
    return ", ".join(done) or "boost requested but not permitted"


def start(ap, argv: Optional[List[str]], module: str, sections: Sequence[str]):
    """The shared start of a benchmark CLI: parse ``argv``, check ``--only`` against
    ``sections``, and with ``--boost`` re-run ``module`` in a boosted session.

    -> (args, chosen sections, argv as given, boost description, exit code of the boosted
    child or None when this process is to run the benchmarks itself)."""
    args = ap.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in sections]
    if unknown:
        ap.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(sections)}")
    argv = list(sys.argv[1:] if argv is None else argv)
    if args.boost:
        code = run_boosted(module, argv)
        if code is not None:
            return args, wanted, argv, "", code
    return args, wanted, argv, apply_boost(), None


# --------------------------------------------------------------------------- tables

@dataclass
class Row:
    """One line of a result table; ``ratio`` is relative to the section's reference row."""

    name: str
    timing: Optional[Timing]
    ratio: Optional[float] = None
    note: str = ""


@dataclass
class Section:
    title: str
    rows: List[Row] = field(default_factory=list)
    targets: List[str] = field(default_factory=list)   # "target: ... -> met / MISSED (value)"
    notes: List[str] = field(default_factory=list)

    def add(self, name: str, timing: Optional[Timing], note: str = "") -> Row:
        row = Row(name, timing, note=note)
        self.rows.append(row)
        return row

    def ratios(self, reference: Row) -> None:
        """Fill every row's ratio as its best time over ``reference``'s best time."""
        if reference.timing is None:
            return
        for r in self.rows:
            if r.timing is not None:
                r.ratio = r.timing.best / reference.timing.best

    def target(self, text: str, value: Optional[float], limit: float, *, higher_is_better: bool = False,
               unit: str = "x") -> bool:
        """Record whether ``value`` meets ``limit``; returns True when met."""
        if value is None:
            self.targets.append(f"{text}: not measured")
            return False
        ok = value >= limit if higher_is_better else value <= limit
        self.targets.append(f"{text}: {'met' if ok else 'MISSED'} ({value:.3g}{unit})")
        return ok

    def markdown(self) -> str:
        out = [f"### {self.title}", "",
               "| case | best | median | ratio | note |",
               "|---|---:|---:|---:|---|"]
        for r in self.rows:
            t = r.timing
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
            out.append(f"| {r.name} | {fmt_seconds(t.best if t else None)} | "
                       f"{fmt_seconds(t.median if t else None)} | {ratio} | {r.note} |")
        if self.targets:
            out.append("")
            out += [f"- {t}" for t in self.targets]
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out)
