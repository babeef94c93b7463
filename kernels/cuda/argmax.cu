// Greedy rows on the device: the index of each row's largest logit (the lowest index among
// equal maxima, as the CPU sampler breaks ties), so only 4 bytes a row come back.
//
// One block of ARGMAX_THREADS per row; thread t scans t, t + ARGMAX_THREADS, … then the
// block reduces in a fixed tree. Grid (rows), block (ARGMAX_THREADS).

#define ARGMAX_THREADS 256

extern "C" __global__ void argmax_rows(const float* __restrict__ logits, int* __restrict__ out,
                                       int vocab) {
    __shared__ float best_v[ARGMAX_THREADS];
    __shared__ int best_i[ARGMAX_THREADS];
    const float* row = logits + (long)blockIdx.x * vocab;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += ARGMAX_THREADS) {
        const float v = row[i];
        if (v > bv) { bv = v; bi = i; }  // i grows: the first maximum stays
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int half = ARGMAX_THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) {
            const float ov = best_v[threadIdx.x + half];
            const int oi = best_i[threadIdx.x + half];
            if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = best_i[0];
}
