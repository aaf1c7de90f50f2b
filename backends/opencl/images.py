"""OpenCL images as raw OpenCL op inputs and outputs (TIM-VX kernels read tensors as
``image2d_array_t``): the declaration, ``Image``, and turning a numpy array into a ``cl.Image``.

An ``image2d_t`` holds an array of shape ``(height, width)`` or ``(height, width, channels)``;
an ``image2d_array_t`` one of shape ``(layers, height, width[, channels])``.  ``channels`` is
what the channel order holds (1 for ``R``, 2 for ``RG``, 4 for ``RGBA``).  The channel type
follows the array's dtype (``float32`` -> ``FLOAT``, ``uint8`` -> ``UNSIGNED_INT8``, ...) unless
the declaration names one, such as ``UNORM_INT8`` (a ``uint8`` array read as floats in [0, 1]).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

KINDS = ("image2d_t", "image2d_array_t")
CHANNELS = {"R": 1, "A": 1, "Rx": 1, "INTENSITY": 1, "LUMINANCE": 1, "RG": 2, "RA": 2, "RGx": 2,
            "RGBA": 4, "BGRA": 4, "ARGB": 4}
# channel type -> the numpy dtype of the array it is made from
CHANNEL_DTYPES = {"FLOAT": np.float32, "HALF_FLOAT": np.float16, "UNSIGNED_INT8": np.uint8,
                  "SIGNED_INT8": np.int8, "UNSIGNED_INT16": np.uint16, "SIGNED_INT16": np.int16,
                  "UNSIGNED_INT32": np.uint32, "SIGNED_INT32": np.int32, "UNORM_INT8": np.uint8,
                  "SNORM_INT8": np.int8, "UNORM_INT16": np.uint16, "SNORM_INT16": np.int16}
DEFAULT_TYPES = {np.dtype(np.float32): "FLOAT", np.dtype(np.float16): "HALF_FLOAT",
                 np.dtype(np.uint8): "UNSIGNED_INT8", np.dtype(np.int8): "SIGNED_INT8",
                 np.dtype(np.uint16): "UNSIGNED_INT16", np.dtype(np.int16): "SIGNED_INT16",
                 np.dtype(np.uint32): "UNSIGNED_INT32", np.dtype(np.int32): "SIGNED_INT32"}


@dataclass(frozen=True)
class Image:
    """An input or output of a raw OpenCL op passed as an OpenCL image rather than a buffer:
    ``Image("x", "image2d_array_t", order="R")``, optionally ``channel_type="UNORM_INT8"``."""

    name: str
    kind: str = "image2d_t"
    order: str = "R"
    channel_type: Optional[str] = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Image {self.name!r}: kind {self.kind!r} is not supported; accepted: {', '.join(KINDS)}")
        if self.order not in CHANNELS:
            raise ValueError(f"Image {self.name!r}: channel order {self.order!r} is not supported; accepted: "
                             f"{', '.join(CHANNELS)}")
        if self.channel_type is not None and self.channel_type not in CHANNEL_DTYPES:
            raise ValueError(f"Image {self.name!r}: channel type {self.channel_type!r} is not supported; accepted: "
                             f"{', '.join(CHANNEL_DTYPES)}")

    def channel_type_for(self, dtype) -> str:
        dtype = np.dtype(dtype)
        if self.channel_type is None:
            if dtype not in DEFAULT_TYPES:
                raise TypeError(f"image {self.name!r}: no OpenCL channel type holds {dtype}; accepted: "
                                f"{', '.join(str(d) for d in DEFAULT_TYPES)}")
            return DEFAULT_TYPES[dtype]
        if np.dtype(CHANNEL_DTYPES[self.channel_type]) != dtype:
            raise TypeError(f"image {self.name!r} has channel type {self.channel_type}, made from "
                            f"{np.dtype(CHANNEL_DTYPES[self.channel_type])} arrays; got {dtype}")
        return self.channel_type

    def extent(self, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        """(width, height[, layers]) of an array of ``shape``; ValueError naming the accepted shapes."""
        c = CHANNELS[self.order]
        lead = 2 if self.kind == "image2d_t" else 3
        names = "(height, width" if lead == 2 else "(layers, height, width"
        if (c == 1 and len(shape) == lead) or (len(shape) == lead + 1 and shape[-1] == c):
            dims = shape[:lead]
        else:
            accepted = f"{names})" + f" or {names}, 1)" if c == 1 else f"{names}, {c})"
            raise ValueError(f"image {self.name!r} ({self.kind}, order {self.order}) takes an array of shape "
                             f"{accepted}; got {tuple(shape)}")
        if any(d == 0 for d in dims):
            raise ValueError(f"image {self.name!r}: an OpenCL image cannot be empty; got shape {tuple(shape)}")
        return (dims[-1], dims[-2]) + ((dims[0],) if lead == 3 else ())


def check_device(op: str, spec: Image, array: np.ndarray, dev, writable: bool) -> "object":
    """The ``cl.ImageFormat`` for ``array``; ValueError naming the op and the image when the device
    has no images, not this format or not this size."""
    import pyopencl as cl
    d = dev.device
    where = f"raw OpenCL op {op}: {'output' if writable else 'input'} image {spec.name!r}"
    if not d.image_support:
        raise ValueError(f"{where} ({spec.kind}) needs image support, which OpenCL device {dev.description} "
                         f"lacks (CL_DEVICE_IMAGE_SUPPORT is false); pass a buffer (a plain name) or pick another "
                         f"device with OPDSL_OPENCL_DEVICE")
    ctype = spec.channel_type_for(array.dtype)
    fmt = cl.ImageFormat(getattr(cl.channel_order, spec.order), getattr(cl.channel_type, ctype))
    kind = cl.mem_object_type.IMAGE2D if spec.kind == "image2d_t" else cl.mem_object_type.IMAGE2D_ARRAY
    flags = cl.mem_flags.WRITE_ONLY if writable else cl.mem_flags.READ_ONLY
    formats = cl.get_supported_image_formats(dev.context, flags, kind)
    if not any(f.channel_order == fmt.channel_order and f.channel_data_type == fmt.channel_data_type
               for f in formats):
        same = sorted({cl.channel_type.to_string(f.channel_data_type) for f in formats
                       if f.channel_order == fmt.channel_order})
        raise ValueError(f"{where}: OpenCL device {dev.description} has no {spec.kind} of order {spec.order} and "
                         f"channel type {ctype}; with order {spec.order} it has: {', '.join(same) or 'none'}")
    ext = spec.extent(array.shape)
    limits = (int(d.image2d_max_width), int(d.image2d_max_height)) + \
        ((int(d.image_max_array_size),) if len(ext) == 3 else ())
    for what, n, top in zip(("width", "height", "layers"), ext, limits):
        if n > top:
            raise ValueError(f"{where}: {what} {n} exceeds the device's limit of {top}")
    return fmt


def make(op: str, spec: Image, array: np.ndarray, dev, writable: bool):
    """A ``cl.Image`` holding ``array`` (an input) or sized for it (an output).  Call under the
    device lock (it creates driver objects)."""
    import pyopencl as cl
    fmt = check_device(op, spec, array, dev, writable)
    shape = spec.extent(array.shape)
    is_array = spec.kind == "image2d_array_t"
    create = getattr(cl, "create_image", cl.Image)  # pyopencl >= 2024.3 deprecates calling cl.Image
    if writable:
        return create(dev.context, cl.mem_flags.WRITE_ONLY, fmt, shape=shape, is_array=is_array)
    return create(dev.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, fmt, shape=shape,
                    hostbuf=np.ascontiguousarray(array), is_array=is_array)


def read_back(queue, image, spec: Image, array: np.ndarray) -> None:
    """Copy an output image into ``array`` (blocking)."""
    import pyopencl as cl
    ext = spec.extent(array.shape)
    region = ext + (1,) * (3 - len(ext))
    cl.enqueue_copy(queue, array, image, origin=(0, 0, 0), region=region, is_blocking=True)
