//! EAGLE-style drafting: one decoder layer that reads the target's final hidden states and
//! the tokens they produced, and drafts autoregressively over its own features (EAGLE-1/2,
//! arXiv 2401.15077, 2406.16858), keeping its own small cache of keys and values per
//! sequence. Greedy requests get a dynamic tree (the likeliest nodes by joint probability,
//! expanded level by level, EAGLE-2); sampled requests get a chain with its distribution q.

mod drafter;
mod layer;
mod weights;

pub use drafter::{EagleDrafter, EAGLE_EXPAND, EAGLE_MAX_DEPTH, EAGLE_TOP_N, EAGLE_WINDOW};
pub use layer::{EagleHead, KvRows, LayerOut, LayerRow};
pub use weights::{rms_norm, rope_angles, rope_in_place, EagleShape, EagleWeights};

#[cfg(test)]
mod tests;
