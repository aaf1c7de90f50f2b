// Hard swish, TIM-VX style: y = x * relu6(x + 3) / 6.
// Two variants selected by input dtype (see ops/opencl/kernels.py):
//   hswish_F32toF32            float in, float out
//   QNAME (-DQNAME=hswish_U8toU8 -DQ_T=uchar -DQ_MIN=0 -DQ_MAX=255, or the I8 spelling)
//                              quantized in and out: dequant -> hswish -> quant,
//                              dequant(q) = (q - zero_point) * scale,
//                              quant(f) = clamp(round_half_even(f / scale) + zero_point)
// Scalar params, in declared order: in_scale, in_zero_point, out_scale, out_zero_point
// (the float variant ignores them).  One work-item per element.

static inline float hswish(float x)
{
    return x * clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f;
}

__kernel void hswish_F32toF32(__global const float* x, __global float* y,
                              float in_scale, int in_zero_point, float out_scale, int out_zero_point)
{
    const size_t i = get_global_id(0);
    y[i] = hswish(x[i]);
}

#ifdef Q_T
__kernel void QNAME(__global const Q_T* x, __global Q_T* y,
                    float in_scale, int in_zero_point, float out_scale, int out_zero_point)
{
    const size_t i = get_global_id(0);
    const float f = (float)((int)x[i] - in_zero_point) * in_scale;
    const float q = rint(hswish(f) / out_scale) + (float)out_zero_point;  // rint: ties to even
    y[i] = (Q_T)clamp(q, (float)Q_MIN, (float)Q_MAX);
}
#endif
