//! The rows a sequence reads: those its tokens are chosen from (penalised, then masked by
//! the grammar), the top-2 gaps a shadow check compares, and the log-probabilities reported.

use std::borrow::Cow;

use specgate_strategies::{Draft, TokenId};

use super::SequenceState;
use crate::engine::constrained::{Constrained, RoundConstraint};
use crate::engine::logprobs::{token_logprob, LogprobQueue, TokenLogprob};

impl SequenceState {
    /// A round's rows as tokens are chosen from them ([rows, vocab]): penalised along the
    /// draft, then masked by the grammar; the target's own when neither applies.
    pub(super) fn judged_rows<'r>(
        &self,
        rows: &'r [f32],
        vocab: usize,
        draft: &Draft,
        rc: Option<&RoundConstraint>,
    ) -> Cow<'r, [f32]> {
        let shaped = match self.penalties.as_ref() {
            Some(p) => Cow::Owned(p.round_rows(rows, vocab, draft)),
            None => Cow::Borrowed(rows),
        };
        match rc {
            Some(rc) => Cow::Owned(Constrained::masked(&shaped, rc, vocab)),
            None => shaped,
        }
    }

    /// Record every generated token's log-probability and its `top` likeliest alternatives'.
    pub fn track_logprobs(&mut self, top: usize) {
        self.logprobs = Some(LogprobQueue::new(top));
    }

    /// The log-probabilities not handed out yet of the tokens whose text has been released
    /// (all of them once the sequence is finished; none when not tracked).
    pub fn take_logprobs(&mut self) -> Vec<TokenLogprob> {
        let released = self.text.len();
        self.logprobs
            .as_mut()
            .map(|q| q.take(released))
            .unwrap_or_default()
    }

    /// Record the log-probabilities of the tokens the last commit added to the output:
    /// `tokens[j]` came from row `row(j)` ([vocab]). Tokens the commit did not keep (EOS,
    /// past a stop or max_tokens) get none; the token that completes a stop string is kept
    /// and reported, though its text is cut.
    pub(super) fn record_logprobs<'r>(
        &mut self,
        before: usize,
        tokens: &[TokenId],
        row: impl Fn(usize) -> &'r [f32],
    ) {
        let kept = self.ids.len() - before;
        if let Some(q) = self.logprobs.as_mut() {
            for (j, &t) in tokens.iter().enumerate().take(kept) {
                q.record(token_logprob(row(j), t, q.top()));
            }
        }
    }

    /// Record the top-2 logit gap behind every committed token: a shadow check uses it to
    /// tell a numerical tie from a real divergence.
    pub fn track_gaps(&mut self) {
        self.gaps = Some(Vec::new());
    }

    /// The recorded gaps, one per committed token (EOS included), when tracked.
    pub fn gaps(&self) -> &[f32] {
        self.gaps.as_deref().unwrap_or_default()
    }
}

/// The difference between the two largest logits of a row ([vocab]).
pub fn top2_gap(row: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in row {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    a - b
}
