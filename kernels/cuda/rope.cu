// Rotary position embedding in place, from the CPU's cos/sin tables ([positions, pairs],
// uploaded once), so both devices rotate by the same angles. `neox` pairs value i with
// i + pairs (Qwen, Gemma); otherwise adjacent values (Llama's GGUF layout).
//
// x: [rows, row_stride]; `heads` heads of head_dim from column `offset` (Q, then K).
// Grid (rows, heads), block (pairs).
extern "C" __global__ void rope(
    float* x, const int* __restrict__ pos,
    const float* __restrict__ cos_table, const float* __restrict__ sin_table,
    int row_stride, int offset, int head_dim, int pairs, int neox) {
    const int i = threadIdx.x;
    const long p = (long)pos[blockIdx.x] * pairs + i;
    const float c = cos_table[p];
    const float s = sin_table[p];
    float* h = x + (long)blockIdx.x * row_stride + offset + blockIdx.y * head_dim;
    const int ia = neox ? i : 2 * i;
    const int ib = neox ? i + pairs : 2 * i + 1;
    const float a = h[ia];
    const float b = h[ib];
    h[ia] = a * c - b * s;
    h[ib] = a * s + b * c;
}
