// Attention of each query row over its sequence's KV cache, kept in device memory in blocks
// of KV_BLOCK tokens ([KV_BLOCK, kv_width] f16 keys and values per block; a per-sequence
// table of block ids), so a sequence grows and rolls back without copying.
//
// One warp per (row, head); lane l holds elements l, l + 32, … of the head (head_dim ≤ 256).
// Keys are visited in cache order with a running max and sum (online softmax): a row's result
// depends only on its own query and keys, whatever else the launch carries.
//
// Which keys a row sees (per-row info, 6 ints): keys [0, base) were cached before this pass
// and are all visible (within the sliding window, when the layer has one); keys
// [base, limit) came with this pass: with mask < 0 (causal) those up to self_index (and within
// the window), else key base + j where bit j of the row's mask words (masks + mask: 32 keys a
// word) is set — a draft tree's ancestors and the node itself, any number of nodes.
//
// Grid (rows, n_heads), block 32.

#define KV_BLOCK 16
#define MAX_HEAD_DIM 256
#define PER_LANE (MAX_HEAD_DIM / WARP)

// Row info layout.
#define RI_TABLE 0      // offset of the row's sequence's block table in `tables`
#define RI_BASE 1
#define RI_LIMIT 2
#define RI_SELF 3
#define RI_POS 4
#define RI_MASK 5
#define RI_INTS 6

// Element offset of cache index `key` in a layer's pool (through the sequence's blocks).
__device__ __forceinline__ long kv_at(const int* table, int key, int kv_width) {
    return ((long)table[key / KV_BLOCK] * KV_BLOCK + key % KV_BLOCK) * kv_width;
}

// Whether a row sees cache index `key` (see the row info above). Uniform across a warp.
__device__ __forceinline__ bool visible_key(int key, int base, int self, int pos, int mask,
                                            const u32* masks, int window) {
    const bool in_window = window <= 0 || pos - key < window;
    if (key < base) return in_window;
    if (mask < 0) return key <= self && in_window;
    const int j = key - base;
    return (masks[mask + j / 32] >> (j % 32)) & 1u;
}

// q · k for one key, summed over the warp in the fixed butterfly.
__device__ __forceinline__ float key_score(const float* qv, const u16* k_pool, const int* table,
                                           int key, int kv_width, int kv_head, int head_dim,
                                           int lane) {
    const long at = kv_at(table, key, kv_width) + kv_head * head_dim;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        const int i = lane + e * WARP;
        if (i < head_dim) dot += qv[e] * half_to_float(k_pool[at + i]);
    }
    return warp_sum(dot);
}

extern "C" __global__ void attention(
    const float* __restrict__ q,        // [rows, q_stride]: heads of head_dim from column 0
    const u16* __restrict__ k_pool,     // [blocks, KV_BLOCK, kv_width] f16
    const u16* __restrict__ v_pool,
    const int* __restrict__ tables,     // block ids, per sequence
    const int* __restrict__ info,       // [rows, RI_INTS]
    const u32* __restrict__ masks,      // tree rows' visibility words
    float* __restrict__ out,            // [rows, n_heads * head_dim]
    int q_stride, int head_dim, int n_heads, int n_kv_heads, float scale, int window) {
    const int row = blockIdx.x;
    const int head = blockIdx.y;
    const int lane = threadIdx.x;
    const int* ri = info + (long)row * RI_INTS;
    const int* table = tables + ri[RI_TABLE];
    const int base = ri[RI_BASE], limit = ri[RI_LIMIT], self = ri[RI_SELF], pos = ri[RI_POS];
    const int mask = ri[RI_MASK];
    const int kv_width = n_kv_heads * head_dim;
    const int kv_head = head / (n_heads / n_kv_heads);
    const float* qh = q + (long)row * q_stride + head * head_dim;

    // As the CPU: the query rounded to f16, scores scaled, then softmax weights rounded to
    // f16 before they weigh the values. Pass 1 finds the max and the sum of exponentials
    // (online, the sum in double); pass 2 weighs the values.
    float qv[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        const int i = lane + e * WARP;
        qv[e] = i < head_dim ? half_to_float(float_to_half(qh[i])) : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY;
    double l = 0.0;
    for (int key = 0; key < limit; key++) {
        if (!visible_key(key, base, self, pos, mask, masks, window)) continue;
        const float s = key_score(qv, k_pool, table, key, kv_width, kv_head, head_dim, lane) * scale;
        if (s > m) {
            l = l * exp((double)(m - s));
            m = s;
        }
        l += exp((double)(s - m));
    }
    const float inv = l > 0.0 ? (float)(1.0 / l) : 0.0f;
    for (int key = 0; key < limit; key++) {
        if (!visible_key(key, base, self, pos, mask, masks, window)) continue;
        const float s = key_score(qv, k_pool, table, key, kv_width, kv_head, head_dim, lane) * scale;
        const float p = half_to_float(float_to_half(expf(s - m) * inv));
        const long at = kv_at(table, key, kv_width) + kv_head * head_dim;
#pragma unroll
        for (int e = 0; e < PER_LANE; e++) {
            const int i = lane + e * WARP;
            if (i < head_dim) acc[e] += p * half_to_float(v_pool[at + i]);
        }
    }
    float* oh = out + (long)row * n_heads * head_dim + head * head_dim;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        const int i = lane + e * WARP;
        if (i < head_dim) oh[i] = acc[e];
    }
}

// Append rows' K and V (f32, inside fused Q/K/V rows) to their sequences' caches as f16:
// row r goes to cache index slot[r] of the sequence whose table starts at table_of[r].
// Grid (rows), block (256).
extern "C" __global__ void kv_append(
    const float* __restrict__ fused, int stride, int k_offset, int v_offset, int kv_width,
    const int* __restrict__ tables, const int* __restrict__ table_of,
    const int* __restrict__ slot, u16* __restrict__ k_pool, u16* __restrict__ v_pool) {
    const int r = blockIdx.x;
    const int s = slot[r];
    const int* table = tables + table_of[r];
    const long at = ((long)table[s / KV_BLOCK] * KV_BLOCK + s % KV_BLOCK) * kv_width;
    const float* src = fused + (long)r * stride;
    for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
        k_pool[at + i] = float_to_half(src[k_offset + i]);
        v_pool[at + i] = float_to_half(src[v_offset + i]);
    }
}

// A verified tree's accepted path kept: in every layer, cache row base + keep[i] moves to
// base + i where that layer holds it (lens: each layer's length; an early-exit pass fills
// only the first layers, and the CPU moves only rows a layer holds). keep increases, so keep[i] >= i and a row is read before any step overwrites it
// when the steps run in order (one block per layer, a barrier between rows).
// Grid (layers), block (256).
extern "C" __global__ void kv_keep(
    u16* k_pool, u16* v_pool, long layer_stride, const int* __restrict__ table,
    const int* __restrict__ lens, const int* __restrict__ keep, int n_keep, int base,
    int kv_width) {
    u16* kl = k_pool + (long)blockIdx.x * layer_stride;
    u16* vl = v_pool + (long)blockIdx.x * layer_stride;
    for (int i = 0; i < n_keep; i++) {
        const int from = base + keep[i], to = base + i;
        if (from != to && from < lens[blockIdx.x]) {
            const long a = ((long)table[from / KV_BLOCK] * KV_BLOCK + from % KV_BLOCK) * kv_width;
            const long b = ((long)table[to / KV_BLOCK] * KV_BLOCK + to % KV_BLOCK) * kv_width;
            for (int j = threadIdx.x; j < kv_width; j += blockDim.x) {
                kl[b + j] = kl[a + j];
                vl[b + j] = vl[a + j];
            }
        }
        __syncthreads();
    }
}
