//! The EAGLE drafter of one sequence. Its cache holds a key and value per generated position
//! whose target hidden state it has read: each round it first reads the rows the last verify
//! pass produced for the committed tokens (`DraftContext::fresh_hidden`), then drafts from its
//! own output features, on scratch entries it drops when the round's draft is made. Rolling
//! back therefore needs nothing: drafted positions never enter the cache, and the target's
//! rows arrive only for committed tokens.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::layer::{EagleHead, KvRows, LayerRow};
use crate::head_lm;
use crate::medusa::LmHead;
use crate::tree::{kth_joint, select_tree, DraftTree, PoolNode};
use crate::{Draft, DraftContext, DraftError, Drafter, TokenId};

/// Children considered per expanded node (EAGLE-2 takes the top 10).
pub const EAGLE_TOP_N: usize = 8;
/// Nodes expanded per tree level: one layer call of this many rows per level.
pub const EAGLE_EXPAND: usize = 8;
/// Deepest tree level drafted.
pub const EAGLE_MAX_DEPTH: usize = 8;
/// Positions the cache keeps before it restarts from the latest rows (bounds memory and each
/// row's attention; a draft leans on the recent context).
pub const EAGLE_WINDOW: usize = 1024;

pub struct EagleDrafter {
    head: Arc<EagleHead>,
    lm: Arc<dyn LmHead>,
    rng: StdRng,
    /// Greedy requests get trees of up to this many nodes (and at most k); 0: chains.
    tree_budget: usize,
    /// The joint chance a drafted token needs when the caller gives no row cost.
    min_chance: f32,
    cache: KvRows,
    /// Generated positions read so far (the cache holds `fed - base` of them).
    fed: usize,
    base: usize,
    /// The layer's output at the last position read: its guess at the next hidden state.
    last: Option<Vec<f32>>,
    /// The sequence's length and last token when `last` was made: a drafter handed another
    /// sequence (reused without `finish`) must not draft from the previous one's state.
    made_at: (usize, Option<TokenId>),
}

/// A tree node's extras beside its pool entry: the feature it reads and its scratch entry.
struct NodeState {
    input: Vec<f32>,
    scratch: Option<usize>,
}

impl EagleDrafter {
    pub fn new(head: Arc<EagleHead>, lm: Arc<dyn LmHead>, seed: u64) -> Self {
        Self {
            head,
            lm,
            rng: StdRng::seed_from_u64(seed),
            tree_budget: 0,
            min_chance: 0.0,
            cache: KvRows::default(),
            fed: 0,
            base: 0,
            last: None,
            made_at: (0, None),
        }
    }

    pub fn with_tree(mut self, budget: usize) -> Self {
        self.tree_budget = budget;
        self
    }

    pub fn with_min_chance(mut self, p: f32) -> Self {
        self.min_chance = p;
        self
    }

    /// Read the target's rows for the committed tokens not read yet. A gap (rows missed, a
    /// round the drafter did not see) or a full window restarts the cache from the rows at
    /// hand. Returns false when there is nothing to draft from.
    fn catch_up(&mut self, ctx: &DraftContext<'_>) -> Result<bool, DraftError> {
        let d = self.head.shape.hidden;
        let kd = self.head.shape.kv_dim();
        let fresh = ctx.fresh_hidden;
        if !fresh.len().is_multiple_of(d) {
            return Err(DraftError(format!(
                "hidden rows of {} values; the layer reads {d}",
                fresh.len()
            )));
        }
        let generated = ctx.tokens.len().saturating_sub(ctx.prompt_len);
        let from = generated.saturating_sub(fresh.len() / d);
        let here = (ctx.tokens.len(), ctx.tokens.last().copied());
        if self.made_at == here && self.last.is_some() {
            return Ok(true); // nothing committed since
        }
        // The sequence read last still holds its last token where it was: this is it, grown.
        let (len, last) = self.made_at;
        let continues = len > 0 && len <= here.0 && ctx.tokens.get(len - 1).copied() == last;
        if !continues
            || self.fed < from
            || self.fed > generated
            || generated - self.base > EAGLE_WINDOW
        {
            self.cache = KvRows::default();
            self.base = from;
            self.fed = from;
            self.last = None;
        }
        if self.fed == generated {
            return Ok(self.last.is_some());
        }
        let mut embeds = Vec::new();
        for p in self.fed..generated {
            embeds.push(self.embedding(ctx.tokens[ctx.prompt_len + p])?);
        }
        let rows: Vec<LayerRow<'_>> = (self.fed..generated)
            .zip(&embeds)
            .map(|(p, e)| LayerRow {
                h: &fresh[(p - from) * d..(p - from + 1) * d],
                e: e.as_deref(),
                pos: p,
                sees: &[],
            })
            .collect();
        let out = self
            .head
            .forward(&rows, &self.cache, &KvRows::default(), true);
        self.cache.k.extend_from_slice(&out.kv.k);
        self.cache.v.extend_from_slice(&out.kv.v);
        debug_assert_eq!(self.cache.len(kd), generated - self.base);
        self.last = out.f.chunks_exact(d).last().map(<[f32]>::to_vec);
        self.fed = generated;
        self.made_at = here;
        Ok(self.last.is_some())
    }

    /// A token's embedding as training saw it (None: a zero vector).
    fn embedding(&self, token: TokenId) -> Result<Option<Vec<f32>>, DraftError> {
        head_lm::embedding(&*self.lm, token, self.head.shape.hidden)
    }

    fn logits(&self, features: &[f32]) -> Result<Vec<f32>, DraftError> {
        head_lm::logits(&*self.lm, features, features.len() / self.head.shape.hidden)
    }

    fn token_at(&self, index: usize) -> Result<TokenId, DraftError> {
        head_lm::token_at(&*self.lm, index)
    }

    /// The next position's key/value and output for a drafted token read after `input`.
    fn step(
        &self,
        input: &[f32],
        token: TokenId,
        pos: usize,
        scratch: &KvRows,
        sees: &[usize],
    ) -> Result<(Vec<f32>, KvRows), DraftError> {
        let e = self.embedding(token)?;
        let row = LayerRow {
            h: input,
            e: e.as_deref(),
            pos,
            sees,
        };
        let out = self.head.forward(&[row], &self.cache, scratch, false);
        Ok((out.f, out.kv))
    }

    /// A chain of up to `k`: the argmax (greedy) or a sample with its q at each place,
    /// stopping where the joint chance of the likeliest token falls below `floor`.
    fn chain(&mut self, ctx: &DraftContext<'_>, k: usize, floor: f32) -> Result<Draft, DraftError> {
        let mut draft = Draft::empty();
        let Some(mut feature) = self.last.clone() else {
            return Ok(draft);
        };
        let mut scratch = KvRows::default();
        let mut joint = 1.0f32;
        for i in 0..k {
            let row = self.logits(&feature)?;
            if floor > 0.0 {
                joint *= self
                    .head
                    .chances(i + 1, &row, 1)
                    .first()
                    .map_or(0.0, |&(_, p)| p);
                if joint < floor {
                    break;
                }
            }
            head_lm::pick(&*self.lm, ctx, &row, &mut self.rng, &mut draft)?;
            let token = draft.tokens[i];
            if i + 1 < k {
                let sees: Vec<usize> = (0..i).collect();
                let (f, kv) = self.step(&feature, token, self.fed + i, &scratch, &sees)?;
                scratch.k.extend(kv.k);
                scratch.v.extend(kv.v);
                feature = f;
            }
        }
        Ok(draft)
    }

    /// A dynamic tree (EAGLE-2): level by level, the likeliest open nodes (at most
    /// `EAGLE_EXPAND`, only those that could still make the budget and reach `floor`) are
    /// run through the layer together, each seeing its ancestors, and offer their likeliest
    /// children; the tree keeps the `budget` likeliest nodes of the pool.
    fn tree(&self, budget: usize, floor: f32) -> Result<DraftTree, DraftError> {
        let d = self.head.shape.hidden;
        let Some(root) = self.last.clone() else {
            return Ok(DraftTree::default());
        };
        let mut pool: Vec<PoolNode> = Vec::new();
        let mut state: Vec<NodeState> = Vec::new();
        let row = self.logits(&root)?;
        let mut level = Vec::new();
        self.offer(&row, None, &root, &mut pool, &mut state, &mut level)?;
        let mut scratch = KvRows::default();
        for depth in 1..EAGLE_MAX_DEPTH.min(budget) {
            let bar = kth_joint(&pool, budget).max(floor);
            let mut open: Vec<usize> = level
                .iter()
                .copied()
                .filter(|&i| pool[i].joint >= bar)
                .collect();
            open.sort_by(|&a, &b| pool[b].joint.total_cmp(&pool[a].joint));
            open.truncate(EAGLE_EXPAND);
            if open.is_empty() {
                break;
            }
            let embeds = open
                .iter()
                .map(|&i| self.embedding(pool[i].token))
                .collect::<Result<Vec<_>, _>>()?;
            let sees: Vec<Vec<usize>> = open.iter().map(|&i| ancestors(&pool, &state, i)).collect();
            let rows: Vec<LayerRow<'_>> = open
                .iter()
                .zip(&embeds)
                .zip(&sees)
                .map(|((&i, e), s)| LayerRow {
                    h: &state[i].input,
                    e: e.as_deref(),
                    pos: self.fed + depth - 1,
                    sees: s,
                })
                .collect();
            let out = self.head.forward(&rows, &self.cache, &scratch, false);
            let first = scratch.len(self.head.shape.kv_dim());
            scratch.k.extend_from_slice(&out.kv.k);
            scratch.v.extend_from_slice(&out.kv.v);
            let logits = self.logits(&out.f)?;
            level.clear();
            for (j, &i) in open.iter().enumerate() {
                state[i].scratch = Some(first + j);
                let f = &out.f[j * d..(j + 1) * d];
                let row = &logits[j * self.lm.vocab()..(j + 1) * self.lm.vocab()];
                self.offer(row, Some(i), f, &mut pool, &mut state, &mut level)?;
            }
        }
        Ok(select_tree(&pool, budget, floor))
    }

    /// Add the likeliest children of `parent` (None: the root) from its logits `row`; they
    /// read `feature`, the parent's output.
    fn offer(
        &self,
        row: &[f32],
        parent: Option<usize>,
        feature: &[f32],
        pool: &mut Vec<PoolNode>,
        state: &mut Vec<NodeState>,
        level: &mut Vec<usize>,
    ) -> Result<(), DraftError> {
        let joint = parent.map_or(1.0, |i| pool[i].joint);
        let depth = parent.map_or(0, |i| pool[i].depth);
        for (c, p) in self.head.chances(depth + 1, row, EAGLE_TOP_N) {
            level.push(pool.len());
            pool.push(PoolNode {
                token: self.token_at(c as usize)?,
                joint: joint * p,
                parent,
                depth: depth + 1,
            });
            state.push(NodeState {
                input: feature.to_vec(),
                scratch: None,
            });
        }
        Ok(())
    }
}

/// The scratch entries of node `i`'s ancestors (root side first), which it attends to.
fn ancestors(pool: &[PoolNode], state: &[NodeState], i: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = pool[i].parent;
    while let Some(p) = at {
        out.extend(state[p].scratch);
        at = pool[p].parent;
    }
    out.reverse();
    out
}

impl Drafter for EagleDrafter {
    fn name(&self) -> &'static str {
        "eagle"
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        if k == 0 || !self.catch_up(ctx)? {
            return Ok(Draft::empty());
        }
        let floor = ctx.row_cost.unwrap_or(self.min_chance);
        if ctx.sampling.is_greedy() && self.tree_budget > 0 {
            let tree = self.tree(self.tree_budget.min(k), floor)?;
            return Ok(if tree.is_empty() {
                Draft::empty()
            } else {
                Draft::tree(tree)
            });
        }
        self.chain(ctx, k, floor)
    }

    fn finish(&mut self) {
        self.cache = KvRows::default();
        (self.fed, self.base, self.last, self.made_at) = (0, 0, None, (0, None));
    }

    fn kv_bytes_per_token(&self) -> usize {
        2 * self.head.shape.kv_dim() * std::mem::size_of::<f32>()
    }
}
