//! Compute kernels for specgate beyond candle's: CPU reference versions always, SIMD and CUDA
//! versions where the machine has them. The engine's linear layers call into this crate.
