"""Raw OpenCL operators shipped with opdsl (see ops/opencl/kernels.py)."""
from ops.opencl.kernels import gemm, hswish  # noqa: F401
