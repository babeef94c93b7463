//! The prefix cache's bookkeeping, pure: which blocks of KV stay after their sequence ends,
//! whose they are ([`CacheScope`]), how a prompt finds them again and which leave first
//! ([`PrefixIndex`]). The backends hold the bytes (`TargetBackend::store_block`); the engine
//! asks the index what a prompt hits and tells it what finished.

mod index;
mod scope;

pub use index::{BlockId, Hit, IndexStats, PrefixIndex, Registered};
pub use scope::{CacheScope, ScopeSecret};

/// Tokens per cached block (vLLM's default; the CUDA pool's block).
pub const BLOCK_TOKENS: usize = 16;
