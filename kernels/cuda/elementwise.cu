// Element-wise steps of a layer. Each output element depends on its own inputs only.

// Embedding rows from the f32 table (dequantized once at load, as the CPU's):
// out[r] = table[ids[r]] * scale. Grid (rows), block (256).
extern "C" __global__ void embed_rows(
    const float* __restrict__ table, const int* __restrict__ ids, float* __restrict__ out,
    int dim, float scale) {
    const float* src = table + (long)ids[blockIdx.x] * dim;
    float* dst = out + (long)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i] * scale;
}

// Rows picked from x: out[r] = x[idx[r]] (the rows that get logits). Grid (rows), block 256.
extern "C" __global__ void gather_rows(
    const float* __restrict__ x, const int* __restrict__ idx, float* __restrict__ out,
    int dim) {
    const float* src = x + (long)idx[blockIdx.x] * dim;
    float* dst = out + (long)blockIdx.x * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// x += y (the residual stream). Grid-stride over n.
extern "C" __global__ void add_in_place(float* x, const float* __restrict__ y, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        x[i] += y[i];
}

// Rows of `bias` added to every row of x ([rows, dim]): Qwen 2's Q/K/V biases.
extern "C" __global__ void add_bias(float* x, const float* __restrict__ bias, int dim, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        x[i] += bias[i % dim];
}

// GELU's tanh approximation as ggml's CPU backend applies it in GEGLU (Gemma), and as the
// CPU backend does (kernels/src/gelu.rs): the input rounded to f16, gelu of that rounded to
// f16 (ggml's table), and the bounds ±10 taken as 0 and x.
__device__ __forceinline__ float gelu_table(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float h = half_to_float(float_to_half(x));
    const float g = 0.5f * h * (1.0f + tanhf(0.7978846f * h * (1.0f + 0.044715f * h * h)));
    return half_to_float(float_to_half(g));
}

// A gated unit over fused rows ([rows, 2 * ffn]: gate, then up): h = act(gate) * up, with
// act SiLU (Llama, Qwen; `gelu` 0) or the f16-table GELU (Gemma; `gelu` 1). expf and tanhf,
// not the fast-math intrinsics: those would drift further from the CPU.
extern "C" __global__ void gated(const float* __restrict__ gu, float* __restrict__ h, int ffn,
                                 long n, int gelu) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        const long r = i / ffn;
        const int j = (int)(i % ffn);
        const float g = gu[r * 2 * ffn + j];
        const float u = gu[r * 2 * ffn + ffn + j];
        const float a = gelu ? gelu_table(g) : g / (1.0f + expf(-g));
        h[i] = a * u;
    }
}
