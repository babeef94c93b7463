//! The CPU backend: our own llama forward over candle's quantized weights and the kernels of
//! `specgate-kernels`.
//!
//! Unlike candle-transformers' `quantized_llama` it keeps one KV cache per sequence, appends
//! any number of tokens at once, rolls caches back, runs ragged batches (linear layers over
//! all rows of all sequences at once, attention per sequence), returns logits for any rows,
//! the final hidden states, and can stop after the first L layers (early-exit drafting).

mod attention;
mod forward;
mod kv_cache;
mod linear;
mod rope;
mod rows;
mod weights;

use std::collections::HashMap;
use std::path::Path;

pub use kv_cache::KvCache;
pub use linear::{Linear, MatmulBackend, SUPPORTED_TYPES};
pub use rope::{layer_ropes, Rope, RopeSpec};
pub use rows::{first_rows, select_rows, QuantRows};

use super::{
    BatchItem, BatchOutput, ForwardOptions, GgufMetadata, KvLayer, LogitRows, ModelConfig,
    ModelError, SeqId, TargetBackend,
};
use weights::Weights;

/// A loaded llama model with the KV caches of its live sequences, on the CPU.
pub struct CpuModel {
    config: ModelConfig,
    weights: Weights,
    /// One rotary table per distinct (base, scale) the layers use, and each layer's.
    ropes: Vec<Rope>,
    rope_of_layer: Vec<usize>,
    caches: HashMap<SeqId, KvCache>,
    next_seq: u64,
    work: forward::Workspace,
}

impl CpuModel {
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
        let (ropes, rope_of_layer) =
            rope::layer_ropes(&config, loaded.weights.rope_freqs.as_deref());
        let model = Self {
            config,
            weights: loaded.weights,
            ropes,
            rope_of_layer,
            caches: HashMap::new(),
            next_seq: 0,
            work: forward::Workspace::default(),
        };
        Ok((model, loaded.content.metadata))
    }

    pub fn weight_dtype(&self) -> candle_core::quantized::GgmlDType {
        self.weights.dtype
    }

    /// A read-only view of one sequence's cache (this backend's own tests).
    pub fn cache(&self, seq: SeqId) -> Option<&KvCache> {
        self.caches.get(&seq)
    }

    fn cache_mut(&mut self, seq: SeqId) -> Result<&mut KvCache, ModelError> {
        self.caches
            .get_mut(&seq)
            .ok_or(ModelError::UnknownSequence(seq))
    }
}

impl TargetBackend for CpuModel {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn device(&self) -> String {
        "cpu".to_string()
    }

    fn new_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next_seq);
        self.next_seq += 1;
        let cache = KvCache::new(self.config.n_layers, self.config.kv_width());
        self.caches.insert(id, cache);
        id
    }

    fn seq_len(&self, seq: SeqId) -> Option<usize> {
        self.caches.get(&seq).map(KvCache::len)
    }

    fn forward(
        &mut self,
        items: &[BatchItem<'_>],
        opts: ForwardOptions,
    ) -> Result<BatchOutput, ModelError> {
        self.forward_batch(items, opts)
    }

    fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), ModelError> {
        self.cache_mut(seq)?.truncate(len);
        Ok(())
    }

    fn keep_rows(&mut self, seq: SeqId, base: usize, keep: &[usize]) -> Result<(), ModelError> {
        self.cache_mut(seq)?.keep(base, keep);
        Ok(())
    }

    fn release(&mut self, seq: SeqId) {
        self.caches.remove(&seq);
    }

    fn live_sequences(&self) -> usize {
        self.caches.len()
    }

    fn kv_bytes(&self) -> usize {
        self.caches.values().map(KvCache::bytes).sum()
    }

    fn kv_layer(&self, seq: SeqId, layer: usize) -> Option<KvLayer> {
        let cache = self.caches.get(&seq)?;
        if layer >= self.config.n_layers {
            return None;
        }
        let (keys, values) = cache.layer(layer);
        Some(KvLayer {
            len: cache.layer_len(layer),
            keys: keys.to_vec(),
            values: values.to_vec(),
        })
    }
}
