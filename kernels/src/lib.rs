//! Compute kernels for specgate beyond candle's.
//!
//! `qmatmul`: the CPU quantized matrix multiply behind every linear layer of the engine. It
//! quantizes each activation row once to 8 bits exactly as ggml does (scale 127/amax, round
//! half to even, block sum in f32 then f16), sums integer products per block, and reads each
//! weight row once for all activation rows of a call (the k+1 rows of a verify pass).

pub mod attention;
mod gemm;
pub mod packed;
pub mod qmatmul;
pub mod quantize;

pub use qmatmul::{Isa, QuantFormat, QuantMatrix};
pub use quantize::{quantize_rows, Q8Batch};
