//! The CUDA backend's host-side bookkeeping, kept pure so it is tested without a GPU: the KV
//! pool's fixed-size blocks and who holds them, each sequence's blocks and per-layer length,
//! and a pass's per-row tables exactly as the kernels read them (`kernels/cuda/attention.cu`).

use std::ops::Range;

use super::super::{BatchItem, LogitRows};

/// Tokens per KV block (`KV_BLOCK` in attention.cu).
pub const KV_BLOCK: usize = 16;
/// Rows one quantized mat-vec launch carries (`MAX_ROWS` in qmatvec.cu); longer passes run
/// in chunks of this many rows, each row computed the same way whatever its chunk.
pub const MAX_ROWS: usize = 16;
/// Ints of per-row attention info (`RI_INTS`): table offset, base, limit, self, position,
/// mask offset (−1: causal).
pub const RI_INTS: usize = 6;

/// The KV pool's blocks: the free ones, and how many holders (sequences, the prefix cache)
/// each other block has. A block with more than one holder is shared and read only.
#[derive(Debug)]
pub struct BlockPool {
    free: Vec<u32>,
    refs: Vec<u32>,
    capacity: usize,
}

impl BlockPool {
    pub fn new(capacity: usize) -> Self {
        Self {
            free: (0..capacity as u32).rev().collect(),
            refs: vec![0; capacity],
            capacity,
        }
    }

    /// One more holder of a held block (a cached block, a sequence started from it).
    pub fn share(&mut self, block: u32) {
        if let Some(r) = self.refs.get_mut(block as usize) {
            *r += 1;
        }
    }

    /// How many hold a block (0: free).
    pub fn holders(&self, block: u32) -> u32 {
        self.refs.get(block as usize).copied().unwrap_or(0)
    }

    /// Whether a block has more than one holder (no holder may write it).
    pub fn is_shared(&self, block: u32) -> bool {
        self.refs.get(block as usize).is_some_and(|&r| r > 1)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn available(&self) -> usize {
        self.free.len()
    }

    fn take(&mut self, n: usize) -> Option<Vec<u32>> {
        let at = self.free.len().checked_sub(n)?;
        let taken = self.free.split_off(at);
        for &b in &taken {
            self.refs[b as usize] = 1;
        }
        Some(taken)
    }

    /// One holder lets go of each block; a block nobody holds is free again.
    pub fn give(&mut self, blocks: impl IntoIterator<Item = u32>) {
        for b in blocks {
            let Some(r) = self.refs.get_mut(b as usize) else {
                continue;
            };
            *r = r.saturating_sub(1);
            if *r == 0 {
                self.free.push(b);
            }
        }
    }
}

/// Blocks that hold `tokens` tokens.
pub fn blocks_for(tokens: usize) -> usize {
    tokens.div_ceil(KV_BLOCK)
}

/// One sequence's cache in the pool: its blocks in order and each layer's length (an
/// early-exit pass fills only the first layers, as on the CPU).
#[derive(Debug, Clone, PartialEq)]
pub struct SeqCache {
    pub blocks: Vec<u32>,
    pub layer_lens: Vec<usize>,
}

impl SeqCache {
    pub fn new(n_layers: usize) -> Self {
        Self {
            blocks: Vec::new(),
            layer_lens: vec![0; n_layers],
        }
    }

    /// Tokens in layer 0 (every layer after a full pass).
    pub fn len(&self) -> usize {
        self.layer_lens.first().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A sequence whose cache starts with these full, shared blocks (the prefix cache's): it
    /// holds each as one more holder.
    pub fn from_shared(n_layers: usize, blocks: &[u32], pool: &mut BlockPool) -> Self {
        for &b in blocks {
            pool.share(b);
        }
        Self {
            blocks: blocks.to_vec(),
            layer_lens: vec![blocks.len() * KV_BLOCK; n_layers],
        }
    }

    /// Before the device writes positions from `from` on: every shared block there is
    /// replaced by a fresh one of this sequence's own. Returns the (shared, fresh) pairs whose
    /// contents the device must copy first; None (nothing changed) when the pool is short.
    pub fn unshare_from(&mut self, from: usize, pool: &mut BlockPool) -> Option<Vec<(u32, u32)>> {
        let at: Vec<usize> = (from / KV_BLOCK..self.blocks.len())
            .filter(|&i| pool.is_shared(self.blocks[i]))
            .collect();
        let fresh = pool.take(at.len())?;
        let mut copies = Vec::with_capacity(at.len());
        for (i, new) in at.into_iter().zip(fresh) {
            let old = std::mem::replace(&mut self.blocks[i], new);
            pool.give([old]);
            copies.push((old, new));
        }
        Some(copies)
    }

    /// Hold blocks for `tokens` tokens; all or nothing (false: the pool is short).
    pub fn reserve(&mut self, pool: &mut BlockPool, tokens: usize) -> bool {
        let need = blocks_for(tokens).saturating_sub(self.blocks.len());
        match pool.take(need) {
            Some(b) => {
                self.blocks.extend(b);
                true
            }
            None => false,
        }
    }

    /// After a pass of `depth` layers appended `n` tokens.
    pub fn appended(&mut self, depth: usize, n: usize) {
        self.layer_lens.iter_mut().take(depth).for_each(|l| *l += n);
    }

    /// Roll back to `len` tokens (longer layers lose their tail); blocks past the longest
    /// layer go back to the pool.
    pub fn truncate(&mut self, len: usize, pool: &mut BlockPool) {
        self.layer_lens.iter_mut().for_each(|l| *l = (*l).min(len));
        self.shrink(pool);
    }

    /// After a tree pass at `base`, `n_keep` rows were kept: every layer ends there.
    pub fn kept(&mut self, base: usize, n_keep: usize, pool: &mut BlockPool) {
        self.truncate(base + n_keep, pool);
    }

    /// Give every block back (the sequence is released).
    pub fn release(&mut self, pool: &mut BlockPool) {
        pool.give(self.blocks.drain(..));
        self.layer_lens.iter_mut().for_each(|l| *l = 0);
    }

    fn shrink(&mut self, pool: &mut BlockPool) {
        let longest = self.layer_lens.iter().copied().max().unwrap_or(0);
        let keep = blocks_for(longest);
        if keep < self.blocks.len() {
            pool.give(self.blocks.drain(keep..));
        }
    }
}

/// One pass's rows as the kernels read them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassPlan {
    /// Every item's token ids, in row order.
    pub tokens: Vec<i32>,
    /// Each item's block table, concatenated; a row's table starts at `table_of_row[r]`.
    pub tables: Vec<i32>,
    pub table_of_row: Vec<i32>,
    /// The cache index each row's K and V go to.
    pub slots: Vec<i32>,
    /// Each row's position (RoPE): its index for a chain, base + depth for a tree node.
    pub positions: Vec<i32>,
    /// [rows, RI_INTS], see attention.cu.
    pub info: Vec<i32>,
    /// Tree rows' visibility: one bit per row of the item's pass, 32 to a word.
    pub masks: Vec<u32>,
    /// Rows whose logits come back, in output order.
    pub logit_rows: Vec<i32>,
    /// Item i's output rows.
    pub spans: Vec<Range<usize>>,
}

/// Plan a pass: item i appends its tokens after `lens[i]` cached tokens, into the blocks
/// `blocks[i]` (already reserved for the new length).
pub fn plan_pass(items: &[BatchItem<'_>], lens: &[usize], blocks: &[&[u32]]) -> PassPlan {
    let mut p = PassPlan::default();
    let mut row = 0;
    for ((it, &base), table) in items.iter().zip(lens).zip(blocks) {
        let table_at = p.tables.len() as i32;
        p.tables.extend(table.iter().map(|&b| b as i32));
        let n = it.tokens.len();
        let tree = it.tree.map(|parents| TreeRows::new(parents, n));
        let mask_at = p.masks.len();
        if let Some(t) = &tree {
            p.masks.extend(t.masks.iter().flatten());
        }
        for (i, &tok) in it.tokens.iter().enumerate() {
            p.tokens.push(tok as i32);
            p.table_of_row.push(table_at);
            p.slots.push((base + i) as i32);
            let (pos, mask) = match &tree {
                None => (base + i, -1),
                Some(t) => (base + t.depth[i], (mask_at + i * t.words) as i32),
            };
            p.positions.push(pos as i32);
            let limit = base + n;
            p.info.extend([
                table_at,
                base as i32,
                limit as i32,
                (base + i) as i32,
                pos as i32,
                mask,
            ]);
        }
        let wanted = match it.logits {
            LogitRows::None => 0..0,
            LogitRows::Last => n.saturating_sub(1)..n,
            LogitRows::All => 0..n,
        };
        let out = p.logit_rows.len();
        p.logit_rows
            .extend(wanted.clone().map(|j| (row + j) as i32));
        p.spans.push(out..out + wanted.len());
        row += n;
    }
    p
}

/// A tree item's rows: row 0 is the pending token, row 1 + i node i (as the CPU's).
struct TreeRows {
    depth: Vec<usize>,
    words: usize,
    masks: Vec<Vec<u32>>, // per row: `words` words
}

impl TreeRows {
    fn new(parents: &[Option<usize>], rows: usize) -> Self {
        let tree = specgate_strategies::DraftTree {
            tokens: vec![0; parents.len()],
            parents: parents.to_vec(),
        };
        let words = rows.div_ceil(32).max(1);
        let mut masks = Vec::with_capacity(rows);
        let mut depth = Vec::with_capacity(rows);
        for r in 0..rows {
            depth.push(if r == 0 { 0 } else { tree.depth(r - 1) });
            let mut m = vec![0u32; words];
            for v in tree.visible_rows(r) {
                m[v / 32] |= 1 << (v % 32);
            }
            masks.push(m);
        }
        Self {
            depth,
            words,
            masks,
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
