"""opdsl: a JIT-compiled operator DSL.  ``import dsl`` gives the whole public API."""
from dsl.lang.types import (  # noqa: F401
    DType, TypeVar, In, Out, InOut, Vec, const,
    bool_, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64,
)
from dsl.lang.errors import CompileError, LaunchError, SourceLoc  # noqa: F401
from dsl.lang.builtins import (  # noqa: F401
    thread_id, num_threads, tile_id, num_tiles, sync, scratch, split, atomic_add, log,
    exp, sqrt, rsqrt, tanh, erf, sin, cos, floor, ceil, clamp, where,
)
from dsl.lang.builtins import min_ as min, max_ as max, abs_ as abs, pow_ as pow  # noqa: F401,A004
from dsl.kernel import kernel, func, Kernel  # noqa: F401

__version__ = "0.1.0"

# --- op layer (dsl/op.py, dsl/graph.py, ...) registers its names below ---
from dsl.op import Op, op, TensorSpec, VerifyError  # noqa: F401,E402  (dsl.op is the decorator)
from dsl.registry import UnknownOpError  # noqa: F401,E402
from dsl.graph import Graph, Tensor  # noqa: F401,E402
from dsl.composed import composed  # noqa: F401,E402
from dsl.model import Model  # noqa: F401,E402
from dsl.onnx import load_onnx, OnnxImportError  # noqa: F401,E402
