// Activation rows to 8-bit blocks of 32 (ggml's q8_1), exactly as the CPU kernels quantize
// them before their integer dot products (kernels/src/quantize.rs): values scaled by
// 127 / amax and rounded half to even, d = amax / 127 and s = d * sum(q) both rounded through
// f16. Both devices then multiply the same integers; only the float sums' order differs.
//
// One warp per block of 32 values: grid (cols / 32, rows), block 32.

extern "C" __global__ void quantize_q8_1(
    const float* __restrict__ x,   // [rows, cols]
    i8* __restrict__ q,            // [rows, cols]
    float* __restrict__ ds,        // [rows, cols / 32, 2]: d, s
    int cols) {
    const int row = blockIdx.y;
    const int block = blockIdx.x;
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
