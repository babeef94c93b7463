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
use crate::prefix::BlockId;
use weights::Weights;

/// A loaded llama model with the KV caches of its live sequences, on the CPU.
pub struct CpuModel {
    config: ModelConfig,
    weights: Weights,
    /// One rotary table per distinct (base, scale) the layers use, and each layer's.
    ropes: Vec<Rope>,
    rope_of_layer: Vec<usize>,
    caches: HashMap<SeqId, KvCache>,
    /// Prefix-cache blocks: copies, so no sequence ever writes one.
    blocks: HashMap<BlockId, KvCache>,
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
            blocks: HashMap::new(),
            next_seq: 0,
            work: forward::Workspace::default(),
        };
        Ok((model, loaded.content.metadata))
    }

    pub fn weight_dtype(&self) -> candle_core::quantized::GgmlDType {
        self.weights.dtype
    }

    /// A read-only view of a stored prefix-cache block (this backend's own tests).
    pub fn block(&self, id: BlockId) -> Option<&KvCache> {
        self.blocks.get(&id)
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

    // Blocks are copies: a hit copies them into the new sequence's contiguous cache, which the
    // attention kernels read in place. A prompt's worth of copies costs milliseconds where its
    // prefill costs hundreds (docs/engine.md).
    fn keeps_blocks(&self) -> bool {
        true
    }

    fn store_block(
        &mut self,
        seq: SeqId,
        id: BlockId,
        first: usize,
        len: usize,
    ) -> Result<(), ModelError> {
        let cache = self
            .caches
            .get(&seq)
            .ok_or(ModelError::UnknownSequence(seq))?;
        let block = cache.copy_range(first, len).ok_or_else(|| {
            ModelError::Invalid(format!(
                "block {first}..{} is past the cache of {seq:?} ({} tokens)",
                first + len,
                cache.len()
            ))
        })?;
        self.blocks.insert(id, block);
        Ok(())
    }

    fn new_sequence_from(&mut self, blocks: &[BlockId]) -> Result<SeqId, ModelError> {
        let mut cache = KvCache::new(self.config.n_layers, self.config.kv_width());
        let tokens: usize = blocks
            .iter()
            .filter_map(|id| self.blocks.get(id))
            .map(KvCache::len)
            .sum();
        cache.reserve(tokens);
        for id in blocks {
            let block = self
                .blocks
                .get(id)
                .ok_or_else(|| ModelError::Invalid(format!("no cached block {id:?}")))?;
            cache.extend_from(block);
        }
        let seq = self.new_sequence();
        self.caches.insert(seq, cache);
        Ok(seq)
    }

    fn drop_blocks(&mut self, ids: &[BlockId]) {
        for id in ids {
            self.blocks.remove(id);
        }
    }

    fn block_bytes(&self) -> usize {
        self.blocks.values().map(KvCache::bytes).sum()
    }
}
