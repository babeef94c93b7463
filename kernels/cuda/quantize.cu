// Activation rows to 8-bit blocks of 32 (ggml's q8_1), exactly as the CPU kernels quantize
// them before their integer dot products (kernels/src/quantize.rs): values scaled by
// 127 / amax and rounded half to even, d = amax / 127 and s = d * sum(q) both rounded through
// f16. Both devices then multiply the same integers; only the float sums' order differs.
//
// One warp per block of 32 values: grid (rows, cols / 32), block 32 (rows on x: a long
// prefill may carry more than the 65 535 a grid's y allows).

extern "C" __global__ void quantize_q8_1(
    const float* __restrict__ x,   // [rows, cols]
    i8* __restrict__ q,            // [rows, cols]
    float* __restrict__ ds,        // [rows, cols / 32, 2]: d, s
    int cols) {
    const int row = blockIdx.x;
    const int block = blockIdx.y;
    const int lane = threadIdx.x;
    const long at = (long)row * cols + block * 32 + lane;
    const float v = x[at];
    const float amax = warp_max(fabsf(v));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int qi = __float2int_rn(v * id);  // round half to even, as the CPU
    q[at] = (i8)qi;
    const int sum = warp_sum_int(qi);
    if (lane == 0) {
        const float d = amax / 127.0f;
        const long b = ((long)row * (cols / 32) + block) * 2;
        ds[b] = half_to_float(float_to_half(d));
        ds[b + 1] = half_to_float(float_to_half(d * (float)sum));
    }
}

// The activations the CPU multiplies K-quant weights by (kernels/src/quantize.rs,
// quantize_rows_k_into, as ggml's quantize_row_q8_K): per 256 values, max = the value of
// largest magnitude (the first, on ties), iscale = -127 / max, q = round-half-even(iscale x)
// capped at 127, d = 1 / iscale; written back dequantized (d · q) for the f32 mat-vec, whose
// weights are the K-quant's own values dequantized at load: the same products as the CPU's
// integer dots, summed in another order.
//
// One block of 256 threads per 256 values: grid (rows, cols / 256), block 256.
extern "C" __global__ void quantize_q8_k_f32(
    const float* __restrict__ x, float* __restrict__ xhat, int cols) {
    __shared__ float best_a[256];
    __shared__ float best_v[256];
    __shared__ int best_i[256];
    const long at = (long)blockIdx.x * cols + (long)blockIdx.y * 256 + threadIdx.x;
    const float v = x[at];
    best_a[threadIdx.x] = fabsf(v);
    best_v[threadIdx.x] = v;
    best_i[threadIdx.x] = threadIdx.x;
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            const int o = threadIdx.x + half;
            const bool take = best_a[o] > best_a[threadIdx.x] ||
                              (best_a[o] == best_a[threadIdx.x] && best_i[o] < best_i[threadIdx.x]);
            if (take) {
                best_a[threadIdx.x] = best_a[o];
                best_v[threadIdx.x] = best_v[o];
                best_i[threadIdx.x] = best_i[o];
            }
        }
        __syncthreads();
    }
    const float amax = best_a[0];
    const float iscale = amax == 0.0f ? 0.0f : -127.0f / best_v[0];
    const int q = min(__float2int_rn(iscale * v), 127);
    const float d = amax == 0.0f ? 0.0f : 1.0f / iscale;
    xhat[at] = d * (float)q;
}

// Activations quantized per 32 (quantize_q8_1) written back dequantized, d · q with d through
// f16: what the CPU multiplies Q5_0 weights by. Grid (rows, cols / 32), block 32.
extern "C" __global__ void q8_to_f32(
    const i8* __restrict__ q, const float* __restrict__ ds, float* __restrict__ xhat,
    int cols) {
    const long at = (long)blockIdx.x * cols + blockIdx.y * 32 + threadIdx.x;
    const long b = ((long)blockIdx.x * (cols / 32) + blockIdx.y) * 2;
    xhat[at] = ds[b] * (float)q[at];
}
