"""Checks a raw OpenCL op makes before a launch, so that a mistake is an error naming the op and
the parameter instead of a crash, wrong data or a bare driver code.

* ``kernel_params``: the ``__kernel`` function's parameter list as the compiler saw it (macros
  expanded), read with ``clGetKernelArgInfo`` (the program is built with ``-cl-kernel-arg-info``).
* ``check_arguments``: what the op passes (buffers, images, scalars) against that list: count,
  kind (global pointer, image, scalar) and element type.  A buffer where the source declares an
  ``image2d_array_t`` segfaulted PoCL; a ``float`` where it declares an ``int`` ran silently.
* ``check_work_sizes``: OpenCL 1.2's work-size rules (a global size that is a multiple of the
  local size, the device's and the kernel's work-group limits, ``reqd_work_group_size``).
* ``check_cl_std``: a ``-cl-std=CLx.y`` build option against the OpenCL C versions the device has.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

# OpenCL C scalar type names -> numpy dtypes (the element type of a pointer, or a scalar argument).
C_TYPES = {"char": np.int8, "uchar": np.uint8, "unsigned char": np.uint8, "short": np.int16,
           "ushort": np.uint16, "unsigned short": np.uint16, "int": np.int32, "uint": np.uint32,
           "unsigned int": np.uint32, "long": np.int64, "ulong": np.uint64, "unsigned long": np.uint64,
           "float": np.float32, "double": np.float64, "half": np.float16}
C_NAMES = {np.dtype(v): k for k, v in reversed(list(C_TYPES.items()))}  # the short spelling wins
IMAGE_TYPES = ("image2d_t", "image2d_array_t", "image1d_t", "image1d_buffer_t", "image1d_array_t", "image3d_t")


class RawArgumentError(TypeError):
    """A raw OpenCL op's arguments do not match its ``__kernel``'s parameter list."""


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a ``__kernel`` function as the compiler reports it."""

    index: int
    name: str
    type_name: str   # e.g. 'float*', 'uchar', 'image2d_array_t', 'float4*'
    address: str     # 'global', 'constant', 'local' or 'private'
    access: str      # images: 'read_only', 'write_only', 'read_write'; else 'none'

    @property
    def is_image(self) -> bool:
        return self.type_name in IMAGE_TYPES

    @property
    def is_pointer(self) -> bool:
        return self.type_name.endswith("*")

    def describe(self) -> str:
        space = "" if self.address == "private" or self.is_image else f"__{self.address} "
        access = f"__{self.access} " if self.is_image and self.access != "none" else ""
        return f"{access}{space}{self.type_name} {self.name}".strip()


@dataclass(frozen=True)
class Passed:
    """One argument the op passes: ``kind`` 'buffer', 'image' or 'scalar', its numpy dtype (the
    element type of a buffer or image), the image type for images, and what it is in the op
    ('input x', 'param alpha', 'args()[0]')."""

    what: str
    kind: str
    dtype: np.dtype
    image_type: str = ""
    writable: bool = False


def kernel_params(kernel, device) -> List[KernelParam]:
    import pyopencl as cl
    q = cl.kernel_arg_info
    spaces = {cl.kernel_arg_address_qualifier.GLOBAL: "global", cl.kernel_arg_address_qualifier.LOCAL: "local",
              cl.kernel_arg_address_qualifier.CONSTANT: "constant", cl.kernel_arg_address_qualifier.PRIVATE: "private"}
    accesses = {cl.kernel_arg_access_qualifier.READ_ONLY: "read_only",
                cl.kernel_arg_access_qualifier.WRITE_ONLY: "write_only",
                cl.kernel_arg_access_qualifier.READ_WRITE: "read_write"}
    out = []
    for i in range(kernel.num_args):
        out.append(KernelParam(i, kernel.get_arg_info(i, q.NAME), kernel.get_arg_info(i, q.TYPE_NAME).strip(),
                               spaces.get(kernel.get_arg_info(i, q.ADDRESS_QUALIFIER), "private"),
                               accesses.get(kernel.get_arg_info(i, q.ACCESS_QUALIFIER), "none")))
    return out


def _typedefs(source: str) -> dict:
    """``typedef float my_t;`` -> {'my_t': 'float'}: the compiler reports a typedef by its own name."""
    return {m.group(2): " ".join(m.group(1).split())
            for m in re.finditer(r"\btypedef\s+((?:unsigned\s+)?\w+)\s+(\w+)\s*;", source)}


def _element_type(type_name: str, typedefs: dict) -> Optional[np.dtype]:
    """The numpy dtype of a scalar or of a pointer's element ('float4*' -> float32); None if unknown."""
    base = type_name.rstrip("*").strip()
    base = re.sub(r"^(const|volatile|restrict)\s+", "", base)
    base = typedefs.get(base, base)
    m = re.fullmatch(r"([a-z ]+?)(2|3|4|8|16)?", base)
    if m is None or m.group(1) not in C_TYPES:
        return None
    return np.dtype(C_TYPES[m.group(1)])


def c_name(dtype) -> str:
    return C_NAMES.get(np.dtype(dtype), str(np.dtype(dtype)))


def check_arguments(op: str, function: str, params: Sequence[KernelParam], passed: Sequence[Passed],
                    source: str) -> None:
    """RawArgumentError naming the op, the kernel parameter and what was passed, on the first
    mismatch; see the module docstring."""
    head = f"raw OpenCL op {op}: __kernel {function}"
    if len(params) != len(passed):
        listed = ", ".join(p.describe() for p in params) or "none"
        given = ", ".join(p.what for p in passed) or "nothing"
        raise RawArgumentError(
            f"{head} takes {len(params)} argument(s) ({listed}), but the op passes {len(passed)} ({given}); "
            f"the order is: one pointer or image per input, one per output, the declared params, then args()")
    typedefs = _typedefs(source)
    for p, a in zip(params, passed):
        where = f"{head} parameter {p.index} '{p.describe()}'"
        if a.kind == "image":
            if not p.is_image:
                raise RawArgumentError(f"{where} receives {a.what}, declared as an {a.image_type}; declare the "
                                       f"parameter as __read_only {a.image_type} (or pass a buffer: a plain name)")
            if p.type_name != a.image_type:
                raise RawArgumentError(f"{where} receives {a.what}, an {a.image_type}; accepted: the same image "
                                       f"type in the op's Image(...) and the source")
            if a.writable and p.access == "read_only":
                raise RawArgumentError(f"{where} receives output {a.what}; an output image is __write_only")
            if not a.writable and p.access == "write_only":
                raise RawArgumentError(f"{where} receives input {a.what}; an input image is __read_only")
            continue
        if p.is_image:
            raise RawArgumentError(f"{where} is an image, but the op passes {a.what} as a "
                                   f"{'buffer' if a.kind == 'buffer' else 'scalar'}; declare it with "
                                   f"Image('{p.name}', '{p.type_name}', order='R') (its channel order) in inputs or outputs")
        want = _element_type(p.type_name, typedefs)
        if a.kind == "buffer":
            if not p.is_pointer or p.address not in ("global", "constant"):
                raise RawArgumentError(f"{where} receives {a.what}, an array of {a.dtype}; accepted: a __global "
                                       f"or __constant pointer such as '__global {c_name(a.dtype)}* {p.name}'")
            ok = want is None or want == a.dtype or (a.dtype == np.float16 and want == np.uint16)
            if not ok:
                raise RawArgumentError(f"{where} receives {a.what}, an array of {a.dtype} ({c_name(a.dtype)}); "
                                       f"the pointer's element type is {want} ({c_name(want)})")
            continue
        if p.is_pointer or p.address != "private":
            raise RawArgumentError(f"{where} is a pointer, but the op passes {a.what}, a {c_name(a.dtype)} scalar; "
                                   f"accepted: '{c_name(a.dtype)} {p.name}'")
        if want is not None and want != a.dtype:
            raise RawArgumentError(f"{where} receives {a.what}, passed as {c_name(a.dtype)}; declare it "
                                   f"'{c_name(a.dtype)} {p.name}' (or change the param's dtype)")


# --------------------------------------------------------------------------- work sizes


def _divisors(n: int, limit: int) -> List[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def check_work_sizes(op: str, function: str, gsize: Tuple[int, ...], lsize: Optional[Tuple[int, ...]],
                     kernel, device) -> None:
    """ValueError naming the op and the OpenCL rule a work size breaks, with sizes that would work."""
    import pyopencl as cl
    head = f"raw OpenCL op {op}: __kernel {function}: enqueue() returned global size {gsize}"
    dims = int(device.max_work_item_dimensions)
    if not 1 <= len(gsize) <= dims:
        raise ValueError(f"{head}; accepted: 1 to {dims} dimensions")
    if any(g < 0 for g in gsize):
        raise ValueError(f"{head}; sizes must not be negative")
    if lsize is None:
        return
    head += f" and local size {lsize}"
    if len(lsize) != len(gsize):
        raise ValueError(f"{head}; the local size needs as many dimensions as the global size, or None")
    if any(v < 1 for v in lsize):
        raise ValueError(f"{head}; local sizes are at least 1 (or None to let the driver choose)")
    reqd = tuple(int(v) for v in kernel.get_work_group_info(cl.kernel_work_group_info.COMPILE_WORK_GROUP_SIZE,
                                                             device))
    if any(reqd):
        want = reqd[:len(lsize)]
        if tuple(lsize) != want or any(reqd[len(lsize):][i] != 1 for i in range(len(reqd) - len(lsize))):
            raise ValueError(f"{head}; the source requires local size {want} "
                             f"(__attribute__((reqd_work_group_size{reqd})))")
    for d, (g, v) in enumerate(zip(gsize, lsize)):
        if g % v:
            up = -(-g // v) * v
            ok = ", ".join(map(str, _divisors(g, min(v * 4, 1024))[-6:]))
            raise ValueError(f"{head}: global size {g} in dimension {d} is not a multiple of local size {v}, which "
                             f"OpenCL 1.2 requires (CL_INVALID_WORK_GROUP_SIZE); round the global size up to {up} and "
                             f"guard the extra work-items in the kernel (if (i < n)), use a local size that divides "
                             f"{g} ({ok}), or None")
    item_max = [int(v) for v in device.max_work_item_sizes]
    for d, v in enumerate(lsize):
        if v > item_max[d]:
            raise ValueError(f"{head}: local size {v} in dimension {d} exceeds the device's limit {item_max[d]} "
                             f"(CL_DEVICE_MAX_WORK_ITEM_SIZES)")
    group = int(np.prod(lsize))
    limit = min(int(device.max_work_group_size),
                int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device)))
    if group > limit:
        raise ValueError(f"{head}: a work-group of {group} work-items exceeds this kernel's limit of {limit} on the "
                         f"device (CL_KERNEL_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_GROUP_SIZE); use a smaller local size")


# --------------------------------------------------------------------------- OpenCL C versions

_STD = re.compile(r"-cl-std=CL(\d+)\.(\d+)\b")


def opencl_c_versions(device) -> List[Tuple[int, int]]:
    """The OpenCL C versions ``device`` compiles: up to CL_DEVICE_OPENCL_C_VERSION, and on an
    OpenCL 3.0 device the ones CL_DEVICE_OPENCL_C_ALL_VERSIONS lists."""
    import pyopencl as cl
    m = re.match(r"OpenCL C (\d+)\.(\d+)", device.opencl_c_version)
    top = (int(m.group(1)), int(m.group(2))) if m else (1, 2)
    known = [(1, 0), (1, 1), (1, 2), (2, 0)]
    versions = {v for v in known if v <= top} | {top}
    platform = re.match(r"OpenCL (\d+)\.", device.version)
    if platform and int(platform.group(1)) >= 3:
        try:
            for nv in device.get_info(cl.device_info.OPENCL_C_ALL_VERSIONS):
                versions.add((nv.version >> 22, (nv.version >> 12) & 0x3FF))
        except Exception:  # the query is OpenCL 3.0's: a driver without it keeps the version above
            pass
    return sorted(versions)


def check_cl_std(op: str, default: str, options: str, device, description: str) -> str:
    """The build options: ``default`` (opdsl's ``-cl-std=CL1.2``) then the op's ``options``, or
    the op's alone when they name their own ``-cl-std``; a ValueError naming the op when the
    device does not have the OpenCL C version asked for."""
    asked = _STD.findall(options)
    if not asked:
        return " ".join(o for o in (default, options) if o)
    have = opencl_c_versions(device)
    for major, minor in asked:
        if (int(major), int(minor)) not in have:
            listed = ", ".join(f"-cl-std=CL{a}.{b}" for a, b in have)
            raise ValueError(f"raw OpenCL op {op}: build option -cl-std=CL{major}.{minor} needs OpenCL C "
                             f"{major}.{minor}, which OpenCL device {description} ({device.opencl_c_version.strip()}) "
                             f"does not have; accepted there: {listed}")
    rest = _STD.sub("", default).strip()
    return " ".join(o for o in (rest, options) if o)
