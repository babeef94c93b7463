//! Drafting, verification and sampling for specgate: pure functions and types, with no actix,
//! HTTP, storage or global state. Time and randomness are passed in.

pub mod sampling;

/// A token id in the target model's vocabulary.
pub type TokenId = u32;

pub use sampling::{argmax, sample_from, SamplingError, SamplingParams};
