"""The process-wide OpenCL device: context, queue, program cache, zero-copy buffers.

The device comes from backends/opencl/devices.py (probed, ranked, or forced with
``OPDSL_OPENCL_DEVICE``).  Programs are cached in memory and, as device
binaries, on disk; a second process loads the binary instead of compiling the C
again, and an unusable disk cache only means building in memory.  On devices
that share host memory (CPU devices such as PoCL) numpy arrays are wrapped with
``USE_HOST_PTR`` and mapped after the launch: no copies (measured: 4M floats,
3 ms zero-copy vs 10-70 ms copying).

Every call into the driver for a launch -- buffer creation, argument setting,
enqueue, wait, map, release -- happens under ``device_lock``: a cl.Kernel's
arguments are shared state, and drivers such as Oclgrind crash when buffers are
created and released from several threads at once.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from backends import cache, interrupt
from backends.opencl import devices as devices
from backends.opencl.sanitizer import OclgrindLog, SanitizerError  # noqa: F401  (re-exported)
from dsl.lang.errors import BuildError  # noqa: F401  (every error: dsl/lang/errors.py)
from backends.opencl.devices import DriverError, NoDevice  # noqa: F401  (re-exported)
from dsl import config

CACHE_TAG = "opencl"  # the disk-cache folder of built programs (OpenCLBackend.cache_tag)

try:
    import pyopencl as cl
    _IMPORT_ERROR = ""
except ImportError as e:  # pragma: no cover - the opencl extra is not installed
    cl = None
    _IMPORT_ERROR = f"pyopencl is not installed ({e}); pip install 'opdsl[opencl]'"

BUILD_OPTIONS = "-cl-std=CL1.2"
# Oclgrind's optimiser turns `if (v < 0) v = -v` into llvm.abs.*, which its interpreter cannot run
# ("Undefined external function: llvm.abs.i8"); unoptimised code also keeps every access it checks.
OCLGRIND_OPTIONS = "-cl-opt-disable"


@dataclass
class Device:
    context: "cl.Context"
    queue: "cl.CommandQueue"
    device: "cl.Device"
    extensions: frozenset
    host_unified: bool
    identity: str          # platform, device, versions: part of every on-disk cache key
    report: devices.DeviceReport
    local_mem_size: int
    checker: Optional[OclgrindLog] = None  # Oclgrind's reports, read after every launch

    @property
    def description(self) -> str:
        return f"'{self.device.name.strip()}' on '{self.device.platform.name.strip()}'"

    def has(self, extension: str) -> bool:
        return extension in self.extensions


_lock = threading.Lock()
_device: Optional[Device] = None
_failure: Optional[str] = None
_reports: List[devices.DeviceReport] = []
_programs: Dict[str, "cl.Program"] = {}
device_lock = threading.RLock()  # every driver call of a launch; see the module docstring
launch_lock = device_lock        # the old name, kept for callers outside opdsl


def device() -> Device:
    """The process-wide device, created on first use; NoDevice says why there is none."""
    global _device, _failure, _reports
    if _device is not None:
        return _device
    with _lock:
        if _device is not None:
            return _device
        if _failure is not None:
            raise NoDevice(_failure)
        try:
            if cl is None:
                raise NoDevice(_IMPORT_ERROR)
            dev, report, _reports = devices.choose(config.opencl_device())
            checker = OclgrindLog() if report.kind == "simulator" and "oclgrind" in report.platform.lower() else None
            with checker.attached() if checker else contextlib.nullcontext():
                ctx = cl.Context([dev])
            queue = cl.CommandQueue(ctx)
            interrupt.refresh()  # PoCL replaced SIGINT's C handler: put the Ctrl-C counter back in front
            ext = frozenset(dev.extensions.split())
            # Zero-copy on CPU devices, Oclgrind included (it sets the CPU bit): the device then sees
            # host memory live, which the Ctrl-C flag relies on (backends/interrupt.py).
            unified = bool(dev.host_unified_memory) or bool(dev.type & cl.device_type.CPU)
            _device = Device(ctx, queue, dev, ext, unified, report.identity, report, int(dev.local_mem_size),
                             checker)
        except NoDevice as e:
            _failure = str(e)
            raise
        except Exception as e:  # cl.Error, ICD loader failures, ...
            _failure = f"OpenCL initialisation failed: {type(e).__name__}: {e}"
            raise NoDevice(_failure) from None
        return _device


def unavailable_reason() -> str:
    try:
        device()
    except NoDevice as e:
        return str(e)
    return ""


def reports() -> List[devices.DeviceReport]:
    """Every device with its probe result, the chosen one marked (see opencl_devices.DeviceReport)."""
    if cl is None:
        return []
    try:
        device()
    except NoDevice:
        pass
    if _reports:
        return list(_reports)
    try:
        return devices.survey()
    except NoDevice:
        return []


def reset() -> None:
    """Forget the chosen device and the probe results held in memory (tests that change the setting)."""
    global _device, _failure, _reports
    with _lock:
        _device, _failure, _reports = None, None, []
        _programs.clear()
        devices.forget()


# --------------------------------------------------------------------------- programs


def dsl_options(dev: Device) -> str:
    """Build options for generated kernels: Python's (IEEE, correctly rounded) float / and sqrt."""
    opts = BUILD_OPTIONS
    if dev.device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
        opts += " -cl-fp32-correctly-rounded-divide-sqrt"
    return opts


def program_key(source: str, options: str, dev: Device, extra: str = "") -> str:
    h = hashlib.sha256()
    for part in (source, options, dev.identity, extra):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def build(source: str, options: str = BUILD_OPTIONS, extra_key: str = "") -> "cl.Program":
    """A built program for ``source``: memory cache, then disk binary, then the compiler.

    The disk entry (backends/cache.py, folder "opencl") is keyed by the source,
    options and device identity, so a driver or emitter change never loads a
    stale binary; a disk cache that cannot be used is skipped, never an error.
    Raises BuildError carrying the compiler log, or DriverError when the driver
    (not the program) is what failed.
    """
    dev = device()
    if dev.checker is not None and OCLGRIND_OPTIONS not in options.split():
        options = f"{options} {OCLGRIND_OPTIONS}"
    key = program_key(source, options, dev, extra_key)
    prg = _programs.get(key)
    if prg is not None:
        return prg
    with device_lock, _disk_lock(key):
        prg = _programs.get(key)
        if prg is not None:
            return prg
        prg = _from_binary(dev, _disk_load(key + ".bin"), options)
        if prg is None:
            prg = cl.Program(dev.context, source)
            try:
                with warnings.catch_warnings(), compiler_stderr():
                    warnings.simplefilter("ignore")
                    prg.build(options=options, cache_dir=False)
            except cl.RuntimeError as e:
                log = _build_log(prg, dev, str(e))
                why = devices.driver_failure(log, dev.device)
                if why:
                    raise DriverError(f"OpenCL device {dev.description} cannot build programs: {why}") from None
                raise BuildError(log) from None
            _disk_store(key + ".bin", prg)
        _programs[key] = prg
    return prg


_COMPILER_TALLY = re.compile(r"^\d+ (warning|error)s?( and \d+ (warning|error)s?)? generated\.$")
_log = logging.getLogger("opdsl.opencl")


@contextlib.contextmanager
def compiler_stderr():
    """Keep the OpenCL compiler's own stderr lines ("1 error generated.", "2 warnings generated.",
    which PoCL's and Oclgrind's clang print) off the process's stderr: file descriptor 2 goes to
    a temporary file while the block runs; those lines then go to the ``opdsl.opencl`` debug log
    (the diagnostics themselves are in the build log, which errors carry) and anything else
    written meanwhile (another thread's output) is written back to stderr."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 to redirect: nothing can leak either
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            other = []
            for line in text.splitlines(keepends=True):
                if _COMPILER_TALLY.match(line.strip()):
                    _log.debug("OpenCL compiler: %s", line.strip())
                else:
                    other.append(line)
            if other:
                try:
                    os.write(2, "".join(other).encode())
                except OSError:
                    pass


def _from_binary(dev: Device, binary: Optional[bytes], options: str):
    if binary is None:
        return None
    try:
        prg = cl.Program(dev.context, [dev.device], [binary])
        with warnings.catch_warnings(), compiler_stderr():
            warnings.simplefilter("ignore")
            prg.build(options=options)
        return prg
    except Exception:  # a binary this driver rejects: rebuild from source
        return None


def _disk_lock(key: str):
    """The cross-process build lock (cache.lock degrades to a thread lock when the disk refuses)."""
    return cache.lock(CACHE_TAG, key) if cache.enabled() else contextlib.nullcontext()


def _disk_load(name: str) -> Optional[bytes]:
    if not cache.enabled():
        return None
    try:
        return cache.load(CACHE_TAG, name)
    except (OSError, ValueError):
        return None


def _disk_store(name: str, prg) -> None:
    if not cache.enabled():
        return
    try:
        binaries = prg.get_info(cl.program_info.BINARIES)
        if binaries and binaries[0]:
            cache.store(CACHE_TAG, name, bytes(binaries[0]))
    except (OSError, ValueError, cl.Error):
        pass  # the cache is an optimisation; a read-only or full disk is fine


def _build_log(prg, dev: Device, fallback: str) -> str:
    try:
        with warnings.catch_warnings():  # pyopencl: "attribute access defeats compiler caching"
            warnings.simplefilter("ignore")
            log = prg.get_build_info(dev.device, cl.program_build_info.LOG)
    except Exception:
        log = ""
    return (log or fallback).strip()


_ERROR_LINE = re.compile(r"(?:^|\s)(?:error:\s*)?[^\s:]*:(\d+):(\d+):\s*(?:error:\s*)?(.*)$")


def first_error(log: str):
    """(line, col, message) of the first compiler error in ``log``, or None."""
    for raw in log.splitlines():
        if "error" not in raw:
            continue
        m = _ERROR_LINE.search(raw)
        if m:
            return int(m.group(1)), int(m.group(2)), m.group(3).strip()
    return None


# --------------------------------------------------------------------------- launches


class Buffers:
    """Device buffers for one launch: zero-copy where memory is shared, copies otherwise.

    Use it inside ``launch()`` (or while holding ``device_lock``): creating,
    mapping and releasing buffers are driver calls that must not interleave
    with another thread's launch.
    """

    def __init__(self, dev: Device):
        self.dev = dev
        self.bufs: List = []
        self.readback: List = []  # (buffer, array) to make visible on the host after the launch

    def wrap(self, array: np.ndarray, writable: bool, readable: bool = True):
        mf = cl.mem_flags
        ctx = self.dev.context
        with device_lock:
            if array.size == 0:
                buf = cl.Buffer(ctx, mf.READ_WRITE, size=max(array.itemsize, 1))
            elif self.dev.host_unified:
                access = mf.READ_WRITE if writable else mf.READ_ONLY
                buf = cl.Buffer(ctx, access | mf.USE_HOST_PTR, hostbuf=array)
                if writable:
                    self.readback.append((buf, array))
            else:
                access = mf.READ_WRITE if writable else mf.READ_ONLY
                if readable:
                    buf = cl.Buffer(ctx, access | mf.COPY_HOST_PTR, hostbuf=array)
                else:
                    buf = cl.Buffer(ctx, access, size=array.nbytes)
                if writable:
                    self.readback.append((buf, array))
            self.bufs.append(buf)
        return buf

    def image(self, op: str, spec, array: np.ndarray, writable: bool):
        """An OpenCL image for a raw op's input (filled from ``array``) or output (read back into
        it); backends/opencl/images.py."""
        from backends.opencl import images
        with device_lock:
            img = images.make(op, spec, array, self.dev, writable)
            self.bufs.append(img)
            if writable:
                self.readback.append((img, (spec, array)))
        return img

    def finish(self) -> None:
        """Make results visible in the numpy arrays, then release device memory."""
        q = self.dev.queue
        with device_lock:
            try:
                for buf, array in self.readback:
                    if isinstance(array, tuple):  # an output image: (its Image spec, the array)
                        from backends.opencl import images
                        images.read_back(q, buf, array[0], array[1])
                    elif self.dev.host_unified:
                        mapped, event = cl.enqueue_map_buffer(q, buf, cl.map_flags.READ, 0, array.shape,
                                                              array.dtype, is_blocking=True)
                        if mapped.__array_interface__["data"][0] != array.__array_interface__["data"][0]:
                            array[...] = mapped  # the driver kept a private copy after all
                        mapped.base.release(q)
                        del mapped, event  # freed (clRelease*) here, under the lock
                    else:
                        cl.enqueue_copy(q, array, buf, is_blocking=True)
            finally:
                for buf in self.bufs:
                    buf.release()
                self.bufs.clear()
                self.readback.clear()


@contextlib.contextmanager
def launch(interrupt_start: Optional[int] = None):
    """``with launch() as bufs: ... run(...)``: wrap, run and read back as one step under ``device_lock``.

    Results are read back only when the body succeeds; buffers are released either way.
    ``interrupt_start`` is the Ctrl-C counter read when the caller's launch began, before it
    waited for the lock: launches queue behind each other, and one that was waiting when SIGINT
    came raises KeyboardInterrupt here instead of starting (backends/interrupt.py).
    """
    dev = device()
    with device_lock:
        if interrupt_start is not None:
            interrupt.check(interrupt_start)
        bufs = Buffers(dev)
        try:
            yield bufs
        except BaseException:
            bufs.readback.clear()
            bufs.finish()
            raise
        bufs.finish()


def run(kernel: "cl.Kernel", args: Sequence, global_size, local_size) -> None:
    """set_args + enqueue + wait under the device lock: a cl.Kernel's arguments are shared state.

    On Oclgrind, what the simulator reported during the launch is a SanitizerError.
    """
    dev = device()
    with device_lock:
        kernel.set_args(*args)
        event = cl.enqueue_nd_range_kernel(dev.queue, kernel, global_size, local_size)
        event.wait()
        del event  # released under the lock: drivers are not safe against a concurrent clRelease*
        if dev.checker is not None:
            dev.checker.check()
