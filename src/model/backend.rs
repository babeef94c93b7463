//! The device seam: what the engine, generation and the tools need from the target model, and
//! nothing more. A backend owns the weights and every sequence's KV cache in whatever memory
//! its device uses; callers name sequences by [`SeqId`] and get logits and hidden states back
//! as host rows ([`BatchOutput`]). Nothing outside a backend holds a slice of its cache or
//! activations, so a backend may keep them in device memory.
//!
//! Contract, whatever the device:
//! - every row is computed the same way whatever else is in the batch (a verify row equals
//!   the same token decoded alone), so greedy speculative output equals plain greedy output;
//! - a call that fails validation changes nothing;
//! - `truncate` and `keep_rows` leave a cache exactly as if the dropped tokens were never
//!   appended.

use half::f16;
use specgate_strategies::TokenId;

use super::{BatchItem, BatchOutput, ForwardOptions, LogitRows, ModelConfig, ModelError, SeqId};
use crate::prefix::BlockId;

/// One layer of one sequence's cache copied to the host: `[len, kv_width]` keys and values.
#[derive(Debug, Clone, PartialEq)]
pub struct KvLayer {
    pub len: usize,
    pub keys: Vec<f16>,
    pub values: Vec<f16>,
}

/// The target's forward on one device, with the KV caches of its live sequences.
pub trait TargetBackend: Send {
    /// The model's hyper-parameters (read from its file).
    fn config(&self) -> &ModelConfig;

    /// The device in words, for logs and `/v1/models` (e.g. `cpu`).
    fn device(&self) -> String;

    /// Start an empty sequence.
    fn new_sequence(&mut self) -> SeqId;

    /// Tokens in a sequence's cache (None: no such sequence).
    fn seq_len(&self, seq: SeqId) -> Option<usize>;

    /// Append each item's tokens to its sequence in one pass and return the rows asked for:
    /// logits per [`LogitRows`], hidden states when `opts.hidden`, only the first
    /// `opts.exit_layer` layers when set (early exit). Item i owns rows `spans[i]`.
    fn forward(
        &mut self,
        items: &[BatchItem<'_>],
        opts: ForwardOptions,
    ) -> Result<BatchOutput, ModelError>;

    /// Roll a sequence back to `len` tokens (rejected drafts leave the cache).
    fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), ModelError>;

    /// After a tree pass appended at `base`: keep only the rows at offsets `keep`
    /// (increasing), moved into consecutive positions from `base`.
    fn keep_rows(&mut self, seq: SeqId, base: usize, keep: &[usize]) -> Result<(), ModelError>;

    /// Free a sequence's cache (a no-op for an unknown sequence).
    fn release(&mut self, seq: SeqId);

    /// Sequences with a cache.
    fn live_sequences(&self) -> usize;

    /// Bytes held by all KV caches (the memory budget's gauge).
    fn kv_bytes(&self) -> usize;

    /// Where the caches live in a pool of fixed size (a GPU's): the KV bytes `sequences`
    /// sequences can be promised in it, its rounding to whole blocks allowed for. None: the
    /// caches grow in host memory as needed (the CPU).
    fn kv_capacity_bytes(&self, _sequences: usize) -> Option<usize> {
        None
    }

    /// A copy of one layer of a sequence's cache, for tests and diagnostics (never on the
    /// hot path: a device backend copies it to the host).
    fn kv_layer(&self, seq: SeqId, layer: usize) -> Option<KvLayer>;

    /// Whether this backend keeps prefix-cache blocks ([`Self::store_block`],
    /// [`Self::new_sequence_from`]); the engine caches nothing where it does not.
    fn keeps_blocks(&self) -> bool {
        false
    }

    /// Keep positions `first..first + len` of `seq`'s cache as block `id`: from now on the
    /// block is read only, whatever the sequence does next (truncate, keep_rows, release).
    fn store_block(
        &mut self,
        _seq: SeqId,
        _id: BlockId,
        _first: usize,
        _len: usize,
    ) -> Result<(), ModelError> {
        Err(ModelError::Unsupported(format!(
            "{} keeps no prefix-cache blocks",
            self.device()
        )))
    }

    /// Start a sequence whose cache begins with these blocks' keys and values, in order.
    fn new_sequence_from(&mut self, _blocks: &[BlockId]) -> Result<SeqId, ModelError> {
        Err(ModelError::Unsupported(format!(
            "{} keeps no prefix-cache blocks",
            self.device()
        )))
    }

    /// Forget stored blocks (unknown ones are ignored).
    fn drop_blocks(&mut self, _ids: &[BlockId]) {}

    /// Bytes held by stored blocks.
    fn block_bytes(&self) -> usize {
        0
    }

    /// Where the caches live in a pool of fixed size: its bytes free now (cached blocks no
    /// sequence holds count as used: the engine evicts them when admission needs the room).
    /// None: host memory that grows as needed.
    fn kv_free_bytes(&self) -> Option<usize> {
        None
    }

    /// Single-sequence convenience: append `tokens` and return logits per `rows`.
    fn forward_one(
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

/// A boxed backend is a backend (the engine and the tools hold the target as one).
impl<B: TargetBackend + ?Sized> TargetBackend for Box<B> {
    fn config(&self) -> &ModelConfig {
        (**self).config()
    }

    fn device(&self) -> String {
        (**self).device()
    }

    fn new_sequence(&mut self) -> SeqId {
        (**self).new_sequence()
    }

    fn seq_len(&self, seq: SeqId) -> Option<usize> {
        (**self).seq_len(seq)
    }

    fn forward(
        &mut self,
        items: &[BatchItem<'_>],
        opts: ForwardOptions,
    ) -> Result<BatchOutput, ModelError> {
        (**self).forward(items, opts)
    }

    fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), ModelError> {
        (**self).truncate(seq, len)
    }

    fn keep_rows(&mut self, seq: SeqId, base: usize, keep: &[usize]) -> Result<(), ModelError> {
        (**self).keep_rows(seq, base, keep)
    }

    fn release(&mut self, seq: SeqId) {
        (**self).release(seq)
    }

    fn live_sequences(&self) -> usize {
        (**self).live_sequences()
    }

    fn kv_bytes(&self) -> usize {
        (**self).kv_bytes()
    }

    fn kv_capacity_bytes(&self, sequences: usize) -> Option<usize> {
        (**self).kv_capacity_bytes(sequences)
    }

    fn kv_layer(&self, seq: SeqId, layer: usize) -> Option<KvLayer> {
        (**self).kv_layer(seq, layer)
    }

    fn keeps_blocks(&self) -> bool {
        (**self).keeps_blocks()
    }

    fn store_block(
        &mut self,
        seq: SeqId,
        id: BlockId,
        first: usize,
        len: usize,
    ) -> Result<(), ModelError> {
        (**self).store_block(seq, id, first, len)
    }

    fn new_sequence_from(&mut self, blocks: &[BlockId]) -> Result<SeqId, ModelError> {
        (**self).new_sequence_from(blocks)
    }

    fn drop_blocks(&mut self, ids: &[BlockId]) {
        (**self).drop_blocks(ids)
    }

    fn block_bytes(&self) -> usize {
        (**self).block_bytes()
    }

    fn kv_free_bytes(&self) -> Option<usize> {
        (**self).kv_free_bytes()
    }
}
