"""Every family of the built-in op library: importing this module registers them all (ONNX ops in
the default domain with their opset ranges, opdsl's own ops such as FullyConnected and DataConvert
in ``com.opdsl``, the fusion rules and ONNX lowerings).  The registry imports it when a question
needs the whole table (``registry.all_ops``, an op no index entry names, the graph rewrites);
a lookup of one op imports only the modules ``ops/library_index.py`` names for it.  The names
imported here are the ones ``ops.<Name>`` offers (ops/__init__.py)."""
from dsl.opgraph.registry import builtin_library as _builtin_library

with _builtin_library():  # what registers here is built-in: user ops take precedence
    from ops.elementwise import Add, Sub, Mul, Relu, LeakyRelu, Sigmoid, Tanh, Clip, ClipV6  # noqa: F401
    from ops.binary import Div, Pow, Mod, ModV10, BitShift, BitShiftV11, Max, Min, Sum, Mean  # noqa: F401
    from ops.binary import BitwiseAnd, BitwiseOr, BitwiseXor  # noqa: F401
    from ops.binary import AddV6, SubV6, MulV6, DivV6, PowV1, MaxV6, MinV6, SumV6, MeanV6  # noqa: F401
    from ops.logic import Equal, EqualV7, Less, LessV7, LessOrEqual, Greater, GreaterV7, GreaterOrEqual  # noqa: F401
    from ops.logic import And, Or, Xor, Not, IsNaN, IsInf, Where  # noqa: F401
    from ops.cast import Cast, CastV6, CastLike, BitCast  # noqa: F401
    from ops.matmul import MatMul, Gemm, GemmV6, FullyConnected  # noqa: F401
    from ops.shape import (Identity, Reshape, ReshapeV1, Transpose, Shape, Size, Flatten,  # noqa: F401
                           Squeeze, SqueezeV1, Unsqueeze, UnsqueezeV1, Expand)
    from ops.slicing import Concat, ConcatV1, Split, SplitV1, Slice, SliceV1, Tile, ReverseSequence  # noqa: F401
    from ops.generate import (Range, ConstantOfShape, EyeLike, Trilu, Dropout, DropoutV1, DropoutV10,  # noqa: F401
                              DepthToSpace, SpaceToDepth)
    from ops.quant import DataConvert, QuantizeLinear, DequantizeLinear  # noqa: F401
    from ops.attention import Attention  # noqa: F401
    from ops.recurrent import RNN, GRU, LSTM, RecurrentScan  # noqa: F401
    from ops.einsum import Einsum  # noqa: F401
    from ops.rotary import RotaryEmbedding  # noqa: F401
    from ops.grid_sample import GridSample, GridSample16, AffineGrid  # noqa: F401
    from ops.nms import NonMaxSuppression  # noqa: F401
    from ops.signal import DFT, DFT17, STFT, HannWindow, HammingWindow, BlackmanWindow  # noqa: F401
    from ops.loss import NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss  # noqa: F401
    from ops.quant_matmul import MatMulInteger, QLinearMatMul, DynamicQuantizeLinear  # noqa: F401
    from ops.quant_conv import ConvInteger, QLinearConv  # noqa: F401
    from ops.nn import Conv  # noqa: F401
    from ops.norm import (BatchNormalization, BatchNormalizationV6, Softmax, LogSoftmax, Hardmax, LpNormalization,  # noqa: F401
                          LayerNormalization, RMSNormalization, InstanceNormalization, GroupNormalization, LRN)
    from ops.conv_fusion import FusedConv  # noqa: F401
    from ops.conv_global_pool import FusedConvGlobalPool  # noqa: F401
    from ops import qdq_fusion  # noqa: F401  (QDQ MatMul/Conv -> QLinearMatMul/QLinearConv)
    from ops.quant_conv_fused import FusedQLinearConv  # noqa: F401
    from ops.quant_concat import QLinearConcat  # noqa: F401
    from ops import qdq_data_movement  # noqa: F401  (QDQ MaxPool/Concat/Dropout on the integers)
    from ops.quant_conv_batch_norm import QLinearConvBatchNormalization  # noqa: F401
    from ops import qdq_residual  # noqa: F401  (QDQ BatchNormalization/Add/Sum -> QLinearBatchNormalization/QLinearAdd)
    from ops.gather import Gather, GatherElements, GatherND, OneHot, TopK, NonZero, Compress  # noqa: F401
    from ops.scatter import Scatter, ScatterElements, ScatterND  # noqa: F401
    from ops.pad import Pad, CenterCropPad  # noqa: F401
    from ops.resize import Resize, Upsample  # noqa: F401
    from ops.unary import (Neg, Abs, Sign, Reciprocal, Sqrt, Exp, Log, Floor, Ceil, Round, Sin, Cos,  # noqa: F401
                           Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Erf, BitwiseNot)
    from ops.activations import (Gelu, Elu, Selu, Celu, Softplus, Softsign, HardSigmoid, HardSwish,  # noqa: F401
                                 Mish, ThresholdedRelu, PRelu, PReluV6, Shrink, Swish, SwiGLU)
    from ops.reduce import (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,  # noqa: F401
                            ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, ArgMax, ArgMin, CumSum, CumProd)
    from ops.pool import (MaxPool, AveragePool, LpPool, GlobalMaxPool, GlobalAveragePool,  # noqa: F401
                          GlobalLpPool)
    from ops.unpool import MaxUnpool  # noqa: F401
    from ops.conv_transpose import ConvTranspose  # noqa: F401
    from ops.col2im import Col2Im  # noqa: F401
    from ops.causal_conv import CausalConvWithState  # noqa: F401
    from ops.linear_attention import LinearAttention  # noqa: F401
    from ops.control_flow import If, Loop, Scan, Scan8  # noqa: F401
    from ops.unique import Unique  # noqa: F401
    from ops.det import Det  # noqa: F401
    from ops.roi_align import RoiAlign, RoiAlign10, MaxRoiPool  # noqa: F401
    from ops.deform_conv import DeformConv  # noqa: F401
    from ops.tensor_scatter import TensorScatter  # noqa: F401
    from ops.mel import MelWeightMatrix  # noqa: F401
    from ops.random import (RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike, Bernoulli,  # noqa: F401
                            Multinomial)
    from ops.training import Momentum, Adagrad, Adam  # noqa: F401  (ai.onnx.preview.training)
    from ops.ml import Binarizer, ArrayFeatureExtractor, LabelEncoder  # noqa: F401  (ai.onnx.ml)
    from ops.tree_ensemble import TreeEnsemble, TreeEnsembleRegressor  # noqa: F401  (ai.onnx.ml)
    from ops.flex_attention import FlexAttention  # noqa: F401  (ai.onnx.preview)
    from ops.text import TfIdfVectorizer  # noqa: F401
    from ops.mean_variance_norm import mean_variance_normalization  # noqa: F401
    from ops.matmul_fusion import FusedMatMul  # noqa: F401  (MatMul -> Add(bias) as one GEMM)
    from ops.quant_matmul_float import MatMulIntegerToFloat  # noqa: F401  (the dynamically quantized MatMul as one GEMM)
    from ops.fused_elementwise import FusedElementwise  # noqa: F401
    from ops import elementwise_fusion  # noqa: F401  (elementwise DAGs -> one FusedElementwise kernel)
    from ops import data_convert_export  # noqa: F401  (DataConvert's standard ONNX form)
    from ops.sequence import (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,  # noqa: F401
                              SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap)
    from ops.optional import (Optional, OptionalHasElement, OptionalHasElement15,  # noqa: F401
                              OptionalGetElement, OptionalGetElement15)
