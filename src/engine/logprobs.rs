//! Log-probabilities of generated tokens, as OpenAI's `logprobs` reports them.
//!
//! They come from the target's own distribution: the log-softmax of its logits before
//! temperature, top-k, top-p or min-p (what vLLM reports by default), for the committed token
//! and the likeliest alternatives. A speculative round's rows are the target's own, computed
//! with the same bits as plain decoding's, so speculation does not change them.

use std::collections::VecDeque;

use specgate_strategies::top_n::top_logits;
use specgate_strategies::TokenId;

/// The most alternatives a request may ask for (OpenAI's limit for chat).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// The floor reported for an impossible token (JSON has no −∞; vLLM reports the same).
pub const MIN_LOGPROB: f32 = -9999.0;

/// One generated token's log-probability and the `top` likeliest tokens' at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    pub logprob: f32,
    /// Likeliest first; ties in id order.
    pub top: Vec<(TokenId, f32)>,
}

/// `token`'s log-probability under `row` (the logits of its position, [vocab]) and the
/// `top` likeliest tokens'.
pub fn token_logprob(row: &[f32], token: TokenId, top: usize) -> TokenLogprob {
    let (max, ln_sum) = normaliser(row);
    // x − max first: subtracting a rounded log-sum-exp from large logits loses digits.
    let log_p = |x: f32| ((f64::from(x - max) - ln_sum) as f32).max(MIN_LOGPROB);
    let logprob = row.get(token as usize).map_or(MIN_LOGPROB, |&x| log_p(x));
    let top = top_logits(row, top)
        .into_iter()
        .map(|(id, x)| (id, log_p(x)))
        .collect();
    TokenLogprob {
        token,
        logprob,
        top,
    }
}

/// The row's maximum m and ln Σ exp(x − m), with the SIMD exponential the attention softmax
/// uses (one row of this vocabulary costs tens of microseconds, not hundreds). It works in
/// place, so the row goes through it in slices copied to a buffer that stays in L1.
fn normaliser(row: &[f32]) -> (f32, f64) {
    const SLICE: usize = 512;
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return (max, 0.0);
    }
    let mut buf = [0.0f32; SLICE];
    let sum: f64 = row
        .chunks(SLICE)
        .map(|part| {
            let buf = &mut buf[..part.len()];
            buf.copy_from_slice(part);
            specgate_kernels::vexp::exp_sub_sum(buf, max)
        })
        .sum();
    (max, sum.ln())
}

/// Generated tokens' log-probabilities, handed out with their text: an entry leaves once
/// the text released to the client covers its token's (a token whose text is held back, by a
/// possible stop string or an unfinished character, is reported in the chunk that shows it).
/// After [`LogprobQueue::release_all`] (the sequence ended) every entry leaves, including
/// the token that completed a stop string, whose text is cut.
#[derive(Debug, Default)]
pub struct LogprobQueue {
    /// Alternatives per entry.
    top: usize,
    /// Bytes of decoded text so far.
    produced: usize,
    /// Kept tokens not handed out, in order.
    slots: VecDeque<Slot>,
    /// The first `recorded` slots have their entries (entries are recorded in token order).
    recorded: usize,
    all_released: bool,
}

/// One kept token waiting to be handed out.
#[derive(Debug)]
struct Slot {
    /// Where its text ends in the decoded text (None until its character is whole, or while
    /// it has no text of its own yet: it ends where the next visible text does).
    end: Option<usize>,
    /// Recorded after the token is committed.
    entry: Option<TokenLogprob>,
}

impl LogprobQueue {
    pub fn new(top: usize) -> Self {
        Self {
            top,
            ..Self::default()
        }
    }

    /// Alternatives asked for per token.
    pub fn top(&self) -> usize {
        self.top
    }

    /// A kept token was committed; `piece`: the bytes of text it completed (None while its
    /// character is unfinished or it decoded to nothing). Tokens waiting end where the next
    /// piece ends.
    pub fn committed(&mut self, piece: Option<usize>) {
        let end = piece.map(|bytes| {
            self.produced += bytes;
            self.produced
        });
        if end.is_some() {
            for slot in self.slots.iter_mut().rev().take_while(|s| s.end.is_none()) {
                slot.end = end;
            }
        }
        self.slots.push_back(Slot { end, entry: None });
    }

    /// The entry of the oldest committed token without one.
    pub fn record(&mut self, entry: TokenLogprob) {
        let slot = self.slots.get_mut(self.recorded);
        debug_assert!(slot.is_some(), "entry without a token");
        if let Some(slot) = slot {
            slot.entry = Some(entry);
            self.recorded += 1;
        }
    }

    pub fn release_all(&mut self) {
        self.all_released = true;
    }

    /// The entries whose text lies within the first `released` bytes of decoded text.
    pub fn take(&mut self, released: usize) -> Vec<TokenLogprob> {
        let mut out = Vec::new();
        while self.recorded > 0 {
            let shown = self.all_released || self.slots[0].end.is_some_and(|end| end <= released);
            if !shown {
                break;
            }
            self.recorded -= 1;
            out.extend(self.slots.pop_front().and_then(|s| s.entry));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probabilities_are_the_log_softmax_of_the_row() {
        let row = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let z: f64 = row.iter().map(|&x| f64::from(x).exp()).sum();
        let lp = token_logprob(&row, 2, 3);
        assert!((f64::from(lp.logprob) - (2.0 - z.ln())).abs() < 1e-6);
        // Ties go to the lower id.
        let ids: Vec<TokenId> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        let total: f64 = row
            .iter()
            .enumerate()
            .map(|(i, _)| f64::from(token_logprob(&row, i as TokenId, 0).logprob).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        assert!(token_logprob(&row, 0, 0).top.is_empty());
        assert_eq!(token_logprob(&row, 0, 9).top.len(), row.len());
    }

    #[test]
    fn large_logits_neither_overflow_nor_lose_the_answer() {
        let row = [1000.0f32, 1000.0, -1000.0];
        let lp = token_logprob(&row, 0, 1);
        assert!(
            (lp.logprob - (-std::f32::consts::LN_2)).abs() < 1e-6,
            "{lp:?}"
        );
        assert_eq!(lp.top[0].0, 0);
        assert_eq!(token_logprob(&row, 7, 0).logprob, MIN_LOGPROB, "no such id");
        let lp = token_logprob(&[0.0, f32::NEG_INFINITY], 1, 2);
        assert_eq!(
            lp.logprob, MIN_LOGPROB,
            "impossible, and still a JSON number"
        );
    }

    #[test]
    fn a_row_longer_than_a_slice_is_normalised_over_all_of_it() {
        // 1300 logits: two whole slices and a ragged tail, the peak in the tail.
        let row: Vec<f32> = (0..1300).map(|i| ((i * 37) % 101) as f32 / 25.0).collect();
        let row = [row, vec![6.5]].concat();
        let z: f64 = row.iter().map(|&x| f64::from(x).exp()).sum();
        for id in [0usize, 700, 1300] {
            let want = f64::from(row[id]) - z.ln();
            let got = f64::from(token_logprob(&row, id as TokenId, 0).logprob);
            assert!((got - want).abs() < 1e-5, "{id}: {got} vs {want}");
        }
    }

    #[test]
    fn the_top_list_matches_a_full_sort() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for _ in 0..50 {
            let row: Vec<f32> = (0..300)
                .map(|_| rng.random_range(-4i32..4) as f32)
                .collect();
            let mut all: Vec<(TokenId, f32)> = row
                .iter()
                .enumerate()
                .map(|(i, &x)| (i as TokenId, x))
                .collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let ids: Vec<TokenId> = top_logits(&row, 20).iter().map(|t| t.0).collect();
            let want: Vec<TokenId> = all[..20].iter().map(|t| t.0).collect();
            assert_eq!(ids, want);
        }
    }

    fn entry(token: TokenId) -> TokenLogprob {
        TokenLogprob {
            token,
            logprob: -1.0,
            top: Vec::new(),
        }
    }

    fn ids(v: &[TokenLogprob]) -> Vec<TokenId> {
        v.iter().map(|e| e.token).collect()
    }

    #[test]
    fn entries_leave_with_the_text_that_shows_their_tokens() {
        let mut q = LogprobQueue::new(0);
        // Token 1 "ab" (2 bytes), token 2 half of "é", token 3 completes it (2 bytes).
        for (t, piece) in [(1, Some(2)), (2, None), (3, Some(2))] {
            q.committed(piece);
            q.record(entry(t));
        }
        assert!(q.take(0).is_empty(), "nothing released yet");
        assert_eq!(ids(&q.take(2)), vec![1]);
        assert!(q.take(3).is_empty(), "half a character is not shown");
        assert_eq!(
            ids(&q.take(4)),
            vec![2, 3],
            "the character's tokens leave together"
        );
        // A token whose text a stop string cuts leaves only when the sequence ends.
        q.committed(Some(3));
        q.record(entry(4));
        assert!(q.take(4).is_empty());
        q.release_all();
        assert_eq!(ids(&q.take(4)), vec![4]);
    }

    #[test]
    fn entries_recorded_after_their_commit_still_wait_for_their_text() {
        let mut q = LogprobQueue::new(0);
        q.committed(None);
        q.committed(None);
        q.record(entry(1));
        assert!(q.take(100).is_empty(), "its character is not whole yet");
        q.record(entry(2));
        q.committed(Some(4));
        q.record(entry(3));
        assert_eq!(ids(&q.take(4)), vec![1, 2, 3]);
    }
}
