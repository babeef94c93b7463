//! Speculation under a constraint (a JSON schema, a regex, a grammar), kept exact.
//!
//! The constraint says which tokens may come next. Every row the target produces is masked
//! with the constraint's state at that row before greedy argmax or rejection sampling, so
//! constrained speculative decoding equals constrained plain decoding token for token
//! (greedy) and follows the constrained distribution (sampled).
//!
//! The masks of a round are computed before its target pass: a round's rows follow
//! `[pending] + drafts`, all known once the draft is, so the constraint walks the draft and
//! the engine never waits on it after the forward. A drafted token the constraint forbids
//! ends the draft before verification; it stays in the draft that verification judges (it
//! costs no target row: the row that judges it is the one after the last allowed token), so
//! a sampled drafter's rejection draws from the residual max(0, p − q) with the q it really
//! drew from. Cutting it and sampling from plain p would be biased (see the test below).

use crate::draft::Draft;
use crate::tree::DraftTree;
use crate::TokenId;

/// The tokens a constraint allows at one position: one bit per vocabulary id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>, // bit t % 32 of word t / 32: token t allowed
    vocab: usize,
}

impl TokenMask {
    /// A mask from 32-bit words (bit i of word w: token 32·w + i); ids at or past `vocab`
    /// are dropped, missing words forbid.
    pub fn from_words(mut words: Vec<u32>, vocab: usize) -> Self {
        words.resize(vocab.div_ceil(32), 0);
        if !vocab.is_multiple_of(32) {
            if let Some(last) = words.last_mut() {
                *last &= (1u32 << (vocab % 32)) - 1;
            }
        }
        Self { words, vocab }
    }

    /// A mask allowing exactly `tokens`.
    pub fn only(vocab: usize, tokens: &[TokenId]) -> Self {
        let mut words = vec![0u32; vocab.div_ceil(32)];
        for &t in tokens.iter().filter(|&&t| (t as usize) < vocab) {
            words[t as usize / 32] |= 1 << (t % 32);
        }
        Self { words, vocab }
    }

    pub fn allows(&self, t: TokenId) -> bool {
        let t = t as usize;
        t < self.vocab && self.words[t / 32] & (1 << (t % 32)) != 0
    }

    /// How many tokens are allowed.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Set every forbidden token's logit to −∞ (`row`: [vocab]). A row wider than the mask
    /// (padding ids past the tokenizer) loses the ids past it.
    pub fn apply(&self, row: &mut [f32]) {
        for (w, chunk) in row.chunks_mut(32).enumerate() {
            let bits = self.words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX {
                continue;
            }
            for (i, x) in chunk.iter_mut().enumerate() {
                if bits & (1 << i) == 0 {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
    }
}

/// The constraint could not answer (its grammar hit a limit, or its state broke).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the output constraint failed: {0}")]
pub struct ConstraintError(pub String);

/// A grammar's state over one sequence's generated tokens.
///
/// Contract: `mask` answers for the position after everything consumed; `consume` advances
/// by tokens the mask allowed; `rollback(n)` undoes the last n consumed tokens. When the
/// grammar is complete its mask allows only the end-of-sequence token.
pub trait TokenConstraint: Send {
    fn mask(&mut self) -> Result<TokenMask, ConstraintError>;
    fn consume(&mut self, tokens: &[TokenId]) -> Result<(), ConstraintError>;
    fn rollback(&mut self, n: usize) -> Result<(), ConstraintError>;
    /// Tokens the grammar forces next (a schema's keys and punctuation), empty when it
    /// leaves a choice. They are drafted for free and verified like any draft.
    fn forced(&mut self) -> Vec<TokenId>;
    /// An independent copy at the same state (each branch of a tree walks its own).
    fn fork(&self) -> Box<dyn TokenConstraint>;
}

/// A round's draft checked against the constraint.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstrainedRound {
    /// The mask of each target row of the round: [1 + kept drafts].
    pub masks: Vec<TokenMask>,
    /// The first drafted token the constraint forbids (a chain only), with its q row when
    /// the drafter sampled it: it is judged (and rejected) by the row after the kept drafts.
    pub forbidden: Option<(TokenId, Option<Vec<f32>>)>,
    /// Drafts the constraint consumed (the kept chain); none for a tree, whose branches
    /// walk forks.
    pub consumed: usize,
}

/// Check a draft against the constraint, cutting it where the constraint forbids a token:
/// a chain at its first forbidden token, a tree by dropping forbidden nodes and their
/// subtrees. A chain's kept tokens are consumed by `c` (settling rolls back the rejected
/// ones); a tree leaves `c` where it was.
pub fn constrain_draft(
    c: &mut dyn TokenConstraint,
    draft: &mut Draft,
) -> Result<ConstrainedRound, ConstraintError> {
    if let Some(tree) = draft.as_tree() {
        let (kept, masks) = constrain_tree(c, &tree)?;
        *draft = Draft::tree(kept);
        return Ok(ConstrainedRound {
            masks,
            forbidden: None,
            consumed: 0,
        });
    }
    let mut masks = vec![c.mask()?];
    let mut forbidden = None;
    for (i, &t) in draft.tokens.iter().enumerate() {
        if !masks[i].allows(t) {
            let q = draft.q.as_mut().map(|q| std::mem::take(&mut q[i]));
            forbidden = Some((t, q));
            break;
        }
        c.consume(&[t])?;
        masks.push(c.mask()?);
    }
    let kept = masks.len() - 1;
    draft.tokens.truncate(kept);
    if let Some(q) = draft.q.as_mut() {
        q.truncate(kept);
    }
    Ok(ConstrainedRound {
        masks,
        forbidden,
        consumed: kept,
    })
}

/// The nodes of `tree` the constraint allows (a node whose path it forbids leaves with its
/// subtree), and the masks of the pass's rows: the pending token's, then each kept node's.
fn constrain_tree(
    c: &mut dyn TokenConstraint,
    tree: &DraftTree,
) -> Result<(DraftTree, Vec<TokenMask>), ConstraintError> {
    let mut masks = vec![c.mask()?];
    let mut kept = DraftTree {
        tokens: Vec::new(),
        parents: Vec::new(),
    };
    // new_index[i]: node i's index among the kept nodes; states[j]: kept node j's state.
    let mut new_index: Vec<Option<usize>> = vec![None; tree.len()];
    let mut states: Vec<Box<dyn TokenConstraint>> = Vec::new();
    for (i, (&t, &parent)) in tree.tokens.iter().zip(&tree.parents).enumerate() {
        let new_parent = match parent {
            None => None,
            Some(p) => match new_index[p] {
                Some(np) => Some(np),
                None => continue, // the parent was dropped
            },
        };
        let parent_mask = new_parent.map_or(&masks[0], |np| &masks[np + 1]);
        if !parent_mask.allows(t) {
            continue;
        }
        let mut state = match new_parent {
            None => c.fork(),
            Some(np) => states[np].fork(),
        };
        state.consume(&[t])?;
        masks.push(state.mask()?);
        states.push(state);
        new_index[i] = Some(kept.tokens.len());
        kept.tokens.push(t);
        kept.parents.push(new_parent);
    }
    Ok((kept, masks))
}

/// The round's rows with each masked by its position's mask (`rows`: [n, vocab], n ≥
/// masks.len(); rows past the masks are left out).
pub fn mask_rows(rows: &[f32], masks: &[TokenMask], vocab: usize) -> Vec<f32> {
    let mut out = rows[..masks.len() * vocab].to_vec();
    for (row, mask) in out.chunks_mut(vocab).zip(masks) {
        mask.apply(row);
    }
    out
}

#[cfg(test)]
#[path = "constraint_tests.rs"]
mod tests;
