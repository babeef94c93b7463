//! A sequence's penalties through its rounds: the rows shaped before a token is chosen, and
//! the tally of generated tokens they count. The rule that keeps this exact (row i of a
//! round is penalised as if `draft[..i]` had been generated) is
//! `specgate_strategies::penalties`'; this is its bookkeeping.

use specgate_strategies::{Draft, Penalties, TokenId, TokenTally};

pub struct Penalised {
    penalties: Penalties,
    tally: TokenTally,
}

impl Penalised {
    /// None when the penalties change no row.
    pub fn new(penalties: &Penalties, prompt: &[TokenId]) -> Option<Self> {
        (!penalties.is_none()).then(|| Self {
            penalties: penalties.clone(),
            tally: TokenTally::new(prompt),
        })
    }

    /// The prompt pass's last row, penalised for the first token ([vocab]).
    pub fn first_row(&self, row: &[f32]) -> Vec<f32> {
        let mut out = row.to_vec();
        self.penalties.apply(&mut out, &self.tally, &[]);
        out
    }

    /// A round's rows penalised along the draft ([rows, vocab]).
    pub fn round_rows(&self, rows: &[f32], vocab: usize, draft: &Draft) -> Vec<f32> {
        match draft.as_tree() {
            Some(tree) => self.penalties.tree_rows(rows, vocab, &self.tally, &tree),
            None => self
                .penalties
                .chain_rows(rows, vocab, &self.tally, &draft.tokens),
        }
    }

    /// Count a token added to the output.
    pub fn generated(&mut self, token: TokenId) {
        self.tally.add(&[token]);
    }
}
