// RMSNorm, as the CPU's rms_norm: out = x * scale * w with scale = 1 / sqrt(mean(x^2) + eps),
// the squares summed in double as the CPU (and ggml) sum them. Gemma's GGUF weights already
// carry their +1.
//
// One block of NORM_THREADS per row: thread t sums x[t], x[t + NORM_THREADS], …; the block
// then adds the per-thread sums in a fixed tree (warp butterflies, then the warps' totals in
// order), so a row's result never depends on the launch's row count. In place is allowed.
//
// Grid (rows), block (NORM_THREADS).

#define NORM_THREADS 256

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ double block_sum(double v, double* shared) {
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    v = warp_sum_double(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    double total = 0.0;
    for (int i = 0; i < NORM_THREADS / WARP; i++) total += shared[i];
    __syncthreads();
    return total;
}

extern "C" __global__ void rms_norm(
    const float* x,                // [rows, dim]
    const float* __restrict__ w,   // [dim]
    float* out,                    // [rows, dim]
    int dim, float eps) {
    __shared__ double shared[NORM_THREADS / WARP];
    const float* xr = x + (long)blockIdx.x * dim;
    float* yr = out + (long)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) ss += (double)xr[i] * (double)xr[i];
    const float scale = 1.0f / sqrtf((float)(block_sum(ss, shared) / (double)dim) + eps);
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) yr[i] = xr[i] * scale * w[i];
}

// Per-head RMSNorm of Q or K rows in place (Qwen 3's and Gemma 3's q_norm / k_norm): one warp
// per (row, head). x: [rows, row_stride] with heads of head_dim from column `offset`.
// Grid (rows, heads), block 32.
extern "C" __global__ void head_rms_norm(
    float* x, const float* __restrict__ w, int row_stride, int offset, int head_dim,
    float eps) {
    float* h = x + (long)blockIdx.x * row_stride + offset + blockIdx.y * head_dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < head_dim; i += WARP) ss += (double)h[i] * (double)h[i];
    const float scale = 1.0f / sqrtf((float)(warp_sum_double(ss) / (double)head_dim) + eps);
    for (int i = threadIdx.x; i < head_dim; i += WARP) h[i] = h[i] * scale * w[i];
}
