"""The size cap on tensors opdsl allocates (``OPDSL_MAX_TENSOR_BYTES``, 4 GiB by default): a
folded constant, a planned buffer or an ONNX initializer larger than the cap is refused before
any memory is taken, with a message naming the tensor and the setting to change.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from dsl import config
from dsl.lang.errors import TensorSizeError  # noqa: F401  (every error: dsl/lang/errors.py)


def tensor_limit(max_tensor_bytes: Optional[int]) -> int:
    """The cap in bytes: the argument when given, else OPDSL_MAX_TENSOR_BYTES (default 4 GiB)."""
    if max_tensor_bytes is None:
        return config.max_tensor_bytes()
    if isinstance(max_tensor_bytes, bool) or not isinstance(max_tensor_bytes, (int, np.integer)) \
            or max_tensor_bytes <= 0:
        raise ValueError(f"max_tensor_bytes must be a positive int, got {max_tensor_bytes!r}")
    return int(max_tensor_bytes)


def check_tensor_bytes(shape: Sequence, dtype, what: str, limit: int) -> None:
    """Raise TensorSizeError naming ``what`` before a tensor of ``shape`` x ``dtype`` is allocated.
    Exact Python-int arithmetic: a product of huge dims cannot wrap around to a small number."""
    nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
    if nbytes > limit:
        raise TensorSizeError(f"{what}: shape {tuple(int(d) for d in shape)} of {np.dtype(dtype)} needs {nbytes} bytes "
                              f"({_human_bytes(nbytes)}), over the limit of {limit} bytes ({_human_bytes(limit)}); "
                              "raise it with max_tensor_bytes= or OPDSL_MAX_TENSOR_BYTES if this is intended")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
