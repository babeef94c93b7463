//! The engine's side of the prefix cache: ask the index what a prompt hits and start the
//! sequence from those blocks, tell it what a sequence committed, and keep the backend's
//! stored bytes in step with the index's decisions. The rules live in [`crate::prefix`].

use specgate_strategies::TokenId;

use super::RouteLabels;
use crate::model::{SeqId, TargetBackend};
use crate::prefix::{BlockId, CacheScope, PrefixIndex, BLOCK_TOKENS};

/// The index, sized from the configured bytes and the target's KV per token.
pub(super) struct PrefixCache {
    index: PrefixIndex,
}

/// A sequence's claim on cached blocks: the chain it started from or registered, kept from
/// eviction until it ends.
#[derive(Debug, Default)]
pub(super) struct Lease {
    pub scope: Option<CacheScope>,
    pub blocks: Vec<BlockId>,
}

impl PrefixCache {
    /// None where it is off (less than one block's bytes) or the backend keeps no blocks.
    pub fn new(model: &dyn TargetBackend, bytes: usize, scope_share: f64) -> Option<Self> {
        let block_bytes = BLOCK_TOKENS * model.config().kv_bytes_per_token();
        let capacity = bytes / block_bytes.max(1);
        if capacity == 0 {
            return None;
        }
        if !model.keeps_blocks() {
            eprintln!(
                "specgate: the prefix cache is off: {} keeps no cached blocks",
                model.device()
            );
            return None;
        }
        Some(Self {
            index: PrefixIndex::new(BLOCK_TOKENS, capacity, scope_share),
        })
    }

    /// A new sequence for `prompt`, started from its cached blocks where `scope` has any:
    /// the sequence, the tokens already in its cache, and its lease.
    pub fn start(
        &mut self,
        model: &mut dyn TargetBackend,
        scope: Option<CacheScope>,
        prompt: &[TokenId],
        route: &RouteLabels,
    ) -> (SeqId, usize, Lease) {
        let Some(scope) = scope else {
            return (model.new_sequence(), 0, Lease::default());
        };
        let hit = self.index.lookup(scope, prompt);
        let labels = [
            ("tenant", route.tenant.clone()),
            ("class", route.class.name().to_string()),
        ];
        let mut lease = Lease {
            scope: Some(scope),
            blocks: Vec::new(),
        };
        // The cache may cost a request its hit, never its answer.
        let (seq, cached) = match hit.blocks.is_empty() {
            true => (model.new_sequence(), 0),
            false => match model.new_sequence_from(&hit.blocks) {
                Ok(seq) => {
                    self.index.acquire(&hit.blocks);
                    lease.blocks = hit.blocks;
                    (seq, hit.tokens)
                }
                Err(e) => {
                    eprintln!("specgate: starting from cached blocks failed, prefilling: {e}");
                    (model.new_sequence(), 0)
                }
            },
        };
        metrics::counter!("specgate_prefix_cache_queries_total", &labels)
            .increment(prompt.len() as u64);
        metrics::counter!("specgate_prefix_cache_hits_total", &labels).increment(cached as u64);
        (seq, cached, lease)
    }

    /// Cache the full blocks of `tokens`, the committed tokens whose KV `seq` holds (its
    /// cache may hold fewer: only those are taken). With `hold`, the lease becomes the
    /// registered chain (the sequence runs on), which then stops where another sequence
    /// cached the same tokens meanwhile (the sequence holds its own copies, not those: the
    /// rest is registered when it ends); otherwise the lease is let go.
    pub fn register(
        &mut self,
        model: &mut dyn TargetBackend,
        seq: SeqId,
        tokens: &[TokenId],
        lease: &mut Lease,
        hold: bool,
    ) {
        let Some(scope) = lease.scope else {
            return;
        };
        let cached = model.seq_len(seq).unwrap_or(0).min(tokens.len());
        let own_from = hold.then_some(lease.blocks.len());
        let mut done = self.index.register(scope, &tokens[..cached], own_from);
        model.drop_blocks(&done.evicted);
        metrics::counter!("specgate_prefix_cache_evictions_total")
            .increment(done.evicted.len() as u64);
        let failed = done.created.iter().find_map(|&(id, index)| {
            let stored = model.store_block(seq, id, index * BLOCK_TOKENS, BLOCK_TOKENS);
            stored.err().map(|e| (id, e))
        });
        // A block whose bytes were not kept must not be found: it and every block created
        // after it in this chain (its descendants) leave; the chain before it stays.
        if let Some((id, e)) = failed {
            eprintln!("specgate: a prefix-cache block was not kept: {e}");
            let gone = self.index.forget(&[id]);
            model.drop_blocks(&gone);
            metrics::counter!("specgate_prefix_cache_evictions_total").increment(gone.len() as u64);
            let at = done.chain.iter().position(|&b| b == id);
            done.chain.truncate(at.unwrap_or(done.chain.len()));
        }
        if hold {
            self.index.acquire(&done.chain);
        }
        self.index.release(&std::mem::take(&mut lease.blocks));
        if hold {
            lease.blocks = done.chain;
        }
    }

    /// Where the caches share a fixed pool with the sequences (a GPU's): evict cached blocks no
    /// sequence uses, least recently used first, until `needed` bytes are free, so the cache
    /// never takes room admission promised. A no-op where caches grow in host memory.
    pub fn make_room(&mut self, model: &mut dyn TargetBackend, needed: usize) {
        let block = BLOCK_TOKENS * model.config().kv_bytes_per_token();
        while let Some(free) = model.kv_free_bytes().filter(|&f| f < needed) {
            let gone = self.index.evict((needed - free).div_ceil(block.max(1)));
            if gone.is_empty() {
                break;
            }
            model.drop_blocks(&gone);
            metrics::counter!("specgate_prefix_cache_evictions_total").increment(gone.len() as u64);
        }
    }

    /// Let a lease go without caching anything more (a failed sequence).
    pub fn release(&mut self, lease: &mut Lease) {
        self.index.release(&std::mem::take(&mut lease.blocks));
    }

    pub fn publish(&self, model: &dyn TargetBackend) {
        metrics::gauge!("specgate_prefix_cache_bytes").set(model.block_bytes() as f64);
        metrics::gauge!("specgate_prefix_cache_blocks").set(self.index.len() as f64);
    }
}
