//! Suffix decoding: continuations scored by how often they followed the current suffix, in the
//! prompt and output so far and in earlier requests, so the draft stops early when the
//! evidence runs thin — the draft length adapts to how well the match is supported.
//!
//! The index counts, for every context of 1..=`max_depth` tokens, the tokens that followed it
//! (a suffix tree's node counts, kept in a hash map keyed by the context). A proposal matches
//! the deepest context that has been seen, takes its most frequent continuation, multiplies the
//! running score by that continuation's share times [`match_confidence`] of the match's depth,
//! and stops when the score falls below what a verify row costs this round (`row_cost` times
//! [`TOKENS_PER_PASS_FORGONE`], or `min_score` when the caller measured none): the score
//! estimates the chance that the whole draft so far is accepted, so a token below it is
//! expected to commit less than its row's time would elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::corpus::CorpusIndex;
use crate::draft::{Draft, DraftContext, DraftError, Drafter};
use crate::TokenId;

mod index;
mod recall;

pub use index::{SuffixCache, SuffixIndex};
pub use recall::{recall_window, RECALL_PROMPT_TAIL};

/// Shared between the drafters of one scope (a process now, a tenant in the gateway).
pub type SharedSuffixCache = Arc<Mutex<SuffixCache>>;

/// A read-only index shared by every scope: text that belongs to no tenant (the target's
/// own answers to generic prompts), so no lock and no eviction.
pub type SharedCorpus = Arc<CorpusIndex>;

/// The suffix drafter of one sequence.
#[derive(Debug)]
pub struct SuffixDrafter {
    local: SuffixIndex,
    indexed: usize, // tokens of the sequence already counted in `local`
    history: Vec<TokenId>,
    shared: Option<SharedSuffixCache>,
    corpus: Option<SharedCorpus>,
    pub min_score: f32,
}

impl SuffixDrafter {
    pub fn new(max_depth: usize, min_score: f32, shared: Option<SharedSuffixCache>) -> Self {
        Self {
            local: SuffixIndex::new(max_depth),
            indexed: 0,
            history: Vec::new(),
            shared,
            corpus: None,
            min_score,
        }
    }

    /// Also draft from `corpus` where it matches a longer context than this sequence and
    /// the scope's earlier requests do.
    pub fn with_corpus(mut self, corpus: Option<SharedCorpus>) -> Self {
        self.corpus = corpus;
        self
    }

    fn sync(&mut self, tokens: &[TokenId]) {
        let common = self
            .history
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        if common < self.history.len() {
            // A different sequence: start the local index over.
            self.local = SuffixIndex::new(self.local.max_depth);
            self.indexed = 0;
        }
        self.history = tokens.to_vec();
        self.local.add_range(&self.history, self.indexed);
        self.indexed = self.history.len();
    }
}

/// What a verify row's time would commit if spent elsewhere, in tokens per pass: a drafted
/// token must be at least this many times as likely to be accepted as its row's price. At
/// 1 (a row worth one plain step's share) the draft runs on while its score still pays the
/// row but lowers the rate speculation already achieves; the best rate is reached by
/// stopping where the next token's chance falls below that rate times the price. Where
/// suffix drafting pays, that rate is 1.1–1.7 tokens per pass. `examples/suffix_replay`
/// (plain greedy output replayed through the drafter at this CPU's verify costs) found 1.5
/// ahead of 1 in every set (code_edit, rag, creative, chat), output length (128, 256) and
/// k (2 to 32), by up to 6%, bar two ties (code_edit at k = 2 and at k = 4, one length each).
pub const TOKENS_PER_PASS_FORGONE: f32 = 1.5;

/// How likely a continuation seen after a match of `depth` tokens is to be accepted when it
/// is the only one seen: a one-token match ("the", a newline) predicts little, a long one
/// predicts well. Fitted to greedy SmolLM2-135M output on the four shipped prompt sets
/// (acceptance of sole continuations by depth 1…8: 0.27, 0.43, 0.52, 0.57, 0.75, 0.82, 0.78,
/// 0.94); a match of the index's full depth may be longer still.
pub fn match_confidence(depth: usize, max_depth: usize) -> f32 {
    if depth >= max_depth {
        0.95
    } else {
        1.0 - 0.7 * 0.8f32.powi(depth.saturating_sub(1) as i32)
    }
}

/// One token of a continuation and the evidence behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SuffixStep {
    pub token: TokenId,
    /// The token's share of the continuations seen after the match.
    pub share: f32,
    /// How many times it followed the match.
    pub count: u32,
    /// The match's length in tokens (at most the index's depth).
    pub depth: usize,
    /// Whether the answer corpus supplied it (else the sequence or its scope's cache).
    pub from_corpus: bool,
}

/// The candidates for the next token, best first: the corpus's where it matches deeper
/// than the sequence and its scope do, then the best continuation of the deepest match
/// among their (local, shared) counts. The request's own text and its scope's come first
/// at equal depth: a prompt being copied predicts its own next token better than the
/// corpus's most common phrase does.
fn next_candidates(
    local: &SuffixIndex,
    shared: Option<&SuffixIndex>,
    corpus: Option<&CorpusIndex>,
    ctx: &[TokenId],
) -> [Option<SuffixStep>; 2] {
    let l = local.lookup(ctx);
    let s = shared.and_then(|s| s.lookup(ctx));
    let depth = l.map_or(0, |x| x.0).max(s.map_or(0, |x| x.0));
    let from_corpus = corpus.and_then(|c| c.best_next(ctx, depth));
    let [l, s] = [l, s].map(|m| m.filter(|(d, _)| *d == depth).map(|(_, m)| m));
    // One list is read as it is; only the sequence's and its scope's counts at one depth
    // are summed per token.
    let summed: Vec<(TokenId, u32)>;
    let merged: &[(TokenId, u32)] = match (l, s) {
        (Some(a), Some(b)) => {
            let mut sum: HashMap<TokenId, u32> = HashMap::new();
            for &(t, c) in a.iter().chain(b) {
                *sum.entry(t).or_default() += c;
            }
            summed = sum.into_iter().collect();
            &summed
        }
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => &[],
    };
    let total: u32 = merged.iter().map(|&(_, c)| c).sum();
    // Highest count; the lowest id breaks a tie so proposals are deterministic.
    let own = merged
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|&(token, count)| SuffixStep {
            token,
            share: count as f32 / total as f32,
            count,
            depth,
            from_corpus: false,
        });
    [from_corpus, own]
}

impl SuffixDrafter {
    /// Up to `k` tokens of the best continuation of `tokens`, each with its evidence, without
    /// any stopping rule: what `propose` scores.
    pub fn continuation(
        &mut self,
        tokens: &[TokenId],
        k: usize,
    ) -> Result<Vec<SuffixStep>, DraftError> {
        self.continuation_while(tokens, k, |_| true)
    }

    /// `continuation`, where each step is the first candidate `keep` takes (a corpus step
    /// it refuses leaves the sequence's own shallower match to try), ending where it takes
    /// none. `keep` must change nothing when it refuses.
    fn continuation_while(
        &mut self,
        tokens: &[TokenId],
        k: usize,
        mut keep: impl FnMut(&SuffixStep) -> bool,
    ) -> Result<Vec<SuffixStep>, DraftError> {
        self.sync(tokens);
        // A panic while another request held the cache leaves it usable: a draft is only
        // a guess the target checks, so stale or partial entries cannot change an answer.
        let guard = self
            .shared
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()));
        let shared = guard.as_deref().map(|c| &c.index);
        let corpus = self.corpus.as_deref();
        let mut context = tokens.to_vec();
        let mut steps = Vec::with_capacity(k);
        while steps.len() < k {
            let candidates = next_candidates(&self.local, shared, corpus, &context);
            let Some(step) = candidates.into_iter().flatten().find(&mut keep) else {
                break;
            };
            steps.push(step);
            context.push(step.token);
        }
        Ok(steps)
    }
}

impl Drafter for SuffixDrafter {
    fn name(&self) -> &'static str {
        "suffix"
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        let floor = ctx
            .row_cost
            .map_or(self.min_score, |c| c * TOKENS_PER_PASS_FORGONE);
        let max_depth = self.local.max_depth;
        let mut score = 1.0f32;
        let draft = self
            .continuation_while(ctx.tokens, k, |step| {
                let with = score * step.share * match_confidence(step.depth, max_depth);
                let keep = with >= floor;
                if keep {
                    score = with;
                }
                keep
            })?
            .into_iter()
            .map(|step| step.token)
            .collect();
        Ok(Draft::deterministic(draft))
    }

    fn on_commit(&mut self, ctx: &DraftContext<'_>, _accepted: usize) {
        self.sync(ctx.tokens);
    }

    /// Hand the finished sequence to the shared cache for later requests.
    fn finish(&mut self) {
        if let Some(shared) = &self.shared {
            let mut cache = shared.lock().unwrap_or_else(|p| p.into_inner());
            cache.insert(std::mem::take(&mut self.history));
        }
        self.local = SuffixIndex::new(self.local.max_depth);
        self.indexed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SamplingParams;

    fn propose(d: &mut SuffixDrafter, tokens: &[TokenId], k: usize) -> Vec<TokenId> {
        propose_at(d, tokens, k, None)
    }

    fn propose_at(
        d: &mut SuffixDrafter,
        tokens: &[TokenId],
        k: usize,
        row_cost: Option<f32>,
    ) -> Vec<TokenId> {
        let sp = SamplingParams::greedy();
        let ctx = DraftContext {
            tokens,
            prompt_len: tokens.len(),
            sampling: &sp,
            hidden: None,
            fresh_hidden: &[],
            row_cost,
        };
        d.propose(&ctx, k).unwrap().tokens
    }

    #[test]
    fn follows_the_most_frequent_continuation_of_the_deepest_match() {
        let mut d = SuffixDrafter::new(4, 0.0, None);
        assert_eq!(propose(&mut d, &[1, 2, 3, 4, 1, 2, 3], 3), vec![4, 1, 2]);
        let mut d = SuffixDrafter::new(4, 0.0, None);
        assert_eq!(
            propose(&mut d, &[1, 2, 3, 4, 5], 3),
            Vec::<u32>::new(),
            "no match, no draft"
        );
        assert_eq!(
            propose(&mut SuffixDrafter::new(4, 0.0, None), &[], 3),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn low_support_stops_the_draft_early() {
        // After 7: 8 twice, 9 twice (share 0.5, the lower id wins); after 8: always 7.
        let h = [7, 8, 7, 9, 7, 8, 7, 9, 7];
        let mut d = SuffixDrafter::new(1, 0.3, None);
        // Depth-1 matches are full-depth here (confidence 0.95). Scores: 8 → 0.475,
        // 7 → 0.451, then 0.214 < 0.3 stops the draft.
        assert_eq!(propose(&mut d, &h, 4), vec![8, 7]);
        let mut strict = SuffixDrafter::new(1, 0.6, None);
        assert!(propose(&mut strict, &h, 4).is_empty());
        // The round's row price, when the caller measured one, sets the floor instead, at
        // 1.5 times the price: this CPU's 0.21 (floor 0.315) stops after 7 (0.451), a price of
        // 0.14 (floor 0.21) takes one more (0.214 clears it, then 0.203 does not), free rows
        // take all, dear ones (a full batch) none.
        assert_eq!(propose_at(&mut d, &h, 4, Some(0.21)), vec![8, 7]);
        assert_eq!(propose_at(&mut d, &h, 4, Some(0.14)), vec![8, 7, 8]);
        assert_eq!(propose_at(&mut d, &h, 4, Some(0.0)), vec![8, 7, 8, 7]);
        assert!(propose_at(&mut d, &h, 4, Some(0.4)).is_empty());
    }

    #[test]
    fn a_long_match_drafts_on_where_a_one_token_match_stops() {
        // [1, 2, 3, 4] recurs: its continuation is backed by a full-depth match.
        let long = [1, 2, 3, 4, 10, 11, 12, 13, 50, 1, 2, 3, 4];
        assert_eq!(
            propose(&mut SuffixDrafter::new(4, 0.2, None), &long, 3),
            vec![10, 11, 12]
        );
        // Only [7] recurs: 20 is worth 0.3 alone; 21 after a 2-token match brings the
        // draft's score to 0.3 × 0.44 < 0.2.
        let short = [7, 20, 21, 22, 60, 7];
        assert_eq!(
            propose(&mut SuffixDrafter::new(4, 0.2, None), &short, 3),
            vec![20]
        );
        assert!(match_confidence(1, 8) < match_confidence(2, 8));
        assert!(match_confidence(7, 8) < match_confidence(8, 8));
    }

    #[test]
    fn earlier_requests_draft_for_later_ones_and_the_cache_is_bounded() {
        let shared: SharedSuffixCache = Arc::new(Mutex::new(SuffixCache::new(4, 12)));
        let mut first = SuffixDrafter::new(4, 0.0, Some(shared.clone()));
        propose(&mut first, &[10, 11, 12, 13, 14, 15], 1);
        first.finish();
        let mut second = SuffixDrafter::new(4, 0.0, Some(shared.clone()));
        assert_eq!(propose(&mut second, &[99, 11, 12], 3), vec![13, 14, 15]);
        // Two more documents push the first out of a 12-token budget.
        shared.lock().unwrap().insert(vec![1; 6]);
        shared.lock().unwrap().insert(vec![2; 6]);
        assert_eq!(shared.lock().unwrap().len_tokens(), 12);
        let mut third = SuffixDrafter::new(4, 0.0, Some(shared));
        assert!(
            propose(&mut third, &[99, 11, 12], 3).is_empty(),
            "evicted text no longer drafts"
        );
    }

    #[test]
    fn the_corpus_drafts_where_it_matches_deeper_and_yields_to_the_sequence_at_equal_depth() {
        let corpus: SharedCorpus = Arc::new(CorpusIndex::new(4, [&[5, 6, 7, 8, 9][..]]));
        let drafter = || SuffixDrafter::new(4, 0.0, None).with_corpus(Some(corpus.clone()));
        // Nothing of the sequence matches [6, 7]: the corpus continues it.
        assert_eq!(propose(&mut drafter(), &[1, 6, 7], 2), vec![8, 9]);
        // The sequence itself continued [6, 7] with 3 (a depth-2 match, as deep as the
        // corpus's): its own text wins.
        assert_eq!(propose(&mut drafter(), &[6, 7, 3, 1, 6, 7], 1), vec![3]);
        // A deeper corpus match beats a shallower one of the sequence.
        assert_eq!(propose(&mut drafter(), &[7, 3, 5, 6, 7], 2), vec![8, 9]);
        assert!(
            propose(&mut SuffixDrafter::new(4, 0.0, None), &[1, 6, 7], 2).is_empty(),
            "without the corpus nothing matches"
        );
    }

    #[test]
    fn a_corpus_step_too_weak_to_draft_leaves_the_sequences_own_match_to_draft() {
        // The corpus continues [1, 2, 3] four ways (share 0.25 each); the sequence copies
        // its own [2, 3] → 9 (depth 2, share 1: score 0.44 against a floor of 0.3).
        let docs: [&[TokenId]; 4] = [&[1, 2, 3, 4], &[1, 2, 3, 5], &[1, 2, 3, 6], &[1, 2, 3, 7]];
        let corpus: SharedCorpus = Arc::new(CorpusIndex::new(4, docs));
        let mut d = SuffixDrafter::new(4, 0.3, None).with_corpus(Some(corpus));
        assert_eq!(propose(&mut d, &[2, 3, 9, 8, 1, 2, 3], 1), vec![9]);
    }
}
