//! A step's work: which rows each picked sequence puts in the forward — rounds first, the
//! spare rows for drafts by expected acceptance, then prompt chunks.

use specgate_policies::k_under_load;

use super::{Engine, Work};
use crate::scheduler::drafts::{allocate, DraftWish};

impl Engine {
    /// This step's work for the sequences `run` (in the scheduler's order, with the most rows
    /// each may take): every decoding
    /// sequence's round first (latency), then prompt chunks with the budget left. Each round
    /// has its decode row; the spare rows go to drafts where they are expected to be accepted
    /// most, each round's k first shrunk by the load the engine is under right now.
    pub(super) fn gather(&mut self, run: &[(usize, usize)]) -> Vec<Work> {
        let load = crate::engine::load_of(
            self.live.len() + self.waiting.len(),
            self.config.max_sequences,
        );
        // What a verify row costs in this step: every running sequence's tokens share it.
        let row_cost = self.status.load_view(run.len()).row_cost() as f32;
        metrics::gauge!("specgate_verify_row_cost").set(f64::from(row_cost));
        let vocab = self.lm.model.config().vocab_size;
        let mut budget = self.config.max_batch_tokens.max(1);
        let rounds: Vec<(usize, usize)> = run
            .iter()
            .copied()
            .filter(|&(i, _)| {
                let l = &self.live[i];
                l.prefilled == l.state.prompt().len() && !l.state.is_finished()
            })
            .collect();
        let wishes: Vec<DraftWish> = rounds
            .iter()
            .map(|&(i, rows)| {
                let l = &self.live[i];
                let k = k_under_load(l.sub.plan.k, load, self.config.spec_off_occupancy);
                DraftWish {
                    k: k.min(rows.saturating_sub(1)),
                    alpha: expected_alpha(&l.state.stats),
                }
            })
            .collect();
        let caps = allocate(&wishes, budget.saturating_sub(rounds.len()));
        let mut work = Vec::with_capacity(run.len());
        for (n, (&(i, _), cap)) in rounds.iter().zip(caps).enumerate() {
            // Rows the rounds after this one need for their pending tokens.
            let later = rounds.len() - n - 1;
            if budget <= later {
                break;
            }
            let room = budget - later - 1;
            let l = &mut self.live[i];
            let round = l.state.propose(
                &mut *l.sub.drafter,
                cap.min(room),
                room,
                Some(row_cost),
                vocab,
            );
            budget -= round.tokens.len();
            work.push(Work::Round(i, round));
        }
        for &(i, rows) in run {
            let l = &self.live[i];
            let left = l.state.prompt().len() - l.prefilled;
            if left == 0 || budget == 0 {
                continue;
            }
            let n = left
                .min(self.config.prefill_chunk.max(1))
                .min(budget)
                .min(rows);
            budget -= n;
            work.push(Work::Prefill(i, n));
        }
        work
    }
}

/// The acceptance a sequence's drafts are expected to have: its own record so far, pulled
/// towards 0.5 while it has judged few positions (4 positions' worth of prior).
fn expected_alpha(stats: &specgate_strategies::SpecStats) -> f64 {
    const PRIOR: f64 = 0.5;
    const PRIOR_WEIGHT: f64 = 4.0;
    (stats.accepted as f64 + PRIOR * PRIOR_WEIGHT) / (stats.verified as f64 + PRIOR_WEIGHT)
}
