"""The numba backend: kernels become Python source (``codegen``/``regions``) that Numba compiles
into multithreaded CPU code, with helper kernels in ``arith``, ``math``, ``format`` and ``runtime``
and machine code kept on disk by ``cache``.

``BACKEND`` is resolved on first access, so importing a helper module (generated modules import
``backends.numba.runtime``) or the package itself does not build the backend object.
"""


def __getattr__(name):
    if name == "BACKEND":
        from backends.numba.backend import BACKEND
        return BACKEND
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
