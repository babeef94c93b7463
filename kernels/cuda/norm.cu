// RMSNorm, as the CPU's rms_norm: out = x / sqrt(mean(x^2) + eps) * (w + offset). The offset
// is 0 for Llama and Qwen; Gemma's GGUF weights already carry theirs.
//
// One block of NORM_THREADS per row: thread t sums x[t], x[t + NORM_THREADS], …; the block
// then adds the per-thread sums in a fixed tree (warp butterflies, then the warps' totals in
// order), so a row's result never depends on the launch's row count. In place is allowed.
//
// Grid (rows), block (NORM_THREADS).

#define NORM_THREADS 256

__device__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x % WARP;
    const int warp = threadIdx.x / WARP;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < NORM_THREADS / WARP; i++) total += shared[i];
    __syncthreads();
    return total;
}

extern "C" __global__ void rms_norm(
    const float* x,                // [rows, dim]
    const float* __restrict__ w,   // [dim]
    float* out,                    // [rows, dim]
    int dim, float eps) {
    __shared__ float shared[NORM_THREADS / WARP];
    const float* xr = x + (long)blockIdx.x * dim;
    float* yr = out + (long)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) ss += xr[i] * xr[i];
    const float scale = 1.0f / sqrtf(block_sum(ss, shared) / (float)dim + eps);  // IEEE, as the CPU
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) yr[i] = xr[i] * scale * w[i];
}

// Per-head RMSNorm of Q or K rows in place (Qwen 3's and Gemma 3's q_norm / k_norm): one warp
// per (row, head). x: [rows, row_stride] with heads of head_dim from column `offset`.
// Grid (rows, heads), block 32.
extern "C" __global__ void head_rms_norm(
    float* x, const float* __restrict__ w, int row_stride, int offset, int head_dim,
    float eps) {
    float* h = x + (long)blockIdx.x * row_stride + offset + blockIdx.y * head_dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < head_dim; i += WARP) ss += h[i] * h[i];
    const float scale = 1.0f / sqrtf(warp_sum(ss) / (float)head_dim + eps);
    for (int i = threadIdx.x; i < head_dim; i += WARP) h[i] = h[i] * scale * w[i];
}
