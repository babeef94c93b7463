//! The target model behind the device seam. The engine runs the target only through
//! [`TargetBackend`]: one ragged forward over many sequences' new tokens, each with a KV
//! cache the backend owns (allocate, truncate, keep tree rows, release). The types here are
//! the seam's vocabulary and hold no device memory: logits and hidden states come back as
//! host rows. [`cpu`] is our llama forward on candle's quantized weights and our kernels.
//!
//! Beside the target: its tokenizer and chat template (from the same GGUF), loading a model
//! file for generation, and fetching the default model.

pub mod arch;
pub mod backend;
pub mod batch;
pub mod chat_template;
pub mod config;
pub mod cpu;
pub mod cuda;
pub mod device;
pub mod fetch;
pub mod gguf;
pub mod loaded;
pub mod tokenizer;

use std::collections::HashMap;
use std::ops::Range;

pub use backend::{KvLayer, TargetBackend};
pub use config::ModelConfig;
pub use cpu::{first_rows, select_rows, CpuModel, Linear, MatmulBackend, QuantRows, Rope};
pub use device::DeviceChoice;
pub use gguf::{lm_head_tensor, read_header};
use specgate_strategies::TokenId;

/// GGUF key-value metadata.
pub type GgufMetadata = HashMap<String, candle_core::quantized::gguf_file::Value>;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{0}")]
    Io(String),
    #[error("malformed model file: {0}")]
    Format(String),
    #[error("malformed model metadata: {0}")]
    Metadata(String),
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("unknown sequence {0:?}")]
    UnknownSequence(SeqId),
    #[error("sequence {0:?} appears twice in one batch")]
    DuplicateSequence(SeqId),
    #[error("context overflow: {needed} positions needed, the model has {limit}")]
    ContextOverflow { needed: usize, limit: usize },
    #[error("token id {0} is outside the vocabulary")]
    BadToken(TokenId),
    #[error("invalid request to the engine: {0}")]
    Invalid(String),
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("device error: {0}")]
    Device(String),
}

/// A sequence whose KV cache the model holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

/// Which appended positions get logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    None,
    Last,
    All,
}

/// One sequence's part of a ragged batch: tokens appended at the end of its cache.
#[derive(Debug, Clone, Copy)]
pub struct BatchItem<'a> {
    pub seq: SeqId,
    pub tokens: &'a [TokenId],
    pub logits: LogitRows,
    /// A candidate tree: `tokens[1 + i]` hangs under `tokens[1 + parents[i]]` (None: under
    /// `tokens[0]`, the pending token). Rows then see only their ancestors, positions follow
    /// depth, and the caller keeps the accepted path with [`TargetBackend::keep_rows`].
    pub tree: Option<&'a [Option<usize>]>,
}

/// How deep a forward runs and what it returns beyond logits.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForwardOptions {
    /// Run only the first L layers, then the final norm and LM head.
    pub exit_layer: Option<usize>,
    /// Also return the final (normed) hidden state of every row that gets logits.
    pub hidden: bool,
}

/// The rows a ragged forward returns; item i owns rows `spans[i]`.
#[derive(Debug, Clone, Default)]
pub struct BatchOutput {
    pub vocab: usize,
    pub hidden_dim: usize,
    pub logits: Vec<f32>, // [rows, vocab]
    pub hidden: Vec<f32>, // [rows, hidden] when asked for, else empty
    pub spans: Vec<Range<usize>>,
}

impl BatchOutput {
    /// Logit rows of item `i`: [rows_i, vocab].
    pub fn item_logits(&self, i: usize) -> &[f32] {
        let r = &self.spans[i];
        &self.logits[r.start * self.vocab..r.end * self.vocab]
    }

    /// Row `j` of item `i`: [vocab].
    pub fn row(&self, i: usize, j: usize) -> &[f32] {
        &self.item_logits(i)[j * self.vocab..][..self.vocab]
    }

    /// Final hidden states of item `i`: [rows_i, hidden].
    pub fn item_hidden(&self, i: usize) -> &[f32] {
        let r = &self.spans[i];
        &self.hidden[r.start * self.hidden_dim..r.end * self.hidden_dim]
    }
}
