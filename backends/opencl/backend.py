"""The ``opencl`` backend object: render (backends/opencl/render.py), check the device can run
the kernel, build through the runtime's program cache, and launch with the hidden arguments.

A team is a work-group: local size = ``kernel.threads``, global size = threads * grid; an n-d
grid ``(gx, gy, gz)`` is a 3-d NDRange ``(threads * gx, gy, gz)`` of ``(threads, 1, 1)`` groups.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from backends import bounds, interrupt, log_gate
from backends.opencl import runtime as rt
from backends.base import Backend, CompileRequest, Launcher, TargetInfo
from backends.cstyle.emitter import Rendered
from backends.opencl.render import render
from dsl.lang import ir
from dsl.lang.grid import Grid
from dsl.lang import types as T
from dsl.lang.errors import CompileError, SourceLoc


# --------------------------------------------------------------------------- device checks

_NEEDS = {"fp64": ("cl_khr_fp64", "dtype f64"),
          "int64_atomics": ("cl_khr_int64_base_atomics", "dsl.atomic_add on a 64-bit or f64 value")}


def check_device(rendered: Rendered, kernel: ir.Kernel, dev: rt.Device) -> None:
    """A CompileError naming the dtype/feature or scratch buffer and the device when the device lacks it."""
    for feature in sorted(rendered.features):
        if feature not in _NEEDS:
            continue
        ext, what = _NEEDS[feature]
        if not dev.has(ext):
            loc = rendered.feature_locs.get(feature)
            if loc is None or loc.line <= 0:
                loc = SourceLoc(kernel.filename, kernel.firstline)
            raise CompileError(
                f"{what} is not supported by OpenCL device {dev.description}: it lacks {ext}", loc,
                note="use f32, or pick another device with OPDSL_OPENCL_DEVICE=platform[:index]")
    check_scratch(kernel, dev)


def check_scratch(kernel: ir.Kernel, dev: rt.Device) -> None:
    """Scratch is __local memory: a CompileError naming the buffer that does not fit in the device's."""
    total = 0
    for s in kernel.scratch:
        size = math.prod(s.shape) * np.dtype(s.dtype.np).itemsize  # exact: an int64 product could wrap
        total += size
        if total > dev.local_mem_size:
            loc = s.loc if s.loc.line > 0 else SourceLoc(kernel.filename, kernel.firstline)
            shape = "x".join(map(str, s.shape))
            whole = f"; all scratch of the kernel up to it takes {total} bytes" if total != size else ""
            raise CompileError(
                f"scratch '{s.name}' ({s.dtype}[{shape}], {size} bytes{whole}) does not fit in the "
                f"{dev.local_mem_size} bytes of local memory of OpenCL device {dev.description}", loc,
                note="use a smaller scratch (give each thread a share through more tiles), "
                     "or pick a device with more local memory with OPDSL_OPENCL_DEVICE")


def build_error(err: rt.BuildError, rendered: Rendered, kernel: ir.Kernel, dev: rt.Device) -> CompileError:
    """The compiler log mapped back to the generated line and the user's Python line."""
    lines = rendered.source.splitlines()
    first = rt.first_error(err.log)
    loc = None
    note = "OpenCL compiler log:\n" + err.log[:4000]
    message = f"the OpenCL compiler rejected the generated code on {dev.description}"
    if first is not None:
        cline, _, msg = first
        message += f": {msg}"
        loc = rendered.loc_of_line(cline)
        text = lines[cline - 1].strip() if 0 < cline <= len(lines) else "?"
        note = f"generated OpenCL line {cline}: {text}\n" + note
    if loc is None:
        loc = SourceLoc(kernel.filename, kernel.firstline)
    return CompileError(message, loc, note=note)


# --------------------------------------------------------------------------- launcher

_SCALAR_NP = {"bool_": np.uint8, "f16": np.float32, "bf16": np.float32}


def _scalar_type(dtype: T.DType):
    return _SCALAR_NP.get(dtype.name) or dtype.np.type


class OpenCLLauncher(Launcher):
    def __init__(self, program, rendered: Rendered, kernel: ir.Kernel, gate: log_gate.LogGate = log_gate.ENVIRONMENT):
        import pyopencl as cl
        self.gate = gate  # the run-time dsl.log threshold, read at each launch
        with rt.device_lock:
            self.kernel = cl.Kernel(program, rendered.name)
        self.threads = kernel.threads
        self.plan = rendered.args
        self.rendered = rendered
        self.kernel_ir = kernel

    def __call__(self, args: Sequence, grid: Grid) -> None:
        if isinstance(grid, tuple):  # n-d: get_group_id(axis) / get_num_groups(axis) are the tile
            gx, gy, gz = grid
            global_size, local_size = (self.threads * gx, gy, gz), (self.threads, 1, 1)
        else:  # 1-d: get_group_id(1), get_group_id(2) are 0 and get_num_groups(1), (2) are 1
            global_size, local_size = (self.threads * grid,), (self.threads,)
        for spec, value in zip(self.plan, args):
            if spec.kind == "tensor" and spec.access == "zeroed":  # before the copy to the device
                np.asarray(value).fill(0)
        if min(global_size) <= 0:
            return
        cargs = []
        # the run-time dsl.log threshold; a bad OPDSL_LOG_LEVEL raises before anything runs
        level = np.int64(self.gate.threshold()) if "log_level" in self.rendered.hidden else None
        start = interrupt.arm()  # before waiting for the device lock: a SIGINT meanwhile stops this launch too
        with rt.launch(start) as bufs:
            for spec, value in zip(self.plan, args):
                if spec.kind == "tensor":
                    arr = np.asarray(value)
                    cargs.append(bufs.wrap(arr, writable=spec.access != "in", readable=spec.access != "out"))
                    cargs += [np.int64(n) for n in arr.shape]
                elif spec.kind == "scalar":
                    cargs.append(_scalar_type(spec.dtype)(value))
                elif spec.kind == "vec":
                    conv = _scalar_type(spec.dtype)
                    cargs += [conv(v) for v in np.asarray(value).reshape(-1)[:spec.length]]
                elif spec.kind == "vec_buffer":  # the scalar argument type (float for f16, uchar for bool)
                    flat = np.ascontiguousarray(np.asarray(value).reshape(-1)[:spec.length], _scalar_type(spec.dtype))
                    cargs.append(bufs.wrap(flat, writable=False))
            record = None
            if "interrupt" in self.rendered.hidden:  # host-shared where the device allows (it sees a SIGINT)
                cargs += [bufs.wrap(interrupt.COUNTER, writable=False), np.int64(start)]
            if "errors" in self.rendered.hidden:
                record = bounds.new_record()
                cargs.append(bufs.wrap(record, writable=True))
            if level is not None:  # last, as CInstrumentation.hidden_params declares it
                cargs.append(level)
            try:
                rt.run(self.kernel, cargs, global_size, local_size)
            except rt.SanitizerError as e:  # Oclgrind's findings, at the user's Python lines
                raise e.located(self.rendered.loc_of_line) from None
        interrupt.check(start)
        if record is not None and record[bounds.STATE]:
            raise bounds.error(record, self.rendered.sites, self.kernel_ir, args).with_traceback(None)


# --------------------------------------------------------------------------- target facts

# Short, vendor-neutral names for what an op may ask about, -> the extensions that give it.  The
# extension names themselves are listed too, in full (``cl_khr_fp64``, ``cl_intel_subgroups``):
# dropping the prefix would merge vendors' different extensions into one name.
FEATURE_EXTENSIONS = {
    "fp64": ("cl_khr_fp64",),
    "f16": ("cl_khr_fp16",),
    "int64_atomics": ("cl_khr_int64_base_atomics",),
    "subgroups": ("cl_khr_subgroups", "cl_intel_subgroups"),
}
_targets: dict = {}  # id of the rt.Device -> (that device, its TargetInfo): pyopencl queries cost


def target_of(dev: rt.Device) -> TargetInfo:
    """What ``dev`` can do: its extensions (lower case, in full) and ``FEATURE_EXTENSIONS`` names,
    the preferred float vector width in bits, compute units and local memory."""
    known = _targets.get(id(dev))
    if known is not None and known[0] is dev:
        return known[1]
    ext = frozenset(e.lower() for e in dev.extensions)
    short = {name for name, needs in FEATURE_EXTENSIONS.items() if ext & set(needs)}
    cl_dev = dev.device
    info = TargetInfo(device=dev.description, features=ext | short,
                      vector_bits=max(1, int(cl_dev.preferred_vector_width_float)) * 32,
                      compute_units=int(cl_dev.max_compute_units), local_mem_bytes=int(dev.local_mem_size))
    _targets[id(dev)] = (dev, info)
    return info


class OpenCLBackend(Backend):
    name = "opencl"
    cache_tag = rt.CACHE_TAG

    def source(self, request: CompileRequest) -> str:
        return render(request).source

    def compile(self, request: CompileRequest) -> Launcher:
        rendered = render(request)
        dev = rt.device()  # NoDevice (no usable device, each one's reason) is not the kernel's fault
        check_device(rendered, request.kernel, dev)
        try:
            options = rt.dsl_options(dev) + (" -cl-fast-relaxed-math" if request.fastmath else "")
            program = rt.build(rendered.source, options, extra_key=request.key)
        except rt.BuildError as e:  # rt.DriverError (the driver, not the code, failed) passes through
            raise build_error(e, rendered, request.kernel, dev) from None
        return OpenCLLauncher(program, rendered, request.kernel, log_gate.gate_of(request))

    def available(self) -> str:
        """'' when a device is usable, else why not, device by device."""
        return rt.unavailable_reason()

    def device(self) -> str:
        """The device kernels run on, e.g. "'Oclgrind Simulator' on 'Oclgrind' (simulator)"; '' if none."""
        try:
            dev = rt.device()
        except rt.NoDevice:
            return ""
        return f"{dev.description} ({dev.report.kind})"

    def target(self) -> TargetInfo:
        """The chosen device's facts (``target_of``); NoDevice, with each device's reason, if none."""
        return target_of(rt.device())

    def devices(self) -> list:
        """Every OpenCL device with its kind, whether it is usable and why not, the chosen one marked."""
        return rt.reports()


BACKEND = OpenCLBackend()
