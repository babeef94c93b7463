//! Prompt lookup (n-gram) drafting: find the most recent earlier occurrence of the sequence's
//! last n tokens (n from `max_n` down to `min_n`) and propose what followed it. Nearly free,
//! and strong wherever the output copies its input: edits, extraction, RAG answers.

use crate::draft::{Draft, DraftContext, DraftError, Drafter};
use crate::TokenId;

#[derive(Debug, Clone)]
pub struct NgramDrafter {
    pub min_n: usize,
    pub max_n: usize,
}

impl Default for NgramDrafter {
    fn default() -> Self {
        Self { min_n: 1, max_n: 4 }
    }
}

/// The tokens that followed the most recent earlier match of `history`'s last n tokens,
/// trying n = max_n down to min_n; empty when nothing matches.
pub fn ngram_lookup(history: &[TokenId], min_n: usize, max_n: usize, k: usize) -> Vec<TokenId> {
    if k == 0 {
        return Vec::new();
    }
    let len = history.len();
    for n in (min_n.max(1)..=max_n).rev() {
        if n >= len {
            continue;
        }
        let suffix = &history[len - n..];
        // Most recent match first; a match must end before the suffix itself starts.
        for start in (0..len - n).rev() {
            if &history[start..start + n] == suffix {
                let from = start + n;
                let to = (from + k).min(len);
                return history[from..to].to_vec();
            }
        }
    }
    Vec::new()
}

impl Drafter for NgramDrafter {
    fn name(&self) -> &'static str {
        "ngram"
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        Ok(Draft::deterministic(ngram_lookup(
            ctx.tokens, self.min_n, self.max_n, k,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        /// (history, min_n, max_n, k, expected)
        type Case = (&'static [u32], usize, usize, usize, &'static [u32]);
        let cases: &[Case] = &[
            (&[1, 2, 3, 4, 1, 2, 3], 2, 2, 3, &[4, 1, 2]),
            (&[1, 2, 3, 4, 1, 2, 3], 1, 3, 5, &[4, 1, 2, 3]),
            (&[1, 2, 3, 4, 5], 1, 3, 3, &[]),           // no match
            (&[], 1, 3, 3, &[]),                        // empty history
            (&[7], 1, 3, 3, &[]),                       // nothing before the suffix
            (&[5, 9, 5, 8, 5], 1, 1, 2, &[8, 5]),       // most recent match wins
            (&[1, 2, 9, 1, 2, 7, 1, 2], 2, 2, 1, &[7]), // most recent of two matches
            (&[1, 2, 3, 1, 2, 3], 1, 3, 0, &[]),        // k = 0
            (&[4, 4, 4, 4], 1, 2, 3, &[4]),             // match overlapping the suffix
        ];
        for (history, min_n, max_n, k, expected) in cases {
            assert_eq!(
                ngram_lookup(history, *min_n, *max_n, *k),
                expected.to_vec(),
                "history {history:?} n {min_n}..={max_n} k {k}"
            );
        }
    }

    #[test]
    fn longer_ngrams_take_precedence() {
        // n = 1 would match the last "3" (followed by 9); n = 2 matches "2 3" (followed by 4).
        let h = [2, 3, 4, 0, 3, 9, 2, 3];
        assert_eq!(ngram_lookup(&h, 1, 2, 1), vec![4]);
        assert_eq!(ngram_lookup(&h, 1, 1, 1), vec![9]);
    }
}
