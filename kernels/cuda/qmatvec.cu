// y[r, o] = sum_i x[r, i] * W[o, i] for GGUF Q4_0, Q4_1 and Q8_0 weights W and up to
// MAX_ROWS activation rows quantized by quantize_q8_1: decode (1 row) and verify (k + 1 rows)
// through ONE kernel, each weight block read once for all rows.
//
// One warp per output feature o: lane l takes the feature's blocks l, l + 32, l + 64, … and
// keeps one float sum per row; then each row's 32 partial sums are added in the fixed
// butterfly of warp_sum. A row's arithmetic and its order depend on nothing but the row and
// the feature, so a row gives the same bits alone or beside 15 others (llama.cpp switches
// kernels by row count instead, and its greedy output changes under speculation).
//
// Output row r, feature o lands at y[r * y_stride + y_offset + o], so the parts of a fused
// projection (Q, K and V of different types) write side by side.
//
// Grid (ceil(out / WARPS_PER_BLOCK)), block (32, WARPS_PER_BLOCK).

#define MAX_ROWS 16

// Integer dot product of one weight block's 32 4-bit values (low nibbles are values 0-15,
// high nibbles 16-31) with one activation block's 32 8-bit values.
__device__ __forceinline__ int dot_q4(const u8* qs, const i8* xq) {
    const int* x = reinterpret_cast<const int*>(xq);
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int w = load_i32_a2(qs + 4 * i);
        sum = __dp4a(w & 0x0F0F0F0F, x[i], sum);
        sum = __dp4a((w >> 4) & 0x0F0F0F0F, x[i + 4], sum);
    }
    return sum;
}

__device__ __forceinline__ int dot_q8(const u8* qs, const i8* xq) {
    const int* x = reinterpret_cast<const int*>(xq);
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) sum = __dp4a(load_i32_a2(qs + 4 * i), x[i], sum);
    return sum;
}

// One block's contribution for each format. `ds` is the activation block's (d, s).
// Q4_0: 18 bytes (f16 d, 16 bytes of nibbles), value (q - 8) * d; the offset is taken in
// integers (sum (q - 8) x = dot - 8 sum x), as ggml's q4_0 x q8_0 does.
__device__ __forceinline__ float block_q4_0(const u8* b, const i8* xq, const float* ds) {
    const float d = half_to_float(load_u16(b));
    const int* x = reinterpret_cast<const int*>(xq);
    int xsum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) xsum = __dp4a(0x01010101, x[i], xsum);
    return d * ds[0] * (float)(dot_q4(b + 2, xq) - 8 * xsum);
}

// Q4_1: 20 bytes (f16 d, f16 m, 16 bytes of nibbles), value q * d + m.
__device__ __forceinline__ float block_q4_1(const u8* b, const i8* xq, const float* ds) {
    const float d = half_to_float(load_u16(b));
    const float m = half_to_float(load_u16(b + 2));
    return d * ds[0] * (float)dot_q4(b + 4, xq) + m * ds[1];
}

// Q8_0: 34 bytes (f16 d, 32 signed bytes), value q * d.
__device__ __forceinline__ float block_q8_0(const u8* b, const i8* xq, const float* ds) {
    const float d = half_to_float(load_u16(b));
    return d * ds[0] * (float)dot_q8(b + 2, xq);
}

#define MMVQ(NAME, BLOCK_BYTES, BLOCK_FN)                                                   \
extern "C" __global__ void NAME(                                                           \
    const u8* __restrict__ w,      /* [out, in / 32 blocks] */                             \
    const i8* __restrict__ xq,     /* [rows, in] */                                        \
    const float* __restrict__ xds, /* [rows, in / 32, 2] */                                \
    float* __restrict__ y,         /* [rows, y_stride], columns from y_offset */           \
    int in_dim, int out_dim, int rows, int y_stride, int y_offset) {                       \
    const int o = blockIdx.x * blockDim.y + threadIdx.y;                                   \
    if (o >= out_dim) return;                                                              \
    const int lane = threadIdx.x;                                                          \
    const int blocks = in_dim / 32;                                                        \
    const u8* wrow = w + (long)o * blocks * BLOCK_BYTES;                                   \
    float acc[MAX_ROWS];                                                                   \
    _Pragma("unroll") for (int r = 0; r < MAX_ROWS; r++) acc[r] = 0.0f;                    \
    for (int b = lane; b < blocks; b += WARP) {                                            \
        const u8* wb = wrow + (long)b * BLOCK_BYTES;                                       \
        _Pragma("unroll") for (int r = 0; r < MAX_ROWS; r++) {                             \
            if (r < rows) {                                                                \
                const long xb = (long)r * blocks + b;                                      \
                acc[r] += BLOCK_FN(wb, xq + xb * 32, xds + xb * 2);                        \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    _Pragma("unroll") for (int r = 0; r < MAX_ROWS; r++) {                                 \
        if (r < rows) {                                                                    \
            const float s = warp_sum(acc[r]);                                              \
            if (lane == 0) y[(long)r * y_stride + y_offset + o] = s;                       \
        }                                                                                  \
    }                                                                                      \
}

MMVQ(mmvq_q4_0, 18, block_q4_0)
MMVQ(mmvq_q4_1, 20, block_q4_1)
MMVQ(mmvq_q8_0, 34, block_q8_0)

// The same for f32 weights (F32, F16, BF16 and the K-quants, dequantized at load), over f32
// activations: lane l takes inputs l, l + 32, …; then the fixed butterfly.
extern "C" __global__ void mv_f32(
    const float* __restrict__ w,   // [out, in]
    const float* __restrict__ x,   // [rows, in]
    float* __restrict__ y,         // [rows, y_stride], columns from y_offset
    int in_dim, int out_dim, int rows, int y_stride, int y_offset) {
    const int o = blockIdx.x * blockDim.y + threadIdx.y;
    if (o >= out_dim) return;
    const int lane = threadIdx.x;
    const float* wrow = w + (long)o * in_dim;
    float acc[MAX_ROWS];
#pragma unroll
    for (int r = 0; r < MAX_ROWS; r++) acc[r] = 0.0f;
    for (int i = lane; i < in_dim; i += WARP) {
        const float wi = wrow[i];
#pragma unroll
        for (int r = 0; r < MAX_ROWS; r++)
            if (r < rows) acc[r] += wi * x[(long)r * in_dim + i];
    }
#pragma unroll
    for (int r = 0; r < MAX_ROWS; r++) {
        if (r < rows) {
            const float s = warp_sum(acc[r]);
            if (lane == 0) y[(long)r * y_stride + y_offset + o] = s;
        }
    }
}
