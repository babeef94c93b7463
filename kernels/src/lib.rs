//! Compute kernels for specgate beyond candle's.
//!
//! `qmatmul`: the CPU quantized matrix multiply behind every linear layer of the engine. It
//! quantizes each activation row once to 8 bits exactly as ggml does (scale 127/amax, round
//! half to even, block sum in f32 then f16), keeps the weights interleaved 16 output features
//! at a time (`packed`) so one integer dot instruction serves a whole group, and reads each
//! group once for all activation rows of a call (the k+1 rows of a verify pass).
//! `attention`: one query head over the f16 KV cache. Every path (AVX-512, AVX-VNNI, AVX2,
//! portable) gives the same bits, and a row's result never depends on the other rows of the
//! call, which is what keeps speculative output equal to plain decoding.
//! `pool`: the fork-join pool those steps run on, whose helpers spin between steps.
//! `vexp`: the exponential of softmax and SwiGLU as ggml vectorises it, the same bits on the
//! AVX2 and portable paths.

pub mod attention;
pub mod gelu;
mod gemm;
pub mod kquants;
pub mod packed;
pub mod pool;
pub mod q5_0;
pub mod qmatmul;
pub mod quantize;
pub mod vexp;

pub use qmatmul::{Isa, QuantFormat, QuantMatrix};

/// Whether the AVX2/FMA/F16C helpers (quantization, exponentials) run: wherever the matmul
/// runs AVX2 or better, so `SPECGATE_ISA=portable` turns them off too.
pub(crate) fn avx2() -> bool {
    Isa::detect() >= Isa::Avx2
}

/// Whether this CPU can run the AVX2/FMA/F16C helpers at all: the `*_with` functions take
/// the caller's choice of path but never run one the CPU lacks (they are safe to call).
pub(crate) fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    false
}
pub use quantize::{quantize_rows, Q8Batch};
