//! The Medusa drafter: the heads (`crate::heads`) on the hidden state the sequence hands it,
//! through the target's LM head. Drafting reuses the hidden state of the target pass that just
//! ran: no extra target pass. Heads that chain draft one place at a time, each conditioned on
//! the token drafted before it (for a tree: one LM-head call per level).

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::head_lm;
pub use crate::heads::MedusaHeads;
use crate::tree::{build_tree, kth_joint, select_tree, DraftTree, PoolNode};
use crate::{Draft, DraftContext, DraftError, Drafter, TokenId};

/// The target's LM head, as the drafter sees it: [rows, hidden] → [rows, vocab], the logits
/// of a draft vocabulary's `vocab()` token ids (`token_id` maps a column to its id). A draft
/// vocabulary may be smaller than the target's: the heads then never propose the other ids.
pub trait LmHead: Send + Sync {
    fn vocab(&self) -> usize;
    fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError>;
    /// The target's vocabulary: the length of a q row (zeros where nothing can be drafted).
    fn target_vocab(&self) -> usize {
        self.vocab()
    }
    /// The token id of logit column `index` (None past the draft vocabulary); by default the
    /// columns are the first ids in order.
    fn token_id(&self, index: usize) -> Option<TokenId> {
        (index < self.vocab()).then_some(index as TokenId)
    }
    /// Row `token` of the LM head ([hidden]): the embedding token-conditioned heads read.
    /// None past the embedding vocabulary (the heads were trained with a zero vector there)
    /// or when the head keeps no rows; an error when a row it has cannot be read (a drafter
    /// fault, counted as one, rather than a silently zeroed embedding).
    fn token_row(&self, _token: TokenId) -> Result<Option<Vec<f32>>, DraftError> {
        Ok(None)
    }
}

/// Proposes the heads' guesses from the hidden state the sequence hands it.
pub struct MedusaDrafter {
    heads: Arc<MedusaHeads>,
    lm_head: Arc<dyn LmHead>,
    rng: StdRng,
    /// Greedy requests get a candidate tree of up to this many nodes, and at most k (0: a
    /// chain).
    tree_budget: usize,
    /// Drafts keep only guesses whose chance of acceptance, joint with the guesses before
    /// them (the heads' calibrated probabilities), is at least what their verify row costs:
    /// the round's `row_cost`, or this when the caller measured none.
    min_chance: f32,
}

/// Candidates per parent when building a tree: as many as a 16-node tree could take from one
/// node. With calibrated heads more candidates only let the likeliest paths win (in
/// `bench spec`, chat's tokens per pass: 1.76 at 4, 1.79 at 8, 1.80 at 12 and 16).
pub const TREE_TOP_N: usize = 16;

/// Nodes a chained tree expands per level (each one a row of that level's LM-head call).
pub const TREE_EXPAND: usize = 4;

impl MedusaDrafter {
    pub fn new(heads: Arc<MedusaHeads>, lm_head: Arc<dyn LmHead>, seed: u64) -> Self {
        Self {
            heads,
            lm_head,
            rng: StdRng::seed_from_u64(seed),
            tree_budget: 0,
            min_chance: 0.0,
        }
    }

    /// Keep guesses whose joint chance of acceptance is below `p` out of drafts when the
    /// caller gives no row cost (0: chains of k, trees of their whole budget).
    pub fn with_min_chance(mut self, p: f32) -> Self {
        self.min_chance = p;
        self
    }

    /// Draft candidate trees of up to `budget` nodes for greedy requests (sampled ones keep
    /// chains). A round's k bounds the nodes too: k counts drafted tokens, chain or tree, so a
    /// verify pass is k + 1 rows whatever the draft's shape.
    pub fn with_tree(mut self, budget: usize) -> Self {
        self.tree_budget = budget;
        self
    }
}

impl Drafter for MedusaDrafter {
    fn name(&self) -> &'static str {
        "medusa"
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        let Some(h) = ctx.hidden else {
            return Ok(Draft::empty());
        };
        if h.len() != self.heads.hidden {
            return Err(DraftError(format!(
                "hidden state of {} values; the heads expect {}",
                h.len(),
                self.heads.hidden
            )));
        }
        let n = k.min(self.heads.num_heads());
        if n == 0 {
            return Ok(Draft::empty());
        }
        let e = match ctx.tokens.last() {
            Some(&t) if self.heads.token_conditioned() => self.row_of(t)?,
            _ => None,
        };
        let e = e.as_deref();
        let greedy = ctx.sampling.is_greedy();
        let floor = self.floor(ctx);
        if self.heads.chained() {
            if greedy && self.tree_budget > 0 {
                let budget = self.tree_budget.min(k);
                return Ok(tree_draft(self.chained_tree(h, e, budget, floor)?));
            }
            return self.chained_chain(ctx, h, (e, floor), n);
        }
        let logits = self.logits(&self.heads.states(h, e, n), n)?;
        let vocab = self.lm_head.vocab();
        if greedy && self.tree_budget > 0 {
            let candidates = logits
                .chunks_exact(vocab)
                .enumerate()
                .map(|(i, r)| self.candidates(i, r))
                .collect::<Result<Vec<_>, _>>()?;
            let budget = self.tree_budget.min(k);
            return Ok(tree_draft(build_tree(&candidates, budget, floor)));
        }
        let mut draft = Draft::empty();
        let mut joint = 1.0;
        for (i, row) in logits.chunks_exact(vocab).enumerate() {
            if !self.still_likely(i, row, &mut joint, floor) {
                break;
            }
            self.pick(ctx, row, &mut draft)?;
        }
        Ok(draft)
    }
}

impl MedusaDrafter {
    fn logits(&self, states: &[f32], rows: usize) -> Result<Vec<f32>, DraftError> {
        head_lm::logits(&*self.lm_head, states, rows)
    }

    fn token_at(&self, index: usize) -> Result<TokenId, DraftError> {
        head_lm::token_at(&*self.lm_head, index)
    }

    /// The joint chance a drafted guess needs: what its verify row costs this round.
    fn floor(&self, ctx: &DraftContext<'_>) -> f32 {
        ctx.row_cost.unwrap_or(self.min_chance)
    }

    /// Multiply `joint` by head i's calibrated chance of its likeliest token in `row`;
    /// whether the chain should still draft it.
    fn still_likely(&self, i: usize, row: &[f32], joint: &mut f32, floor: f32) -> bool {
        if floor <= 0.0 {
            return true;
        }
        let top = self.heads.candidates(i, row, 1);
        *joint *= top.first().map_or(0.0, |&(_, p)| p);
        *joint >= floor
    }

    /// Head i's likeliest tokens in `row` with their calibrated chances, as token ids.
    fn candidates(&self, i: usize, row: &[f32]) -> Result<Vec<(TokenId, f32)>, DraftError> {
        self.heads
            .candidates(i, row, TREE_TOP_N)
            .into_iter()
            .map(|(c, p)| Ok((self.token_at(c as usize)?, p)))
            .collect()
    }

    /// Append the token a head's logits give (`head_lm::pick`).
    fn pick(
        &mut self,
        ctx: &DraftContext<'_>,
        row: &[f32],
        draft: &mut Draft,
    ) -> Result<(), DraftError> {
        head_lm::pick(&*self.lm_head, ctx, row, &mut self.rng, draft)
    }

    /// The embedding a chained head reads for `token` (None: a zero vector, as in training).
    fn row_of(&self, token: TokenId) -> Result<Option<Vec<f32>>, DraftError> {
        head_lm::embedding(&*self.lm_head, token, self.heads.hidden)
    }

    /// Chained heads, one place at a time: head i reads the token head i − 1 drafted. A chain
    /// stops where its joint chance falls below `floor`.
    fn chained_chain(
        &mut self,
        ctx: &DraftContext<'_>,
        h: &[f32],
        (e, floor): (Option<&[f32]>, f32),
        n: usize,
    ) -> Result<Draft, DraftError> {
        let mut draft = Draft::empty();
        let mut joint = 1.0;
        let mut prev = e.map(<[f32]>::to_vec);
        for i in 0..n {
            let state = self.heads.state(i, h, e, prev.as_deref());
            let row = self.logits(&state, 1)?;
            if !self.still_likely(i, &row, &mut joint, floor) {
                break;
            }
            self.pick(ctx, &row, &mut draft)?;
            prev = match draft.tokens.last() {
                Some(&t) => self.row_of(t)?,
                None => None,
            };
        }
        Ok(draft)
    }

    /// A candidate tree from chained heads, a level per LM-head call: each level expands its
    /// likeliest nodes (at most `TREE_EXPAND`, and only those that could still make the
    /// budget and whose joint chance reaches `floor`) into their `TREE_TOP_N` likeliest
    /// children, head d reading the node's token.
    fn chained_tree(
        &self,
        h: &[f32],
        e: Option<&[f32]>,
        budget: usize,
        floor: f32,
    ) -> Result<DraftTree, DraftError> {
        let mut pool: Vec<PoolNode> = Vec::new();
        let mut level: Vec<usize> = Vec::new();
        for d in 0..self.heads.num_heads().min(budget) {
            let parents: Vec<Option<usize>> = if d == 0 {
                vec![None]
            } else {
                let bar = kth_joint(&pool, budget).max(floor);
                let mut open: Vec<usize> = level
                    .iter()
                    .copied()
                    .filter(|&i| pool[i].joint >= bar)
                    .collect();
                open.sort_by(|&a, &b| pool[b].joint.total_cmp(&pool[a].joint));
                open.truncate(TREE_EXPAND);
                open.into_iter().map(Some).collect()
            };
            if parents.is_empty() {
                break;
            }
            let z = self.heads.shared_part(d, h, e);
            let mut states = Vec::with_capacity(parents.len() * h.len());
            for p in &parents {
                let prev = match p {
                    None => e.map(<[f32]>::to_vec),
                    Some(i) => self.row_of(pool[*i].token)?,
                };
                states.extend(self.heads.finish(d, h, &z, prev.as_deref()));
            }
            let logits = self.logits(&states, parents.len())?;
            level.clear();
            for (&parent, row) in parents
                .iter()
                .zip(logits.chunks_exact(self.lm_head.vocab()))
            {
                let joint = parent.map_or(1.0, |i| pool[i].joint);
                for (token, p) in self.candidates(d, row)? {
                    level.push(pool.len());
                    pool.push(PoolNode {
                        token,
                        joint: joint * p,
                        parent,
                        depth: d + 1,
                    });
                }
            }
        }
        Ok(select_tree(&pool, budget, floor))
    }
}

/// A tree as a draft; no node above the floor is no draft (a plain round).
fn tree_draft(tree: DraftTree) -> Draft {
    if tree.is_empty() {
        Draft::empty()
    } else {
        Draft::tree(tree)
    }
}

#[cfg(test)]
#[path = "medusa_tests.rs"]
mod tests;
