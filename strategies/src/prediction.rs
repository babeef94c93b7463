//! Drafting from a predicted output (OpenAI's `prediction`): the client sends what it expects
//! most of the answer to be (the file it is editing, the previous answer), and each round
//! proposes the prediction's next tokens from where the output has got to. Where the output
//! leaves the prediction (an edit), the last few output tokens find their place in it again;
//! where nothing matches, the request's own drafter drafts. Verification keeps the output
//! exactly the target's: a wrong prediction costs rejected rows, never a different answer.

use crate::draft::{Draft, DraftContext, DraftError, Drafter};
use crate::fallback::SendDrafter;
use crate::TokenId;
use std::collections::HashMap;

/// The shortest run of output tokens that places the output in the prediction again; one
/// or two tokens (a newline, a bracket) recur too often to say where an edit rejoined.
pub const REALIGN_MIN: usize = 3;
/// The longest run tried first.
pub const REALIGN_MAX: usize = 8;

/// Where the output stands in the prediction: the next output token is expected at
/// `cursor`, as of an output of `output_len` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Alignment {
    output_len: usize,
    cursor: usize,
}

/// A client's prediction, with where each run of [`REALIGN_MIN`] tokens in it ends: built
/// once a request, so a round that must find the output's place again looks up a few
/// candidates instead of scanning the whole prediction (rounds of a wrong prediction do so
/// every time, on the engine thread).
#[derive(Debug, Clone)]
pub struct Prediction {
    tokens: Vec<TokenId>,
    ends: HashMap<[TokenId; REALIGN_MIN], Vec<usize>>,
}

impl Prediction {
    pub fn new(tokens: Vec<TokenId>) -> Self {
        let mut ends: HashMap<[TokenId; REALIGN_MIN], Vec<usize>> = HashMap::new();
        for (i, w) in tokens.windows(REALIGN_MIN).enumerate() {
            let run: [TokenId; REALIGN_MIN] = std::array::from_fn(|j| w[j]);
            ends.entry(run).or_default().push(i + REALIGN_MIN);
        }
        Self { tokens, ends }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The position that follows `output`: the output so far is a prefix of the prediction,
    /// or its last n tokens (n = REALIGN_MAX down to REALIGN_MIN) occur in it, the first
    /// occurrence ending at or after `from` preferred (edits move forward), else the first
    /// anywhere.
    pub fn align(&self, output: &[TokenId], from: usize) -> Option<usize> {
        if self.tokens.starts_with(output) {
            return Some(output.len());
        }
        let tail = output.get(output.len().checked_sub(REALIGN_MIN)?..)?;
        let ends = self.ends.get(&std::array::from_fn(|j| tail[j]))?; // ascending
        let longest = REALIGN_MAX.min(output.len());
        // How many of the output's last tokens end at `e` too, up to `longest`.
        let agreeing = |e: usize| {
            (0..longest.min(e))
                .take_while(|&i| self.tokens[e - 1 - i] == output[output.len() - 1 - i])
                .count()
        };
        let agree: Vec<(usize, usize)> = ends.iter().map(|&e| (e, agreeing(e))).collect();
        (REALIGN_MIN..=longest).rev().find_map(|n| {
            let mut fits = agree.iter().filter(|(_, m)| *m >= n).map(|(e, _)| *e);
            let first = fits.clone().next();
            fits.find(|&e| e >= from).or(first)
        })
    }

    /// Up to `k` predicted tokens from `at`.
    fn from(&self, at: usize, k: usize) -> &[TokenId] {
        let end = at.saturating_add(k).min(self.tokens.len());
        self.tokens.get(at..end).unwrap_or_default()
    }
}

/// Predicted tokens drafted and what the target made of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PredictionTokens {
    pub accepted: u64,
    pub rejected: u64,
}

/// Proposes the prediction's next tokens; the wrapped drafter drafts where the output has
/// no place in the prediction.
pub struct PredictionDrafter {
    prediction: Prediction,
    inner: SendDrafter,
    /// Tokens the last proposal took from the prediction, awaiting their verdict.
    drafted: usize,
    counts: PredictionTokens,
    aligned: Option<Alignment>,
    /// The last place the output had in the prediction (realignment searches on from it).
    last_cursor: usize,
}

impl PredictionDrafter {
    pub fn new(prediction: Vec<TokenId>, inner: SendDrafter) -> Self {
        Self {
            prediction: Prediction::new(prediction),
            inner,
            drafted: 0,
            counts: PredictionTokens::default(),
            aligned: None,
            last_cursor: 0,
        }
    }

    /// The cursor after `output`: the last alignment carried forward while the output
    /// follows the prediction, else found again.
    fn cursor(&self, output: &[TokenId]) -> Option<usize> {
        if let Some(a) = self.aligned.filter(|a| a.output_len <= output.len()) {
            let new = &output[a.output_len..];
            let end = a.cursor + new.len();
            if self.prediction.tokens.get(a.cursor..end) == Some(new) {
                return Some(end);
            }
        }
        self.prediction.align(output, self.last_cursor)
    }
}

impl Drafter for PredictionDrafter {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn propose(&mut self, ctx: &DraftContext<'_>, k: usize) -> Result<Draft, DraftError> {
        let output = ctx.tokens.get(ctx.prompt_len..).unwrap_or_default();
        let cursor = self.cursor(output);
        self.aligned = cursor.map(|cursor| Alignment {
            output_len: output.len(),
            cursor,
        });
        self.last_cursor = cursor.unwrap_or(self.last_cursor);
        match cursor {
            Some(c) if c < self.prediction.len() && k > 0 => {
                let next = self.prediction.from(c, k);
                self.drafted = next.len();
                Ok(Draft::deterministic(next.to_vec()))
            }
            _ => {
                self.drafted = 0;
                self.inner.propose(ctx, k)
            }
        }
    }

    fn on_commit(&mut self, ctx: &DraftContext<'_>, accepted: usize) {
        let drafted = std::mem::take(&mut self.drafted);
        let kept = accepted.min(drafted);
        self.counts.accepted += kept as u64;
        self.counts.rejected += (drafted - kept) as u64;
        self.inner.on_commit(ctx, accepted);
    }

    fn prediction_tokens(&self) -> Option<PredictionTokens> {
        Some(self.counts)
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
    use crate::{PlainDrafter, SamplingParams};

    fn propose(
        d: &mut PredictionDrafter,
        prompt: &[TokenId],
        out: &[TokenId],
        k: usize,
    ) -> Vec<TokenId> {
        let tokens: Vec<TokenId> = prompt.iter().chain(out).copied().collect();
        let sp = SamplingParams::greedy();
        let ctx = DraftContext {
            tokens: &tokens,
            prompt_len: prompt.len(),
            sampling: &sp,
            hidden: None,
            fresh_hidden: &[],
            row_cost: None,
        };
        d.propose(&ctx, k).unwrap().tokens
    }

    #[test]
    fn an_output_that_follows_the_prediction_drafts_its_next_tokens() {
        let prediction: Vec<TokenId> = (100..120).collect();
        let mut d = PredictionDrafter::new(prediction, Box::new(PlainDrafter));
        let prompt = [1, 2, 3];
        assert_eq!(propose(&mut d, &prompt, &[], 4), vec![100, 101, 102, 103]);
        assert_eq!(
            propose(&mut d, &prompt, &[100, 101], 3),
            vec![102, 103, 104]
        );
        // The end of the prediction drafts nothing more.
        let all: Vec<TokenId> = (100..120).collect();
        assert!(propose(&mut d, &prompt, &all, 4).is_empty());
    }

    #[test]
    fn after_an_edit_the_output_finds_its_place_again() {
        // Predicted: a b c d e f g h i j; the output replaced "d" with "x y".
        let prediction: Vec<TokenId> = (1..=10).collect();
        let mut d = PredictionDrafter::new(prediction, Box::new(PlainDrafter));
        assert_eq!(propose(&mut d, &[0], &[1, 2, 3], 2), vec![4, 5]);
        // Diverged, and too little agrees yet to say where: nothing drafts.
        assert!(propose(&mut d, &[0], &[1, 2, 3, 50, 51], 2).is_empty());
        // Three output tokens match again: the prediction picks up after them.
        assert_eq!(
            propose(&mut d, &[0], &[1, 2, 3, 50, 51, 5, 6, 7], 3),
            vec![8, 9, 10]
        );
    }

    #[test]
    fn predicted_tokens_are_counted_accepted_or_rejected() {
        let prediction: Vec<TokenId> = (100..120).collect();
        let mut d = PredictionDrafter::new(prediction, Box::new(PlainDrafter));
        let sp = SamplingParams::greedy();
        let tokens = [1, 2];
        let ctx = DraftContext {
            tokens: &tokens,
            prompt_len: 2,
            sampling: &sp,
            hidden: None,
            fresh_hidden: &[],
            row_cost: None,
        };
        assert_eq!(d.propose(&ctx, 4).unwrap().len(), 4);
        d.on_commit(&ctx, 3);
        // A round that did not draft (plain) counts nothing.
        d.on_commit(&ctx, 0);
        let want = PredictionTokens {
            accepted: 3,
            rejected: 1,
        };
        assert_eq!(d.prediction_tokens(), Some(want));
    }

    #[test]
    fn a_later_occurrence_after_the_cursor_is_preferred() {
        // "7 8 9" occurs twice; the output is past the first.
        let p = Prediction::new(vec![7, 8, 9, 1, 2, 3, 4, 7, 8, 9, 5, 6]);
        assert_eq!(p.align(&[0, 7, 8, 9], 6), Some(10));
        assert_eq!(p.align(&[0, 7, 8, 9], 0), Some(3));
        assert_eq!(p.align(&[0, 40, 41, 42], 0), None);
    }

    /// The search the index replaces: every window of the prediction, longest run first.
    fn align_by_scanning(prediction: &[TokenId], output: &[TokenId], from: usize) -> Option<usize> {
        if prediction.starts_with(output) {
            return Some(output.len());
        }
        for n in (REALIGN_MIN..=REALIGN_MAX.min(output.len())).rev() {
            let tail = &output[output.len() - n..];
            let at = |start: usize| {
                prediction
                    .get(start..)?
                    .windows(n)
                    .position(|w| w == tail)
                    .map(|p| start + p + n)
            };
            if let Some(end) = at(from.saturating_sub(n)).or_else(|| at(0)) {
                return Some(end);
            }
        }
        None
    }

    #[test]
    fn the_index_finds_what_scanning_the_prediction_finds() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        // Few distinct tokens, so runs recur and partial matches abound.
        for _ in 0..3000 {
            let prediction: Vec<TokenId> = (0..rng.random_range(0..60))
                .map(|_| rng.random_range(0..3))
                .collect();
            let output: Vec<TokenId> = (0..rng.random_range(0..14))
                .map(|_| rng.random_range(0..3))
                .collect();
            let from = rng.random_range(0..70);
            let p = Prediction::new(prediction.clone());
            assert_eq!(
                p.align(&output, from),
                align_by_scanning(&prediction, &output, from),
                "{prediction:?} {output:?} from {from}"
            );
        }
    }
}
