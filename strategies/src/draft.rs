//! What a drafter proposes, and the trait every draft strategy implements.

use crate::{SamplingParams, TokenId};

/// Up to k proposed tokens. `q[i]` is the drafter's distribution for token i ([vocab], after
/// the same temperature / top-k / top-p / min-p as the target's), or `None` for a
/// deterministic drafter (lookup), which verification treats as a point mass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<TokenId>,
    pub q: Option<Vec<Vec<f32>>>,
    /// A candidate tree instead of a chain: token i hangs under `parents[i]` (None: right
    /// after the pending token); see [`crate::tree`]. Trees are deterministic (no q) and are
    /// verified greedily.
    pub parents: Option<Vec<Option<usize>>>,
}

impl Draft {
    pub fn empty() -> Self {
        Self::default()
    }

    pub fn deterministic(tokens: Vec<TokenId>) -> Self {
        Self {
            tokens,
            q: None,
            parents: None,
        }
    }

    /// A candidate tree (greedy requests only).
    pub fn tree(tree: crate::tree::DraftTree) -> Self {
        Self {
            tokens: tree.tokens,
            q: None,
            parents: Some(tree.parents),
        }
    }

    /// The tree this draft is, if it is one.
    pub fn as_tree(&self) -> Option<crate::tree::DraftTree> {
        self.parents.as_ref().map(|p| crate::tree::DraftTree {
            tokens: self.tokens.clone(),
            parents: p.clone(),
        })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// What a drafter sees: the whole sequence so far (prompt, then generated tokens; the last one
/// is committed but not yet run through the target), and how the target samples, so a draft
/// model can shape q the same way.
#[derive(Debug, Clone, Copy)]
pub struct DraftContext<'a> {
    pub tokens: &'a [TokenId],
    pub prompt_len: usize,
    pub sampling: &'a SamplingParams,
    /// The target's final (normed) hidden state of the row that produced the last token
    /// ([hidden]), when the caller ran the target with hidden states (Medusa heads use it).
    pub hidden: Option<&'a [f32]>,
    /// The target's final (normed) hidden states of the rows behind the tokens the last
    /// round committed ([committed, hidden]; the first token's row after the prompt pass),
    /// when the caller ran the target with hidden states: what the EAGLE layer reads for
    /// every committed position. Empty otherwise.
    pub fresh_hidden: &'a [f32],
    /// What one more verify row costs, as a share of a plain target pass, at the load the
    /// target is under now (the caller's cost model; None: not measured). A drafted token
    /// pays for its row only when its chance of acceptance exceeds this, so drafters that
    /// know their chances (Medusa) stop there: near 0 on an idle GPU, about 0.2 on this
    /// CPU, near 1 when the batch is full.
    pub row_cost: Option<f32>,
}

/// A drafter failed; the caller falls back to plain decoding for the round and counts it.
#[derive(Debug, thiserror::Error)]
#[error("drafter failed: {0}")]
pub struct DraftError(pub String);

/// What a drafter measured about itself on the sequences it drafted before: a new
/// request's k controller starts from it rather than from nothing, so a drafter known to be
/// dear and seldom accepted is not probed again at the start of every request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrackRecord {
    /// Accepted over judged draft positions.
    pub alpha: f64,
    /// How many positions were judged (the evidence's weight).
    pub judged: f64,
    /// Seconds of one draft step, averaged.
    pub step_secs: f64,
}

/// A draft strategy.
///
/// Contract: `propose` returns at most `max_draft_tokens` tokens that would follow
/// `ctx.tokens`; an empty draft is always allowed (the round becomes a plain decode step).
/// After verification the caller reports what was committed (accepted drafts plus the
/// recovered or bonus token) through `on_commit`, so a stateful drafter (a draft model's KV
/// cache, an index) stays in step with the sequence; drafters without state ignore it.
pub trait Drafter {
    /// A short name for statistics ("plain", "ngram", …).
    fn name(&self) -> &'static str;

    fn propose(
        &mut self,
        ctx: &DraftContext<'_>,
        max_draft_tokens: usize,
    ) -> Result<Draft, DraftError>;

    /// The sequence now ends with `committed`, after the draft's first `accepted` tokens.
    fn on_commit(&mut self, ctx: &DraftContext<'_>, accepted: usize) {
        if let Some(inner) = self.wrapped_mut() {
            inner.on_commit(ctx, accepted);
        }
    }

    /// The sequence ended; a drafter that learns from finished text (suffix) records it here.
    fn finish(&mut self) {
        if let Some(inner) = self.wrapped_mut() {
            inner.finish();
        }
    }

    /// Bytes of cache the drafter keeps per token of its sequence (a draft model's keys and
    /// values), so the engine's KV budget counts them beside the target's.
    fn kv_bytes_per_token(&self) -> usize {
        self.wrapped().map_or(0, |inner| inner.kv_bytes_per_token())
    }

    /// What this drafter measured on earlier sequences, if it keeps such a record.
    fn track_record(&self) -> Option<TrackRecord> {
        self.wrapped().and_then(|inner| inner.track_record())
    }

    /// How many of a client's predicted tokens it drafted were accepted and rejected (a
    /// drafter that drafts from a prediction; OpenAI's usage reports them).
    fn prediction_tokens(&self) -> Option<crate::prediction::PredictionTokens> {
        self.wrapped().and_then(|inner| inner.prediction_tokens())
    }

    /// The drafter this one wraps, if it wraps one: every method above that a wrapper does
    /// not override goes to it, so a method added here later cannot be silently dropped by
    /// a wrapper (fault injection once hid a draft model's cache from the KV budget so).
    fn wrapped(&self) -> Option<&dyn Drafter> {
        None
    }

    /// [`Drafter::wrapped`], mutably.
    fn wrapped_mut(&mut self) -> Option<&mut dyn Drafter> {
        None
    }
}

/// No drafts: one token per target pass, the baseline every figure is compared with.
#[derive(Debug, Default, Clone)]
pub struct PlainDrafter;

impl Drafter for PlainDrafter {
    fn name(&self) -> &'static str {
        "plain"
    }

    fn propose(&mut self, _: &DraftContext<'_>, _: usize) -> Result<Draft, DraftError> {
        Ok(Draft::empty())
    }
}

/// Plain decoding over a drafter that must not draft (its cache does not fit) but whose
/// bookkeeping must go on: commits and the end still reach it (a suffix recorder caches the
/// request's text), while it proposes nothing, reserves no cache and reports no record.
pub struct NoDrafts(pub Box<dyn Drafter + Send>);

impl Drafter for NoDrafts {
    fn name(&self) -> &'static str {
        "plain"
    }

    fn propose(&mut self, _: &DraftContext<'_>, _: usize) -> Result<Draft, DraftError> {
        Ok(Draft::empty())
    }

    fn kv_bytes_per_token(&self) -> usize {
        0
    }

    fn track_record(&self) -> Option<TrackRecord> {
        None
    }

    fn prediction_tokens(&self) -> Option<crate::prediction::PredictionTokens> {
        None
    }

    fn wrapped(&self) -> Option<&dyn Drafter> {
        Some(&*self.0)
    }

    fn wrapped_mut(&mut self) -> Option<&mut dyn Drafter> {
        Some(&mut *self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SamplingParams;

    /// A drafter with a cache, a record, and a log of what it was told.
    #[derive(Default)]
    struct Recording {
        commits: Vec<usize>,
        finished: bool,
    }

    impl Drafter for Recording {
        fn name(&self) -> &'static str {
            "recording"
        }

        fn propose(&mut self, _: &DraftContext<'_>, _: usize) -> Result<Draft, DraftError> {
            Ok(Draft::deterministic(vec![1, 2]))
        }

        fn on_commit(&mut self, _: &DraftContext<'_>, accepted: usize) {
            self.commits.push(accepted);
        }

        fn finish(&mut self) {
            self.finished = true;
        }

        fn kv_bytes_per_token(&self) -> usize {
            7
        }

        fn track_record(&self) -> Option<TrackRecord> {
            Some(TrackRecord {
                alpha: 0.5,
                judged: 3.0,
                step_secs: 0.01,
            })
        }
    }

    /// A wrapper that overrides nothing but what it must.
    struct Wrapper(Recording);

    impl Drafter for Wrapper {
        fn name(&self) -> &'static str {
            "wrapper"
        }

        fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
            self.0.propose(ctx, k)
        }

        fn wrapped(&self) -> Option<&dyn Drafter> {
            Some(&self.0)
        }

        fn wrapped_mut(&mut self) -> Option<&mut dyn Drafter> {
            Some(&mut self.0)
        }
    }

    #[test]
    fn a_wrapper_passes_on_every_method_it_does_not_override() {
        let mut w = Wrapper(Recording::default());
        let sampling = SamplingParams::greedy();
        let ctx = DraftContext {
            tokens: &[5, 6],
            prompt_len: 1,
            sampling: &sampling,
            hidden: None,
            fresh_hidden: &[],
            row_cost: None,
        };
        w.on_commit(&ctx, 2);
        w.finish();
        assert_eq!(w.0.commits, vec![2]);
        assert!(w.0.finished);
        assert_eq!(w.kv_bytes_per_token(), 7);
        assert_eq!(w.track_record().map(|r| r.judged), Some(3.0));
        assert_eq!(w.prediction_tokens(), None);
        // Told to draft nothing, it still hears the sequence, and reserves and reports nothing.
        let mut quiet = NoDrafts(Box::new(Recording::default()));
        assert!(quiet.propose(&ctx, 4).unwrap().tokens.is_empty());
        quiet.on_commit(&ctx, 0);
        quiet.finish();
        assert_eq!(quiet.kv_bytes_per_token(), 0);
        assert_eq!(quiet.track_record(), None);
        let inner = quiet.wrapped().unwrap();
        assert_eq!(
            inner.kv_bytes_per_token(),
            7,
            "the inner drafter is the one wrapped"
        );
        // A drafter that wraps nothing keeps the neutral defaults.
        assert_eq!(PlainDrafter.kv_bytes_per_token(), 0);
        assert_eq!(PlainDrafter.track_record(), None);
    }
}
