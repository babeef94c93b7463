//! A tenant's suffix cache learns from every request of the tenant, not only from those a
//! suffix drafter served: the cache's promise is "earlier requests' text", and a route that
//! tried Medusa heads or ran plain must not lose that text for its later requests (a replay's
//! repeated prompts found nothing to copy on the routes that had explored).

use crate::draft::{Draft, DraftContext, DraftError, Drafter};
use crate::fallback::SendDrafter;
use crate::suffix::SharedSuffixCache;
use crate::TokenId;

/// Wraps a drafter that does not feed the cache itself, and feeds it the sequence at its end.
pub struct SuffixRecorder {
    inner: SendDrafter,
    cache: SharedSuffixCache,
    /// The sequence so far (prompt and committed output), as of the last commit.
    history: Vec<TokenId>,
}

impl SuffixRecorder {
    pub fn new(inner: SendDrafter, cache: SharedSuffixCache) -> Self {
        Self {
            inner,
            cache,
            history: Vec::new(),
        }
    }
}

impl Drafter for SuffixRecorder {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        self.inner.propose(ctx, k)
    }

    fn on_commit(&mut self, ctx: &DraftContext<'_>, accepted: usize) {
        // A sequence only grows by its commits: copy the new tokens, not the whole of it.
        match ctx.tokens.get(self.history.len()..) {
            Some(new) => self.history.extend_from_slice(new),
            None => {
                self.history.clear();
                self.history.extend_from_slice(ctx.tokens);
            }
        }
        self.inner.on_commit(ctx, accepted);
    }

    fn finish(&mut self) {
        if !self.history.is_empty() {
            // As SuffixDrafter::finish: a panic elsewhere leaves the cache usable.
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.insert(std::mem::take(&mut self.history));
        }
        self.inner.finish();
    }

    fn wrapped(&self) -> Option<&dyn Drafter> {
        Some(&*self.inner)
    }

    fn wrapped_mut(&mut self) -> Option<&mut dyn Drafter> {
        Some(&mut *self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suffix::{SuffixCache, SuffixDrafter};
    use crate::{PlainDrafter, SamplingParams};
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_plain_request_teaches_the_suffix_drafter_of_the_next() {
        let cache: SharedSuffixCache = Arc::new(Mutex::new(SuffixCache::new(8, 10_000)));
        let sampling = SamplingParams::greedy();
        let ctx = |tokens: &'static [TokenId]| DraftContext {
            tokens,
            prompt_len: 2,
            sampling: &sampling,
            hidden: None,
            fresh_hidden: &[],
            row_cost: None,
        };
        // A plain request answers [1, 2] with 10 11 12 13 14, one token a round.
        let mut plain = SuffixRecorder::new(Box::new(PlainDrafter), Arc::clone(&cache));
        let answer: &'static [TokenId] = &[1, 2, 10, 11, 12, 13, 14];
        for end in 3..=answer.len() {
            assert!(plain
                .propose(&ctx(&answer[..end - 1]), 4)
                .unwrap()
                .is_empty());
            plain.on_commit(&ctx(&answer[..end]), 0);
        }
        plain.finish();
        assert_eq!(cache.lock().unwrap().len_tokens(), answer.len());
        // The next request of the tenant asks the same: its suffix drafter copies the answer.
        let mut suffix = SuffixDrafter::new(8, 0.0, Some(cache));
        let draft = suffix.propose(&ctx(&answer[..3]), 4).unwrap();
        assert_eq!(draft.tokens, vec![11, 12, 13, 14]);
    }
}
