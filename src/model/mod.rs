//! The target engine: our own llama forward over candle's quantized weights.
//!
//! Unlike candle-transformers' `quantized_llama` it keeps one KV cache per sequence, appends
//! any number of tokens at once, rolls caches back, runs ragged batches (linear layers over
//! all rows of all sequences at once, attention per sequence), returns logits for any rows,
//! the final hidden states, and can stop after the first L layers (early-exit drafting).

mod attention;
pub mod config;
mod kv_cache;
mod linear;
mod rope;
mod weights;

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

pub use config::ModelConfig;
pub use kv_cache::KvCache;
pub use linear::Linear;
pub use linear::MatmulBackend;
use specgate_strategies::TokenId;
pub use weights::{first_rows, lm_head_tensor, read_header, select_rows, QuantRows};

/// GGUF key-value metadata.
pub type GgufMetadata = HashMap<String, candle_core::quantized::gguf_file::Value>;

use attention::{causal_attention, tree_attention, AttnShape, QueryRows};
pub use rope::Rope;
use weights::Weights;

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
    /// depth, and the caller keeps the accepted path with [`Model::keep_rows`].
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

/// A loaded llama model with the KV caches of its live sequences.
pub struct Model {
    config: ModelConfig,
    weights: Weights,
    rope: Rope,
    caches: HashMap<SeqId, KvCache>,
    next_seq: u64,
    work: forward::Workspace,
}

impl Model {
    /// Load a llama-architecture GGUF (Q4_0, Q4_1, Q8_0, K-quants, F16, F32 weights).
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        Ok(Self::load_with_metadata(path, MatmulBackend::default())?.0)
    }

    /// Load with a chosen matmul backend, and also hand back the GGUF metadata (the
    /// tokenizer is built from it).
    pub fn load_with_metadata(
        path: &Path,
        backend: MatmulBackend,
    ) -> Result<(Self, GgufMetadata), ModelError> {
        Self::load_layers(path, backend, None)
    }

    /// Load only the first `max_layers` blocks (all when `None`), with the final norm and LM
    /// head: the early-exit draft model.
    pub fn load_layers(
        path: &Path,
        backend: MatmulBackend,
        max_layers: Option<usize>,
    ) -> Result<(Self, GgufMetadata), ModelError> {
        let loaded = weights::load(path, backend, max_layers)?;
        let config = loaded.config;
        let rope = Rope::new(config.rope_dim, config.rope_base, config.context_length);
        let model = Self {
            config,
            weights: loaded.weights,
            rope,
            caches: HashMap::new(),
            next_seq: 0,
            work: forward::Workspace::default(),
        };
        Ok((model, loaded.content.metadata))
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn weight_dtype(&self) -> candle_core::quantized::GgmlDType {
        self.weights.dtype
    }

    /// Start an empty sequence.
    pub fn new_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        let cache = KvCache::new(self.config.n_layers, self.config.kv_width());
        self.caches.insert(id, cache);
        id
    }

    /// Tokens in a sequence's cache.
    pub fn seq_len(&self, seq: SeqId) -> Option<usize> {
        self.caches.get(&seq).map(KvCache::len)
    }

    /// Roll a sequence back to `len` tokens (rejected drafts leave the cache).
    /// After a tree pass appended at `base`: keep only the rows at offsets `keep` (increasing),
    /// moved into consecutive positions from `base`.
    pub fn keep_rows(&mut self, seq: SeqId, base: usize, keep: &[usize]) -> Result<(), ModelError> {
        let cache = self
            .caches
            .get_mut(&seq)
            .ok_or(ModelError::UnknownSequence(seq))?;
        cache.keep(base, keep);
        Ok(())
    }

    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), ModelError> {
        let cache = self
            .caches
            .get_mut(&seq)
            .ok_or(ModelError::UnknownSequence(seq))?;
        cache.truncate(len);
        Ok(())
    }

    /// Free a sequence's cache.
    pub fn release(&mut self, seq: SeqId) {
        self.caches.remove(&seq);
    }

    pub fn live_sequences(&self) -> usize {
        self.caches.len()
    }

    /// Bytes held by all KV caches.
    pub fn kv_bytes(&self) -> usize {
        self.caches.values().map(KvCache::bytes).sum()
    }

    /// A read-only view of one sequence's cache (tests compare caches).
    pub fn cache(&self, seq: SeqId) -> Option<&KvCache> {
        self.caches.get(&seq)
    }

    /// Single-sequence convenience: append `tokens` and return logits per `rows`.
    pub fn forward_one(
        &mut self,
        seq: SeqId,
        tokens: &[TokenId],
        rows: LogitRows,
    ) -> Result<BatchOutput, ModelError> {
        let item = BatchItem {
            tree: None,
            seq,
            tokens,
            logits: rows,
        };
        self.forward(&[item], ForwardOptions::default())
    }
}

mod forward;
