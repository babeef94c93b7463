//! Drafting, verification and sampling for specgate: pure functions and types, with no actix,
//! HTTP, storage or global state. Time and randomness are passed in.

pub mod constraint;
pub mod corpus;
pub mod draft;
pub mod eagle;
pub mod fallback;
mod head_lm;
pub mod head_matrix;
pub mod heads;
pub mod kind;
pub mod medusa;
pub mod ngram;
pub mod penalties;
pub mod prediction;
pub mod recorder;
pub mod sampling;
pub mod stats;
pub mod suffix;
pub mod top_n;
pub mod tree;
pub mod verify;

/// A token id in the target model's vocabulary.
pub type TokenId = u32;

pub use constraint::{
    constrain_draft, mask_rows, ConstrainedRound, ConstraintError, TokenConstraint, TokenMask,
};
pub use corpus::CorpusIndex;
pub use draft::{Draft, DraftContext, DraftError, Drafter, NoDrafts, PlainDrafter, TrackRecord};
pub use fallback::{FallbackBudget, FallbackDrafter, SendDrafter};
pub use kind::{StrategyKind, UnknownStrategy};
pub use medusa::{LmHead, MedusaDrafter, MedusaHeads};
pub use ngram::{ngram_lookup, NgramDrafter};
pub use penalties::{Penalties, PenaltyError, TokenTally};
pub use prediction::{PredictionDrafter, PredictionTokens};
pub use recorder::SuffixRecorder;
pub use sampling::{argmax, sample_from, SamplingError, SamplingParams};
pub use stats::{expected_tokens_per_pass, judged_positions, predicted_speedup, SpecStats};
pub use suffix::{
    recall_window, SharedCorpus, SharedSuffixCache, SuffixCache, SuffixDrafter, SuffixIndex,
    SuffixStep, RECALL_PROMPT_TAIL,
};
pub use tree::{build_tree, select_tree, verify_tree_greedy, DraftTree, PoolNode, TreeVerdict};
pub use verify::{accept_or_recover, verify, verify_greedy, Verdict};
