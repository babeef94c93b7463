//! The index of cached KV blocks: a hash chain over full blocks of token ids, reference counts
//! for the sequences using them, least-recently-used eviction of the blocks nobody uses, and a
//! per-scope share so one scope's flood cannot evict everyone else's blocks. It holds no KV:
//! the backend keeps each block's bytes under the [`BlockId`] given here.
//!
//! Rules (vLLM's automatic prefix caching, SGLang's radix cache):
//! - only full blocks are cached, and only of tokens whose KV the sequence committed;
//! - a lookup leaves the prompt's last token to be computed (its logits start the answer);
//! - a block is found by the chain hash of its scope, every token before it and its own, and
//!   then checked: same parent block, same scope, same token ids (a hash collision is a miss);
//! - only leaves are evicted (a chain is never cut in the middle), least recently used first.

use std::collections::{BTreeSet, HashMap};

use sha2::{Digest, Sha256};
use specgate_strategies::TokenId;

use super::scope::{first_u64, CacheScope};

/// A cached block, named for the backend that holds its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u64);

/// What a prompt matched: its first `blocks.len()` blocks, `tokens` tokens in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hit {
    pub blocks: Vec<BlockId>,
    pub tokens: usize,
}

/// What a registration did: the blocks created (the backend copies their bytes from the
/// sequence, block `index` of it), the chain now cached (the sequence may hold it), and the
/// blocks evicted to make room (the backend drops their bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registered {
    pub created: Vec<(BlockId, usize)>,
    pub chain: Vec<BlockId>,
    pub evicted: Vec<BlockId>,
}

/// Counters since start, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub queried_tokens: u64,
    pub hit_tokens: u64,
    pub evictions: u64,
}

#[derive(Debug)]
struct Block {
    hash: u64,
    parent: Option<BlockId>,
    scope: CacheScope,
    tokens: Box<[TokenId]>,
    refs: u32,
    children: u32,
    used: u64,
}

impl Block {
    fn idle(&self) -> bool {
        self.refs == 0 && self.children == 0
    }
}

/// The cache's bookkeeping; see the module's rules.
#[derive(Debug)]
pub struct PrefixIndex {
    block_tokens: usize,
    capacity: usize,
    scope_share: usize,
    blocks: HashMap<BlockId, Block>,
    by_hash: HashMap<u64, BlockId>,
    /// Evictable blocks (unused leaves) by last use, all scopes and per scope.
    idle: BTreeSet<(u64, BlockId)>,
    idle_by_scope: HashMap<CacheScope, BTreeSet<(u64, BlockId)>>,
    held: HashMap<CacheScope, usize>,
    clock: u64,
    next_id: u64,
    stats: IndexStats,
}

impl PrefixIndex {
    /// An index of at most `capacity` blocks of `block_tokens` tokens; a scope holding
    /// `scope_share` of it (0–1) or more makes room only by evicting its own blocks.
    pub fn new(block_tokens: usize, capacity: usize, scope_share: f64) -> Self {
        let share = (capacity as f64 * scope_share.clamp(0.0, 1.0)).ceil() as usize;
        Self {
            block_tokens: block_tokens.max(1),
            capacity,
            scope_share: share.max(1),
            blocks: HashMap::new(),
            by_hash: HashMap::new(),
            idle: BTreeSet::new(),
            idle_by_scope: HashMap::new(),
            held: HashMap::new(),
            clock: 0,
            next_id: 0,
            stats: IndexStats::default(),
        }
    }

    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Blocks cached now.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    pub fn stats(&self) -> IndexStats {
        self.stats
    }

    /// Blocks a scope holds now.
    pub fn held_by(&self, scope: CacheScope) -> usize {
        self.held.get(&scope).copied().unwrap_or(0)
    }

    /// The longest run of cached blocks starting the prompt, in `scope`, leaving at least its
    /// last token uncached. Counts the query and marks the blocks used.
    pub fn lookup(&mut self, scope: CacheScope, prompt: &[TokenId]) -> Hit {
        self.stats.queried_tokens += prompt.len() as u64;
        let most = prompt.len().saturating_sub(1) / self.block_tokens;
        let mut hit = Hit::default();
        let mut parent = None;
        for chunk in prompt.chunks_exact(self.block_tokens).take(most) {
            let Some(id) = self.find(scope, parent, chunk) else {
                break;
            };
            hit.blocks.push(id);
            parent = Some(id);
        }
        hit.tokens = hit.blocks.len() * self.block_tokens;
        self.stats.hit_tokens += hit.tokens as u64;
        for &id in &hit.blocks {
            self.touch(id);
        }
        hit
    }

    /// Cache the full blocks of `tokens` (committed tokens whose KV the sequence holds):
    /// blocks already cached are marked used, the others created while there is room.
    /// With `own_from: Some(n)`, a block found cached at index n or later ends the
    /// registration: its bytes are not the sequence's own (another sequence computed the same
    /// tokens meanwhile), so a sequence that goes on holding its chain must not hold that one
    /// (on a shared pool it would pin memory no sequence uses).
    pub fn register(
        &mut self,
        scope: CacheScope,
        tokens: &[TokenId],
        own_from: Option<usize>,
    ) -> Registered {
        let mut done = Registered::default();
        let mut parent: Option<BlockId> = None;
        for (index, chunk) in tokens.chunks_exact(self.block_tokens).enumerate() {
            let hash = self.chain_hash(scope, parent, chunk);
            let id = match self.found(hash, scope, parent, chunk) {
                Some(_) if own_from.is_some_and(|n| index >= n) => break,
                Some(id) => id,
                None => {
                    if self.by_hash.contains_key(&hash) {
                        break; // a collision: the slot is taken by another chain
                    }
                    // The chain so far must survive the room made for its next block.
                    parent.inspect(|&p| self.pin(p));
                    let room = self.make_room(scope, &mut done.evicted);
                    parent.inspect(|&p| self.unpin(p));
                    if !room {
                        break;
                    }
                    let id = self.insert(hash, scope, parent, chunk);
                    done.created.push((id, index));
                    id
                }
            };
            self.touch(id);
            done.chain.push(id);
            parent = Some(id);
        }
        done
    }

    /// A sequence uses these blocks: none of them is evicted until it lets go.
    pub fn acquire(&mut self, blocks: &[BlockId]) {
        for &id in blocks {
            self.pin(id);
        }
    }

    /// A sequence no longer uses these blocks (each as many times as it acquired them).
    pub fn release(&mut self, blocks: &[BlockId]) {
        for &id in blocks.iter().rev() {
            self.touch(id);
            self.unpin(id);
        }
    }

    /// Evict up to `n` unused blocks, least recently used first, whatever their scope (room
    /// for admission where the cache shares the sequences' memory).
    pub fn evict(&mut self, n: usize) -> Vec<BlockId> {
        let mut out = Vec::new();
        while out.len() < n {
            let Some(&(_, id)) = self.idle.first() else {
                break;
            };
            self.remove(id);
            out.push(id);
        }
        out
    }

    /// Remove these blocks and every block chained after them, in use or not (their bytes
    /// could not be kept); returns all removed, for the backend to drop.
    pub fn forget(&mut self, ids: &[BlockId]) -> Vec<BlockId> {
        let mut gone: BTreeSet<BlockId> = ids.iter().copied().collect();
        loop {
            let more: Vec<BlockId> = self
                .blocks
                .iter()
                .filter(|(id, b)| !gone.contains(id) && b.parent.is_some_and(|p| gone.contains(&p)))
                .map(|(&id, _)| id)
                .collect();
            if more.is_empty() {
                break;
            }
            gone.extend(more);
        }
        // Leaves first, so every parent's child count stays right.
        let mut order: Vec<BlockId> = gone
            .into_iter()
            .filter(|id| self.blocks.contains_key(id))
            .collect();
        order.sort_by_key(|id| std::cmp::Reverse(self.depth(*id)));
        for &id in &order {
            self.remove(id);
        }
        order
    }

    fn depth(&self, mut id: BlockId) -> usize {
        let mut d = 0;
        while let Some(p) = self.blocks.get(&id).and_then(|b| b.parent) {
            d += 1;
            id = p;
        }
        d
    }

    fn find(
        &self,
        scope: CacheScope,
        parent: Option<BlockId>,
        chunk: &[TokenId],
    ) -> Option<BlockId> {
        self.found(self.chain_hash(scope, parent, chunk), scope, parent, chunk)
    }

    /// The block under `hash`, if it is this one: same scope, parent and token ids.
    fn found(
        &self,
        hash: u64,
        scope: CacheScope,
        parent: Option<BlockId>,
        chunk: &[TokenId],
    ) -> Option<BlockId> {
        let id = *self.by_hash.get(&hash)?;
        let b = self.blocks.get(&id)?;
        (b.scope == scope && b.parent == parent && *b.tokens == *chunk).then_some(id)
    }

    /// The chain hash: the scope for the first block, the parent's hash after it, and the
    /// block's own token ids.
    fn chain_hash(&self, scope: CacheScope, parent: Option<BlockId>, chunk: &[TokenId]) -> u64 {
        let mut h = Sha256::new();
        match parent.and_then(|p| self.blocks.get(&p)) {
            Some(p) => h.update(p.hash.to_le_bytes()),
            None => h.update(scope.0.to_le_bytes()),
        }
        for t in chunk {
            h.update(t.to_le_bytes());
        }
        first_u64(&h.finalize())
    }

    /// Make room for one more block of `scope`: false when there is none to make.
    fn make_room(&mut self, scope: CacheScope, evicted: &mut Vec<BlockId>) -> bool {
        if self.capacity == 0 {
            return false;
        }
        while self.blocks.len() >= self.capacity {
            let victim = if self.held_by(scope) >= self.scope_share {
                self.idle_by_scope.get(&scope).and_then(|s| s.first())
            } else {
                self.idle.first()
            };
            let Some(&(_, id)) = victim else {
                return false;
            };
            self.remove(id);
            evicted.push(id);
        }
        true
    }

    fn insert(
        &mut self,
        hash: u64,
        scope: CacheScope,
        parent: Option<BlockId>,
        chunk: &[TokenId],
    ) -> BlockId {
        let id = BlockId(self.next_id);
        self.next_id += 1;
        if let Some(p) = parent {
            self.set_idle(p, false);
            if let Some(b) = self.blocks.get_mut(&p) {
                b.children += 1;
            }
        }
        self.clock += 1;
        let block = Block {
            hash,
            parent,
            scope,
            tokens: chunk.into(),
            refs: 0,
            children: 0,
            used: self.clock,
        };
        self.blocks.insert(id, block);
        self.by_hash.insert(hash, id);
        *self.held.entry(scope).or_default() += 1;
        self.set_idle(id, true);
        id
    }

    fn remove(&mut self, id: BlockId) {
        self.set_idle(id, false);
        let Some(b) = self.blocks.remove(&id) else {
            return;
        };
        self.by_hash.remove(&b.hash);
        if let Some(n) = self.held.get_mut(&b.scope) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&b.scope);
            }
        }
        self.stats.evictions += 1;
        if let Some(p) = b.parent {
            if let Some(pb) = self.blocks.get_mut(&p) {
                pb.children -= 1;
            }
            self.set_idle(p, true);
        }
    }

    fn pin(&mut self, id: BlockId) {
        self.set_idle(id, false);
        if let Some(b) = self.blocks.get_mut(&id) {
            b.refs += 1;
        }
    }

    fn unpin(&mut self, id: BlockId) {
        if let Some(b) = self.blocks.get_mut(&id) {
            b.refs = b.refs.saturating_sub(1);
        }
        self.set_idle(id, true);
    }

    /// Mark a block used now (it moves to the back of the eviction order).
    fn touch(&mut self, id: BlockId) {
        self.set_idle(id, false);
        self.clock += 1;
        if let Some(b) = self.blocks.get_mut(&id) {
            b.used = self.clock;
        }
        self.set_idle(id, true);
    }

    /// Keep the idle sets in step with a block: `on` adds it where it is an unused leaf.
    fn set_idle(&mut self, id: BlockId, on: bool) {
        let Some(b) = self.blocks.get(&id) else {
            return;
        };
        let key = (b.used, id);
        let scope = b.scope;
        if on && b.idle() {
            self.idle.insert(key);
            self.idle_by_scope.entry(scope).or_default().insert(key);
        } else if !on {
            self.idle.remove(&key);
            if let Some(s) = self.idle_by_scope.get_mut(&scope) {
                s.remove(&key);
                if s.is_empty() {
                    self.idle_by_scope.remove(&scope);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
