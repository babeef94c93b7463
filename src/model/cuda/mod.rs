//! The CUDA target behind the device seam (feature `cuda`): the same forward as the CPU's,
//! on a GPU, with every sequence's KV cache in device memory in fixed-size blocks.
//!
//! - [`kernels`]: the CUDA C sources (`kernels/cuda/`), compiled at start-up by NVRTC for the
//!   device's architecture (no toolkit at build time) and cached on disk;
//! - [`plan`]: host bookkeeping, pure and tested without a GPU (block pool, per-sequence
//!   blocks and lengths, a pass's per-row tables);
//! - `gpu`, `weights`, `forward`: the device side (feature `cuda`).
//!
//! Exactness: every kernel computes a row from that row's inputs in an order fixed by its
//! own constants, never by the launch's row count, so a verify row equals the same token
//! decoded alone, bit for bit.

pub mod kernels;
pub mod plan;

#[cfg(feature = "cuda")]
mod blocks;
#[cfg(feature = "cuda")]
mod forward;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod head;
#[cfg(feature = "cuda")]
mod matmul;
#[cfg(feature = "cuda")]
mod model;
#[cfg(feature = "cuda")]
pub mod weights;

#[cfg(feature = "cuda")]
pub use gpu::device_count;
#[cfg(feature = "cuda")]
pub use model::CudaModel;

/// Why the CUDA target cannot start; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("this specgate was built without CUDA (cargo build --release --features cuda)")]
    NotBuilt,
    #[error(
        "no CUDA driver found (libcuda.so.1 did not load): this machine has no NVIDIA driver; \
         use --device cpu"
    )]
    NoDriver,
    #[error("no CUDA device {0} (this machine has {1})")]
    NoDevice(usize, usize),
    #[error(transparent)]
    Kernels(#[from] kernels::KernelCompileError),
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error(
        "the GPU's KV cache is full ({blocks} blocks of {} tokens)",
        plan::KV_BLOCK
    )]
    KvFull { blocks: usize },
}
