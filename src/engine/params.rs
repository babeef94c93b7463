//! What a caller asks of one generation, and what can go wrong running it: shared by the
//! engine's sequences and the single-sequence `generate` loop.

use specgate_strategies::{Penalties, SamplingParams};

use crate::model::tokenizer::TokenizerError;
use crate::model::ModelError;

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("prompt of {prompt} tokens plus max_tokens {max} exceeds the context of {context}")]
    TooLong {
        prompt: usize,
        max: usize,
        context: usize,
    },
    #[error("invalid penalties: {0}")]
    Penalties(#[from] specgate_strategies::PenaltyError),
    #[error("invalid sampling parameters: {0}")]
    Sampling(#[from] specgate_strategies::SamplingError),
    #[error(transparent)]
    Constraint(#[from] specgate_strategies::ConstraintError),
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub seed: u64,
    pub stop: Vec<String>,
    /// Most drafts per round (k); 0 is plain decoding whatever the drafter.
    pub max_draft_tokens: usize,
    /// Choose k each round (up to `max_draft_tokens`) from the request's measured α and
    /// costs, plain decoding included, instead of always drafting `max_draft_tokens`.
    pub adaptive_k: bool,
    /// A fixed price for a verify row, as a share of a plain pass, instead of the one fitted
    /// from this sequence's passes (0: draft as if rows were free, as on an idle GPU). Read by
    /// `generate` only: the engine prices rows from its own steps and load.
    pub row_cost: Option<f32>,
    /// Penalties and biases on the target's rows (none by default).
    pub penalties: Penalties,
}

impl GenerateParams {
    /// Greedy decoding of at most `max_tokens` with at most `k` drafts per round (0: plain
    /// decoding), no stop strings, rows priced from the sequence's own passes.
    pub fn greedy(max_tokens: usize, k: usize) -> Self {
        Self {
            max_tokens,
            sampling: SamplingParams::greedy(),
            seed: 0,
            stop: vec![],
            max_draft_tokens: k,
            adaptive_k: false,
            row_cost: None,
            penalties: Penalties::none(),
        }
    }
}
