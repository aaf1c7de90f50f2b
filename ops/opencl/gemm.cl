// 2D GEMM: C[M, N] = alpha * A[M, K] @ B[K, N], row-major, tiled through __local memory.
// Variants by input dtype: gemm_F32 (float) and gemm_F16 (half storage, float accumulation).
// Build option -DTS=<tile> sets the square tile (the local size is TS x TS).
// Arguments: A, B, C, then alpha (declared param), then M, N, K (shape-derived).

#ifndef TS
#define TS 16
#endif

#define GEMM_BODY(LOAD_A, LOAD_B)                                                   \
    const int col = get_global_id(0), row = get_global_id(1);                       \
    const int lc = get_local_id(0), lr = get_local_id(1);                           \
    __local float As[TS][TS];                                                       \
    __local float Bs[TS][TS];                                                       \
    float acc = 0.0f;                                                               \
    for (int t = 0; t < K; t += TS) {                                               \
        As[lr][lc] = (row < M && t + lc < K) ? LOAD_A((long)row * K + t + lc) : 0.0f; \
        Bs[lr][lc] = (t + lr < K && col < N) ? LOAD_B((long)(t + lr) * N + col) : 0.0f; \
        barrier(CLK_LOCAL_MEM_FENCE);                                               \
        for (int k = 0; k < TS; ++k)                                                \
            acc += As[lr][k] * Bs[k][lc];                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                               \
    }

#define LOAD_F32_A(i) A[i]
#define LOAD_F32_B(i) B[i]
#define LOAD_F16_A(i) vload_half((i), A)
#define LOAD_F16_B(i) vload_half((i), B)

__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void gemm_F32(__global const float* A, __global const float* B, __global float* C,
              float alpha, int M, int N, int K)
{
    GEMM_BODY(LOAD_F32_A, LOAD_F32_B)
    if (row < M && col < N)
        C[(long)row * N + col] = alpha * acc;
}

__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void gemm_F16(__global const half* A, __global const half* B, __global half* C,
              float alpha, int M, int N, int K)
{
    GEMM_BODY(LOAD_F16_A, LOAD_F16_B)
    if (row < M && col < N)
        vstore_half_rte(alpha * acc, (long)row * N + col, C);
}
