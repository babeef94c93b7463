// Shared by every kernel source (prepended by the loader; NVRTC sees one translation unit).
//
// The rule every kernel keeps: a row's result depends only on that row's inputs, in a
// reduction order fixed by the kernel's own constants, never by how many rows a launch
// carries. A verify row then equals the same token decoded alone, bit for bit, which is what
// keeps greedy speculative output equal to plain greedy output.

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;

#define WARP 32
#define INFINITY __int_as_float(0x7f800000)
#define FULL_MASK 0xffffffffu

// Warp sum in a fixed butterfly order: every lane ends with the same total.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// IEEE half to float without cuda_fp16.h (NVRTC needs no include path then).
__device__ __forceinline__ float half_to_float(u16 h) {
    float f;
    asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 float_to_half(float f) {
    u16 h;
    asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}

// Two bytes at an address aligned to 2 (GGUF blocks of 18 and 34 bytes are only that).
__device__ __forceinline__ u16 load_u16(const u8* p) {
    return *reinterpret_cast<const u16*>(p);
}

// Four bytes at an address aligned to 2, as one little-endian word.
__device__ __forceinline__ int load_i32_a2(const u8* p) {
    return (int)((u32)load_u16(p) | ((u32)load_u16(p + 2) << 16));
}
