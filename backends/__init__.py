"""Backends: one module per target (``interpreter``, ``numba``, ``opencl``) behind
the small interface in ``backends.base``; ``backends.cache`` is the on-disk
compile cache they share.  Modules load on first use (``backends.base.get``),
so importing this package never imports numba or pyopencl.
"""
from backends.base import Backend, CompileRequest, Launcher, get, names  # noqa: F401
