// CustomRelu (HardSigmoid) in hand-written OpenCL C: one work-item per element.
// Arguments: input, output, then the declared params in manifest order (alpha, beta).
// custom_relu_f16 reads and writes half storage with vload_half/vstore_half and computes in
// float; it is built with -DHALF_IO=1 (the manifest's build_options for that variant only).

__kernel void custom_relu_f32(__global const float* x, __global float* y, float alpha, float beta)
{
    const size_t i = get_global_id(0);
    y[i] = clamp(alpha * x[i] + beta, 0.0f, 1.0f);
}

#ifdef HALF_IO
__kernel void custom_relu_f16(__global const half* x, __global half* y, float alpha, float beta)
{
    const size_t i = get_global_id(0);
    vstore_half_rte(clamp(alpha * vload_half(i, x) + beta, 0.0f, 1.0f), i, y);
}
#endif
