//! A sequence's output constraint through its rounds: the first token's mask, the forced
//! tokens drafted for free, each draft checked (and cut) before its target pass, the rows
//! masked before verification, and the grammar moved to what was committed. The rules that
//! keep this exact are `specgate_strategies::constraint`'s; this is their bookkeeping.

use specgate_strategies::{
    constrain_draft, mask_rows, ConstrainedRound, ConstraintError, Draft, TokenConstraint, TokenId,
};

/// Most forced tokens drafted in one round: each costs a verify row and is accepted nearly
/// always, but a row is not free on a CPU or in a full batch.
pub const FORCED_MAX: usize = 16;

pub struct Constrained {
    grammar: Box<dyn TokenConstraint>,
    /// A failure while proposing, reported when the round settles (the round runs, its
    /// rows are not used).
    failed: Option<ConstraintError>,
}

/// What a round needs at settling: the masks of its rows, the forbidden draft token, and
/// how the grammar was left.
#[derive(Debug)]
pub struct RoundConstraint {
    pub round: ConstrainedRound,
    /// The draft is the grammar's forced tokens, not the drafter's.
    pub forced: bool,
}

impl Constrained {
    pub fn new(grammar: Box<dyn TokenConstraint>) -> Self {
        Self {
            grammar,
            failed: None,
        }
    }

    /// The prompt pass's last row masked for the first token ([vocab]).
    pub fn first_row(&mut self, row: &[f32], vocab: usize) -> Result<Vec<f32>, ConstraintError> {
        let mask = self.grammar.mask()?;
        Ok(mask_rows(row, &[mask], vocab))
    }

    /// Advance over committed tokens.
    pub fn commit(&mut self, tokens: &[TokenId]) -> Result<(), ConstraintError> {
        self.grammar.consume(tokens)
    }

    /// The tokens the grammar forces next, at most `cap` (none when it leaves a choice).
    pub fn forced(&mut self, cap: usize) -> Option<Draft> {
        if cap == 0 || self.failed.is_some() {
            return None;
        }
        let mut forced = self.grammar.forced();
        forced.truncate(cap);
        (!forced.is_empty()).then(|| Draft::deterministic(forced))
    }

    /// Check the round's draft, cutting it where the grammar forbids a token. On a failure
    /// the draft is emptied and the failure kept for settling.
    pub fn check(&mut self, draft: &mut Draft, forced: bool) -> Option<RoundConstraint> {
        if self.failed.is_some() {
            *draft = Draft::empty();
            return None;
        }
        match constrain_draft(&mut *self.grammar, draft) {
            Ok(round) => Some(RoundConstraint { round, forced }),
            Err(e) => {
                *draft = Draft::empty();
                self.failed = Some(e);
                None
            }
        }
    }

    /// The failure kept from proposing, if any.
    pub fn take_failure(&mut self) -> Option<ConstraintError> {
        self.failed.take()
    }

    /// The draft that verification judges when the grammar cut a chain at a forbidden
    /// token: the kept drafts, then that token (with its q row when the drafter sampled it).
    pub fn judged_draft(
        draft: &Draft,
        forbidden: Option<(TokenId, Option<Vec<f32>>)>,
    ) -> Option<Draft> {
        let (token, q) = forbidden?;
        let mut d = draft.clone();
        d.tokens.push(token);
        if let (Some(qs), Some(q)) = (d.q.as_mut(), q) {
            qs.push(q);
        }
        Some(d)
    }

    /// The round's rows masked ([rows, vocab] → [masks, vocab]).
    pub fn masked(rows: &[f32], rc: &RoundConstraint, vocab: usize) -> Vec<f32> {
        mask_rows(rows, &rc.round.masks, vocab)
    }

    /// Move the grammar to the round's outcome: a chain's rejected drafts leave it, then
    /// the committed tokens it has not consumed yet enter it.
    pub fn settle(
        &mut self,
        rc: &RoundConstraint,
        committed: &[TokenId],
    ) -> Result<(), ConstraintError> {
        let consumed = rc.round.consumed;
        let accepted = committed.len() - 1;
        self.grammar.rollback(consumed.saturating_sub(accepted))?;
        self.grammar.consume(&committed[consumed.min(accepted)..])
    }
}
