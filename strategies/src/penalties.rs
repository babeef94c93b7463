//! Penalties and biases on the target's logits: OpenAI's `logit_bias`, `presence_penalty` and
//! `frequency_penalty`, and vLLM's `repetition_penalty`.
//!
//! They make a row depend on the tokens generated before it. A verify pass scores k + 1
//! positions at once, so row i is penalised as if `draft[..i]` had already been generated:
//! then every row equals the one plain decoding would have seen had it generated that prefix,
//! and greedy speculation stays token for token plain decoding, sampled speculation follows
//! the penalised distribution. Drafters do not see penalties: a draft the penalty turns
//! against is rejected, which costs acceptance, never the answer.
//!
//! Order and meaning follow vLLM's sampler: biases are added first, then the repetition
//! penalty (prompt and output tokens: a positive logit divided by it, a negative one
//! multiplied), then frequency (× the count in the output) and presence (once a token is in
//! the output) are subtracted.

use std::collections::{HashMap, HashSet};

use crate::tree::DraftTree;
use crate::TokenId;

/// What to do to every row before a token is chosen from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Penalties {
    pub presence: f32,
    pub frequency: f32,
    /// 1 is none; above 1 discourages repeats, below 1 encourages them.
    pub repetition: f32,
    /// Added to the token's logit (token, bias).
    pub logit_bias: Vec<(TokenId, f32)>,
}

impl Default for Penalties {
    fn default() -> Self {
        Self::none()
    }
}

/// A penalty outside its domain.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PenaltyError {
    #[error("presence_penalty must be between -2 and 2, got {0}")]
    Presence(f32),
    #[error("frequency_penalty must be between -2 and 2, got {0}")]
    Frequency(f32),
    #[error("repetition_penalty must be a number above 0 and at most 2, got {0}")]
    Repetition(f32),
    #[error("logit_bias must be between -100 and 100, got {1} for token {0}")]
    Bias(TokenId, f32),
    #[error("logit_bias names token {0}, outside the vocabulary of {1}")]
    BiasToken(TokenId, usize),
}

/// The tokens a row's penalties count: the prompt's (for the repetition penalty) and how
/// often each was generated.
#[derive(Debug, Clone, Default)]
pub struct TokenTally {
    prompt: HashSet<TokenId>,
    output: HashMap<TokenId, u32>,
}

impl TokenTally {
    pub fn new(prompt: &[TokenId]) -> Self {
        Self {
            prompt: prompt.iter().copied().collect(),
            output: HashMap::new(),
        }
    }

    /// Count generated tokens.
    pub fn add(&mut self, tokens: &[TokenId]) {
        for &t in tokens {
            *self.output.entry(t).or_default() += 1;
        }
    }
}

impl Penalties {
    pub fn none() -> Self {
        Self {
            presence: 0.0,
            frequency: 0.0,
            repetition: 1.0,
            logit_bias: Vec::new(),
        }
    }

    /// True when no row would change.
    pub fn is_none(&self) -> bool {
        self.presence == 0.0
            && self.frequency == 0.0
            && self.repetition == 1.0
            && self.logit_bias.iter().all(|&(_, b)| b == 0.0)
    }

    /// The domains OpenAI and vLLM accept; biased tokens must be in the vocabulary.
    pub fn validate(&self, vocab: usize) -> Result<(), PenaltyError> {
        let within = |x: f32, lim: f32| x.is_finite() && (-lim..=lim).contains(&x);
        if !within(self.presence, 2.0) {
            return Err(PenaltyError::Presence(self.presence));
        }
        if !within(self.frequency, 2.0) {
            return Err(PenaltyError::Frequency(self.frequency));
        }
        if !(self.repetition > 0.0 && self.repetition <= 2.0) {
            return Err(PenaltyError::Repetition(self.repetition));
        }
        for &(t, b) in &self.logit_bias {
            if !within(b, 100.0) {
                return Err(PenaltyError::Bias(t, b));
            }
            if t as usize >= vocab {
                return Err(PenaltyError::BiasToken(t, vocab));
            }
        }
        Ok(())
    }

    /// Penalise one row ([vocab]) after the tallied tokens and then `after` (generated, not
    /// yet tallied: the draft prefix the row verifies).
    pub fn apply(&self, row: &mut [f32], tally: &TokenTally, after: &[TokenId]) {
        let mut counts = tally.output.clone();
        for &t in after {
            *counts.entry(t).or_default() += 1;
        }
        self.apply_counts(row, &counts, &tally.prompt);
    }

    /// Penalise one row given every output token's count and the prompt's tokens.
    fn apply_counts(
        &self,
        row: &mut [f32],
        counts: &HashMap<TokenId, u32>,
        prompt: &HashSet<TokenId>,
    ) {
        for &(t, b) in &self.logit_bias {
            if let Some(l) = row.get_mut(t as usize) {
                *l += b;
            }
        }
        if self.repetition != 1.0 {
            let seen = prompt.iter().filter(|t| !counts.contains_key(t));
            for &t in counts.keys().chain(seen) {
                if let Some(l) = row.get_mut(t as usize) {
                    *l = if *l > 0.0 {
                        *l / self.repetition
                    } else {
                        *l * self.repetition
                    };
                }
            }
        }
        if self.frequency != 0.0 || self.presence != 0.0 {
            for (&t, &n) in counts {
                if let Some(l) = row.get_mut(t as usize) {
                    *l -= self.frequency * n as f32 + self.presence;
                }
            }
        }
    }

    /// A chain round's rows ([k + 1, vocab]) penalised: row i after `draft[..i]`.
    pub fn chain_rows(
        &self,
        rows: &[f32],
        vocab: usize,
        tally: &TokenTally,
        draft: &[TokenId],
    ) -> Vec<f32> {
        // The counts grow by one drafted token a row: copied once, not rebuilt per row.
        let mut counts = tally.output.clone();
        let mut out = rows.to_vec();
        for (i, row) in out.chunks_exact_mut(vocab).enumerate() {
            if let Some(&t) = i.checked_sub(1).and_then(|j| draft.get(j)) {
                *counts.entry(t).or_default() += 1;
            }
            self.apply_counts(row, &counts, &tally.prompt);
        }
        out
    }

    /// A tree round's rows ([1 + nodes, vocab]) penalised: row 0 after the committed tokens,
    /// row 1 + j after the path from the root to node j.
    pub fn tree_rows(
        &self,
        rows: &[f32],
        vocab: usize,
        tally: &TokenTally,
        tree: &DraftTree,
    ) -> Vec<f32> {
        let mut out = rows.to_vec();
        for (i, row) in out.chunks_exact_mut(vocab).enumerate() {
            let path = match i.checked_sub(1) {
                Some(node) if node < tree.len() => path_tokens(tree, node),
                _ => Vec::new(),
            };
            self.apply(row, tally, &path);
        }
        out
    }
}

/// The tokens from the root down to `node`, in order.
fn path_tokens(tree: &DraftTree, node: usize) -> Vec<TokenId> {
    let mut path = vec![tree.tokens[node]];
    let mut at = tree.parents[node];
    while let Some(p) = at {
        path.push(tree.tokens[p]);
        at = tree.parents[p];
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn penalties(presence: f32, frequency: f32, repetition: f32) -> Penalties {
        Penalties {
            presence,
            frequency,
            repetition,
            logit_bias: vec![],
        }
    }

    #[test]
    fn each_penalty_changes_what_vllm_changes() {
        let mut tally = TokenTally::new(&[0]);
        tally.add(&[1, 1]);
        let row = [2.0, 2.0, -2.0, 2.0];
        let apply = |p: &Penalties| {
            let mut r = row;
            p.apply(&mut r, &tally, &[2]);
            r
        };
        // Output counts: token 1 twice, token 2 once (from the draft prefix); token 0 is
        // only in the prompt, token 3 nowhere.
        assert_eq!(apply(&penalties(0.5, 0.0, 1.0)), [2.0, 1.5, -2.5, 2.0]);
        assert_eq!(apply(&penalties(0.0, 0.5, 1.0)), [2.0, 1.0, -2.5, 2.0]);
        assert_eq!(apply(&penalties(0.0, 0.0, 2.0)), [1.0, 1.0, -4.0, 2.0]);
        let bias = Penalties {
            logit_bias: vec![(3, -100.0), (0, 1.0)],
            ..penalties(0.0, 0.0, 2.0)
        };
        // The bias comes first: token 0's 3.0 is then divided by the repetition penalty.
        assert_eq!(apply(&bias), [1.5, 1.0, -4.0, -98.0]);
    }

    #[test]
    fn a_chain_row_is_the_row_plain_decoding_sees_after_its_draft_prefix() {
        let p = penalties(0.3, 0.7, 1.3);
        let vocab = 5;
        let rows: Vec<f32> = (0..3 * vocab)
            .map(|i| (i as f32 * 0.37).sin() * 3.0)
            .collect();
        let mut tally = TokenTally::new(&[4, 1]);
        tally.add(&[2]);
        let draft = [3, 2];
        let chain = p.chain_rows(&rows, vocab, &tally, &draft);
        for i in 0..3 {
            // Plain decoding: the prefix has been generated and tallied.
            let mut plain = tally.clone();
            plain.add(&draft[..i]);
            let mut want = rows[i * vocab..(i + 1) * vocab].to_vec();
            p.apply(&mut want, &plain, &[]);
            assert_eq!(
                &chain[i * vocab..(i + 1) * vocab],
                want.as_slice(),
                "row {i}"
            );
        }
    }

    #[test]
    fn a_tree_row_follows_its_nodes_path_only() {
        let p = penalties(0.0, 1.0, 1.0);
        let tree = DraftTree {
            tokens: vec![1, 2, 1],
            parents: vec![None, Some(0), None],
        };
        let rows = vec![0.0f32; 4 * 3];
        let out = p.tree_rows(&rows, 3, &TokenTally::new(&[]), &tree);
        assert_eq!(&out[..3], &[0.0, 0.0, 0.0]);
        assert_eq!(&out[3..6], &[0.0, -1.0, 0.0]); // after 1
        assert_eq!(&out[6..9], &[0.0, -1.0, -1.0]); // after 1, 2
        assert_eq!(&out[9..12], &[0.0, -1.0, 0.0]); // after 1 (the sibling branch)
    }

    #[test]
    fn out_of_domain_values_are_refused_and_zero_changes_nothing() {
        assert!(Penalties::none().is_none());
        assert!(Penalties::none().validate(10).is_ok());
        assert_eq!(
            penalties(2.5, 0.0, 1.0).validate(10),
            Err(PenaltyError::Presence(2.5))
        );
        assert_eq!(
            penalties(0.0, 0.0, 0.0).validate(10),
            Err(PenaltyError::Repetition(0.0))
        );
        let far = Penalties {
            logit_bias: vec![(10, 1.0)],
            ..Penalties::none()
        };
        assert_eq!(far.validate(10), Err(PenaltyError::BiasToken(10, 10)));
        let zero = Penalties {
            logit_bias: vec![(3, 0.0)],
            ..Penalties::none()
        };
        assert!(zero.is_none());
    }
}
