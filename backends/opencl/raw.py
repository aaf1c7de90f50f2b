"""Running a raw OpenCL op on the device: building its source, the ``__kernel`` its select hook
picks, and launching it after the argument and work-size checks of ``raw_checks``.

The user-facing op, ``RawOpenCL`` (hooks, params, output allocation, variants, pickling), is
``dsl/runtime/raw_opencl.py``; it holds one ``RawProgram`` and calls only that.  This module
never imports the runtime.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from backends.opencl import raw_checks
from backends.opencl.images import Image
from dsl.lang import types as T
from dsl.lang.errors import CompileError, SourceLoc

# Scalar params whose C type is wider than their dtype's numpy type.
_C_SCALARS = {"bool_": np.uint8, "f16": np.float32, "bf16": np.float32}

# An array argument: (name, array, writable, the Image it is passed as or None).
ArrayArg = Tuple[str, np.ndarray, bool, Optional[Image]]


class RawProgram:
    """One raw OpenCL op's source on the device: its built programs and kernels, and launches."""

    def __init__(self, name: str, filename: str, source_text: str):
        self.name, self.filename, self.source_text = name, filename, source_text
        self._kernels: Dict[Tuple[int, str], Any] = {}
        self._lock = threading.Lock()

    def kernel(self, fname: str, options: str):
        """The built ``cl.Kernel`` ``fname`` of the source built with ``options`` (the op's and select's)."""
        from backends.opencl import runtime as rt
        dev = rt.device()
        options = raw_checks.check_cl_std(self.name, rt.BUILD_OPTIONS, options, dev.device, dev.description)
        options += " -cl-kernel-arg-info"  # the parameter list the arguments are checked against
        try:
            program = rt.build(self.source_text, options)
        except rt.BuildError as e:  # rt.DriverError (the driver, not this source, failed) passes through
            first = rt.first_error(e.log)
            loc = SourceLoc(self.filename, first[0], first[1]) if first else None
            raise CompileError(f"raw OpenCL op {self.name}: the OpenCL compiler rejected the source on "
                               f"{rt.device().description}" + (f": {first[2]}" if first else ""),
                               loc, note=f"build options: {options}\ncompiler log:\n{e.log[:4000]}") from None
        key = (id(program), fname)
        with self._lock:
            hit = self._kernels.get(key)
            if hit is None:
                import pyopencl as cl
                try:
                    with rt.device_lock:
                        k = cl.Kernel(program, fname)
                        kparams = raw_checks.kernel_params(k, dev.device)
                except cl.Error:
                    raise ValueError(f"raw OpenCL op {self.name}: select() chose {fname!r}, which the source "
                                     f"does not define as a __kernel") from None
                hit = self._kernels[key] = (program, k, kparams)  # the program stays alive with its kernel
        return hit[1]

    def kernel_params(self, k) -> List[raw_checks.KernelParam]:
        """The parameter list of built kernel ``k``, as the compiler saw it."""
        with self._lock:
            return next(hit[2] for hit in self._kernels.values() if hit[1] is k)

    def launch(self, fname: str, k, arrays: Sequence[ArrayArg], params: Sequence[Tuple[str, T.DType, Any]],
               extra_args: Callable[[], list], gsize: Tuple[int, ...], lsize: Optional[Tuple[int, ...]]) -> None:
        """Check the work sizes and every argument against ``k``'s parameters, then run it:
        ``arrays`` (inputs then outputs), the declared ``params`` (name, dtype, value), then
        ``extra_args()``' numpy scalars (asked for only when the launch is not empty)."""
        from backends.opencl import runtime as rt
        dev = rt.device()
        with rt.device_lock:  # it queries the kernel: a driver call, like every other one of a launch
            raw_checks.check_work_sizes(self.name, fname, gsize, lsize, k, dev.device)
        if any(g == 0 for g in gsize):
            return
        scalars = [(_C_SCALARS.get(dtype.name) or dtype.np.type)(value) for _, dtype, value in params]
        extra = extra_args()
        for v in extra:
            if not isinstance(v, np.generic):
                raise TypeError(f"raw OpenCL op {self.name}: args() must return numpy scalars "
                                f"(their dtype is the C type), got {v!r}")
        passed = [raw_checks.Passed(f"{'output' if w else 'input'} {n!r}", "image" if img else "buffer",
                                    a.dtype, img.kind if img else "", w)
                  for n, a, w, img in arrays]
        passed += [raw_checks.Passed(f"param {name!r}", "scalar", np.dtype(type(v)))
                   for (name, _, _), v in zip(params, scalars)]
        passed += [raw_checks.Passed(f"args()[{i}]", "scalar", v.dtype) for i, v in enumerate(extra)]
        raw_checks.check_arguments(self.name, fname, self.kernel_params(k), passed, self.source_text)
        from backends import interrupt
        with rt.launch(interrupt.arm()) as bufs:  # waiting behind other launches, a Ctrl-C stops this one
            cargs: List[Any] = []
            for n, a, w, img in arrays:
                if img is not None:
                    cargs.append(bufs.image(self.name, img, a, writable=w))
                else:
                    cargs.append(bufs.wrap(a, writable=w, readable=not w))
            cargs += scalars + list(extra)
            try:
                rt.run(k, cargs, gsize, lsize)
            except rt.SanitizerError as e:  # Oclgrind's findings, at lines of the .cl source
                raise e.located(lambda line: SourceLoc(self.filename, line, 1)) from None


_MOVED = ("RawOpenCL", "Param")


def __getattr__(name):
    """``RawOpenCL`` and ``Param`` moved to the kernel runtime: an import of the old place says where
    (an ImportError, since ``from ... import`` turns an AttributeError into a message without it)."""
    if name in _MOVED:
        raise ImportError(f"backends.opencl.raw.{name} moved to the kernel runtime: "
                          f"'from dsl.runtime.raw_opencl import {name}'" +
                          (" or dsl.RawOpenCL" if name == "RawOpenCL" else ""), name=name, path=__file__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
