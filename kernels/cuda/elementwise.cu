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

// A gated unit over fused rows ([rows, 2 * ffn]: gate, then up): h = act(gate) * up, with
// act SiLU (Llama, Qwen; `gelu` 0) or, for Gemma (`gelu` 1), GELU as ggml's CPU backend and
// ours apply it in GEGLU (kernels/src/gelu.rs): the input rounded to f16 and looked up in the
// CPU's own table of gelu(x) in f16 (uploaded at load), the bounds ±10 taken as 0 and x.
// expf, not the fast-math intrinsic: that would drift further from the CPU.
extern "C" __global__ void gated(const float* __restrict__ gu, float* __restrict__ h, int ffn,
                                 long n, int gelu, const u16* __restrict__ gelu_table) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        const long r = i / ffn;
        const int j = (int)(i % ffn);
        const float g = gu[r * 2 * ffn + j];
        const float u = gu[r * 2 * ffn + ffn + j];
        float a;
        if (!gelu) {
            a = g / (1.0f + expf(-g));
        } else if (g <= -10.0f) {
            a = 0.0f;
        } else if (g >= 10.0f) {
            a = g;
        } else {
            a = half_to_float(gelu_table[float_to_half(g)]);
        }
        h[i] = a * u;
    }
}
