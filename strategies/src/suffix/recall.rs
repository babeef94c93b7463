//! Recall: whether a tenant's cache holds an earlier answer to this very prompt. Agents,
//! retries and batch jobs resend prompts; the earlier answer then predicts the new one as a
//! client's `prediction` would, whatever drafter the route's learner prefers for fresh text.

use super::SuffixCache;
use crate::TokenId;

/// Prompt tokens at the end of a prompt that must each have followed their full-depth
/// context in earlier text before the cache counts as having seen the prompt: chat prompts
/// share their template's last tokens (and often a phrase before it), so a match of the
/// index's depth alone says little.
pub const RECALL_PROMPT_TAIL: usize = 24;

/// The part of `prompt` that [`SuffixCache::recall`] reads from a cache of `max_depth`: its
/// last [`RECALL_PROMPT_TAIL`] tokens and their contexts. A caller that sends the prompt
/// elsewhere to be recalled need send no more.
pub fn recall_window(prompt: &[TokenId], max_depth: usize) -> &[TokenId] {
    &prompt[prompt.len().saturating_sub(max_depth + RECALL_PROMPT_TAIL)..]
}

impl SuffixCache {
    /// Tokens (up to `limit`) of an earlier continuation of `prompt` that the cache holds
    /// (only its [`recall_window`] is read): 0 unless the prompt's last
    /// [`RECALL_PROMPT_TAIL`] tokens each followed their full-depth context before; then how
    /// far a continuation runs while each step's full-depth context has one continuation with
    /// at least half of its count. (Half, not more: an answer that copies a line of its prompt
    /// meets that line's context with two continuations.)
    pub fn recall(&self, prompt: &[TokenId], limit: usize) -> usize {
        let depth = self.index.max_depth;
        if prompt.len() < depth + RECALL_PROMPT_TAIL {
            return 0;
        }
        let followed = |i: usize| {
            self.index
                .counts(&prompt[i - depth..i])
                .is_some_and(|m| m.iter().any(|&(t, _)| t == prompt[i]))
        };
        if !(prompt.len() - RECALL_PROMPT_TAIL..prompt.len()).all(followed) {
            return 0;
        }
        let mut context = prompt[prompt.len() - depth..].to_vec();
        while context.len() - depth < limit {
            let Some(counts) = self.index.counts(&context[context.len() - depth..]) else {
                break;
            };
            let total: u32 = counts.iter().map(|&(_, c)| c).sum();
            // Highest count; the lowest id breaks a tie, as drafting does.
            let best = counts
                .iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
            match best {
                Some(&(token, count)) if 2 * count >= total => context.push(token),
                _ => break,
            }
        }
        context.len() - depth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chat-like prompt: a shared head and template tail around a message of its own.
    fn prompt(message: &[TokenId]) -> Vec<TokenId> {
        let head = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let tail = [90, 91, 92, 93, 94];
        head.iter().chain(message).chain(&tail).copied().collect()
    }

    fn message(seed: TokenId) -> Vec<TokenId> {
        (0..30).map(|i| 100 + seed * 50 + i).collect()
    }

    #[test]
    fn a_repeated_prompt_recalls_its_earlier_answer() {
        let mut cache = SuffixCache::new(8, 10_000);
        let answer: Vec<TokenId> = (500..540).collect();
        let first = prompt(&message(1));
        cache.insert(first.iter().chain(&answer).copied().collect());
        assert_eq!(cache.recall(&first, 16), 16, "capped at the limit");
        assert_eq!(cache.recall(&first, 100), 40, "the whole answer");
        // A prompt that shares only the head and the template recalls nothing, though its
        // last `depth` tokens were seen.
        let other = prompt(&message(2));
        assert_eq!(cache.recall(&other, 16), 0);
        // Nor does one that shares all but a word in the tail's reach.
        let mut edited = message(1);
        edited[25] = 7000;
        assert_eq!(cache.recall(&prompt(&edited), 16), 0);
        // Nor a prompt too short to check.
        assert_eq!(cache.recall(&first[first.len() - 20..], 16), 0);
        // Only the last depth + tail tokens are read (the gateway sends no more).
        let window = recall_window(&first, 8);
        assert_eq!(window.len(), 8 + RECALL_PROMPT_TAIL);
        assert_eq!(cache.recall(window, 100), 40);
        assert_eq!(
            cache.recall(&window[1..], 100),
            0,
            "and a token less is too short"
        );
    }

    #[test]
    fn a_continuation_is_recalled_as_far_as_earlier_answers_agree() {
        let p = prompt(&message(3));
        let same: Vec<TokenId> = (500..510).collect();
        // Earlier answers agree for ten tokens, then part ways.
        let recall_after = |ends: &[TokenId]| {
            let mut cache = SuffixCache::new(8, 10_000);
            for &end in ends {
                let tail = [end, end + 1];
                cache.insert(p.iter().chain(&same).chain(&tail).copied().collect());
            }
            cache.recall(&p, 100)
        };
        assert_eq!(recall_after(&[600, 600, 700]), 12, "2 of 3");
        assert_eq!(recall_after(&[600, 700]), 12, "half");
        assert_eq!(
            recall_after(&[600, 700, 800]),
            10,
            "a third each: no answer"
        );
    }
}
