//! A read-only corpus index for suffix drafting: the continuations of a context counted
//! over a fixed set of documents, shared by every scope without a lock.
//!
//! A hash map of contexts ([`crate::SuffixIndex`]) costs about 170 bytes per context and
//! holds one per token and depth: some 300 MB for 230 000 tokens at depth 8. This keeps the
//! tokens and their positions sorted by the `max_depth + 1` tokens that start there (8 bytes
//! per token): the occurrences of a context are one range of that order found by binary
//! search, and within it the occurrences are grouped by the token that follows, so each
//! continuation's count is one more search.

use std::cmp::Ordering;
use std::ops::Range;

use crate::suffix::SuffixStep;
use crate::TokenId;

/// Separates documents, so no context spans two; never drafted.
const SEP: TokenId = TokenId::MAX;
/// Positions of a context's range probed for its most frequent continuation: continuations
/// with less than 1/PROBES of the context's may be missed, which bounds a lookup's work (a
/// one-token context such as a newline has hundreds of continuations). Such a token's draft
/// score is below 1/PROBES, and a drafter keeps a token only while its score covers at
/// least the row price times 1.5 (0.3 at the CPU's price of a row).
const PROBES: usize = 8;

#[derive(Debug, Clone, Default)]
pub struct CorpusIndex {
    max_depth: usize,
    tokens: Vec<TokenId>,
    /// Every position of `tokens`, ordered by the `max_depth + 1` tokens from it.
    order: Vec<u32>,
}

impl CorpusIndex {
    pub fn new<'a>(max_depth: usize, docs: impl IntoIterator<Item = &'a [TokenId]>) -> Self {
        let max_depth = max_depth.max(1);
        let mut tokens = Vec::new();
        for doc in docs {
            tokens.extend(doc.iter().copied().filter(|&t| t != SEP));
            tokens.push(SEP);
        }
        let mut order: Vec<u32> = (0..tokens.len() as u32).collect();
        let key = |p: u32| &tokens[p as usize..(p as usize + max_depth + 1).min(tokens.len())];
        order.sort_unstable_by(|&a, &b| key(a).cmp(key(b)).then(a.cmp(&b)));
        Self {
            max_depth,
            tokens,
            order,
        }
    }

    /// Tokens indexed (documents' separators included).
    pub fn len_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// How the `len` tokens from `pos` compare with `pattern` (a shorter run, cut by the
    /// end, sorts first).
    fn cmp_at(&self, pos: u32, pattern: &[TokenId]) -> Ordering {
        let from = pos as usize;
        let got = &self.tokens[from..(from + pattern.len()).min(self.tokens.len())];
        got.cmp(pattern)
    }

    /// The range of `order` whose positions start with `pattern`, within `within`.
    fn range(&self, pattern: &[TokenId], within: Range<usize>) -> Range<usize> {
        let slice = &self.order[within.clone()];
        let lo = slice.partition_point(|&p| self.cmp_at(p, pattern) == Ordering::Less);
        let hi = slice.partition_point(|&p| self.cmp_at(p, pattern) != Ordering::Greater);
        within.start + lo..within.start + hi
    }

    /// The most frequent continuation of the deepest context of `history` found here, if
    /// deeper than `deeper_than` tokens, with its share of the context's continuations.
    pub fn best_next(&self, history: &[TokenId], deeper_than: usize) -> Option<SuffixStep> {
        (deeper_than + 1..=self.max_depth.min(history.len()))
            .rev()
            .find_map(|d| self.best_after(&history[history.len() - d..]))
    }

    /// The most frequent continuation of `context`, if it occurs followed by a token and
    /// that continuation has at least 1/[`PROBES`] of the context's (else possibly another
    /// one below that share, which no drafter's floor keeps at a real row price).
    fn best_after(&self, context: &[TokenId]) -> Option<SuffixStep> {
        let all = self.range(context, 0..self.order.len());
        // The occurrences that end a document sort last (the separator is the largest id).
        let mut pattern = context.to_vec();
        pattern.push(SEP);
        let body = all.start..all.end - self.range(&pattern, all.clone()).len();
        let total = body.len();
        let (mut best, mut counted_to): (Option<(TokenId, usize)>, usize) = (None, body.start);
        // A group of one continuation holding 1/PROBES of the range covers a probe; each
        // probe's group is one search, however many continuations the context has.
        for j in 0..PROBES {
            let probe = body.start + j * total / PROBES;
            if probe < counted_to || probe >= body.end {
                continue;
            }
            let next = self.tokens[self.order[probe] as usize + context.len()];
            *pattern.last_mut()? = next;
            let group = self.range(&pattern, counted_to..body.end);
            let count = group.len();
            counted_to = group.end;
            // Probes and groups come in token order, so a tie keeps the lower id.
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((next, count));
            }
        }
        let (token, count) = best?;
        Some(SuffixStep {
            token,
            share: count as f32 / total as f32,
            count: count as u32,
            depth: context.len(),
            from_corpus: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_continuations_of_the_deepest_context_within_documents() {
        let docs: [&[TokenId]; 3] = [&[1, 2, 3, 4], &[2, 3, 5, 2, 3, 5], &[9, 2, 3]];
        let c = CorpusIndex::new(3, docs);
        // [2, 3] is followed by 4 once and 5 twice (and ends the third document).
        let s = c.best_next(&[7, 2, 3], 0).unwrap();
        assert_eq!((s.token, s.count, s.depth), (5, 2, 2));
        assert!((s.share - 2.0 / 3.0).abs() < 1e-6);
        // [1, 2, 3] occurs once, followed by 4: deeper wins.
        let s = c.best_next(&[1, 2, 3], 0).unwrap();
        assert_eq!((s.token, s.count, s.depth, s.share), (4, 1, 3, 1.0));
        // [4] ends its document: no continuation across the separator; [9] never ends one.
        assert!(c.best_next(&[4], 0).is_none());
        assert_eq!(c.best_next(&[8, 9], 0).map(|s| s.token), Some(2));
        assert!(c.best_next(&[6], 0).is_none());
        assert!(c.best_next(&[], 0).is_none());
        // Only contexts deeper than asked for count.
        assert!(c.best_next(&[1, 2, 3], 3).is_none());
        assert_eq!(c.best_next(&[7, 2, 3], 1).map(|s| s.depth), Some(2));
    }

    #[test]
    fn agrees_with_counting_every_occurrence() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let docs: Vec<Vec<TokenId>> = (0..20)
            .map(|_| {
                (0..rng.random_range(1..40))
                    .map(|_| rng.random_range(0..6))
                    .collect()
            })
            .collect();
        let c = CorpusIndex::new(3, docs.iter().map(Vec::as_slice));
        for _ in 0..300 {
            let ctx: Vec<TokenId> = (0..rng.random_range(1..4))
                .map(|_| rng.random_range(0..6))
                .collect();
            // By brute force: the continuations of ctx in every document.
            let mut counts = std::collections::BTreeMap::new();
            for doc in &docs {
                for w in doc.windows(ctx.len() + 1) {
                    if w[..ctx.len()] == ctx[..] {
                        *counts.entry(w[ctx.len()]).or_insert(0u32) += 1;
                    }
                }
            }
            let total: u32 = counts.values().sum();
            let want = counts
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(&t, &n)| (t, n));
            let got = c.best_after(&ctx);
            match want {
                // Only a continuation under 1/PROBES of the context's may be missed.
                Some((_, n)) if (n as usize) * PROBES < total as usize => {
                    let s = got.expect("some continuation");
                    assert!(s.share * (PROBES as f32) < 1.0, "context {ctx:?}: {s:?}");
                }
                _ => assert_eq!(got.map(|s| (s.token, s.count)), want, "context {ctx:?}"),
            }
            if let Some(s) = got {
                assert_eq!(
                    s.count, counts[&s.token],
                    "context {ctx:?}: the count is exact"
                );
                assert!((s.share - s.count as f32 / total as f32).abs() < 1e-6);
            }
        }
    }
}
