"""The OpenCL backend: kernels are rendered to OpenCL C by ``render`` (the C-family emitter of
``backends.cstyle`` with OpenCL's spellings) and run by ``runtime`` on the device ``devices``
picks, with ``sanitizer`` reading Oclgrind's reports.  ``raw`` builds and launches hand-written OpenCL C
for ``dsl.RawOpenCL`` (dsl/runtime/raw_opencl.py).

``BACKEND`` is resolved on first access: ``ops`` imports ``dsl.runtime.raw_opencl`` (and with it
``backends.opencl.images``) while it loads, and that must not import pyopencl or the emitter.
"""


def __getattr__(name):
    if name == "BACKEND":
        from backends.opencl.backend import BACKEND
        return BACKEND
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
