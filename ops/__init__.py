"""The built-in operator library, written in the DSL.  ``import ops`` registers every
family (ONNX ops in the default domain with their opset ranges, opdsl's own ops
such as FullyConnected and DataConvert in ``com.opdsl``)."""
from dsl.opgraph.registry import builtin_library as _builtin_library

with _builtin_library():  # what registers here is built-in: user ops take precedence
    from ops.elementwise import Add, Sub, Mul, Relu, LeakyRelu, Sigmoid, Tanh, Clip, ClipV6  # noqa: F401
    from ops.binary import Div, Pow, Mod, ModV10, BitShift, BitShiftV11, Max, Min, Sum, Mean  # noqa: F401
    from ops.binary import DivV6, PowV1, MaxV6, MinV6, SumV6, MeanV6  # noqa: F401
    from ops.logic import Equal, EqualV7, Less, LessV7, LessOrEqual, Greater, GreaterV7, GreaterOrEqual  # noqa: F401
    from ops.logic import And, Or, Xor, Not, IsNaN, IsInf, Where  # noqa: F401
    from ops.cast import Cast, CastV6, CastLike  # noqa: F401
    from ops.matmul import MatMul, Gemm, FullyConnected  # noqa: F401
    from ops.shape import Identity, Reshape, Transpose  # noqa: F401
    from ops.quant import DataConvert, QuantizeLinear, DequantizeLinear  # noqa: F401
    from ops.nn import Conv  # noqa: F401
    from ops.norm import BatchNormalization  # noqa: F401
    from ops.conv_fusion import FusedConv  # noqa: F401
