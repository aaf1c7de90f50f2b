"""Backends: one subpackage per target (``interpreter``, ``numba``, ``opencl``, each exposing
``BACKEND``) behind the small interface in ``backends.base``, plus what they share: the C-family
emitter ``backends.cstyle``, the on-disk compile cache ``backends.cache``, identifier rules
``backends.naming``, offset/constant spelling ``backends.spelling``, the launch-time
services ``backends.bounds`` (debug bounds errors) and ``backends.interrupt`` (Ctrl-C), and
``backends.compile_batch`` (the kernels one model plan needs, compiled together).
Backends load on first use (``backends.base.get``), so importing this package never imports
numba or pyopencl.
"""
from backends.base import Backend, CompileRequest, Launcher, get, names  # noqa: F401
