"""Arrays that start on a 64-byte cache line, for buffers kernels stream 64-byte rows through.

numpy starts a large array 16 bytes past a line (and 0, 16, 32 or 48 past one where memory is
reused).  A kernel loading or storing 64-byte rows (an AVX-512 vector, a matrix tile's row) then
touches two lines per row: the packed f32 GEMM ran 1024³ about 7 % slower, MatMulInteger's tile
stores 6-12 %, the direct convolution's weight loads likewise."""

from __future__ import annotations

import math

import numpy as np

LINE = 64  # bytes


def address(a: np.ndarray) -> int:
    """The address of ``a``'s first element."""
    return a.__array_interface__["data"][0]


def line_aligned(shape, dtype=np.float32, zero: bool = False, min_bytes: int = 0) -> np.ndarray:
    """An array of ``shape`` (an int or a tuple) starting on a cache line, zero-filled if ``zero``;
    a plain numpy array if it is under ``min_bytes`` (lining up costs ~1.5 µs, numpy's own
    allocation ~0.2: on a small array's hot path that costs more than straddled lines can).

    It owns its start: its chain of ``base`` arrays ends at an array on the line, not at a bigger
    byte buffer, so a model plan that copies a buffer's owner (``ScratchPool``) keeps the copy
    aligned too."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = math.prod(shape)
    if count * dtype.itemsize < min_bytes:
        return (np.zeros if zero else np.empty)(shape, dtype)
    raw = (np.zeros if zero else np.empty)(count * dtype.itemsize + LINE, np.uint8)
    return np.frombuffer(raw.data, dtype, count, -raw.ctypes.data % LINE).reshape(shape)
