//! One request's decoding state, advanced round by round: after the prompt's pass, each round
//! proposes up to k drafts, the caller runs `[pending] + drafts` through the target (alone, as
//! `generate` does, or inside a ragged batch, as the engine does), and `settle` verifies,
//! rolls the cache back and commits. Both callers share this code, so the exactness tests of
//! `generate` cover the gateway's path too.

use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use specgate_policies::AdaptiveK;
use specgate_strategies::{
    verify, verify_tree_greedy, Draft, DraftContext, Drafter, SpecStats, TokenId,
};

use super::constrained::{Constrained, RoundConstraint, FORCED_MAX};
use super::params::{GenerateError, GenerateParams};
use super::penalised::Penalised;
use crate::drafting::guard::{guarded, propose_checked};
use crate::engine::logprobs::LogprobQueue;
use crate::engine::stop::StopMatcher;
use crate::model::tokenizer::{StreamDecoder, Tokenizer};
use crate::model::{SeqId, TargetBackend};

mod rows;

pub use rows::top2_gap;

/// Why generation ended, as OpenAI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
}

/// A proposed round: the target input `[pending] + drafts` and the draft it came from.
#[derive(Debug)]
pub struct RoundInput {
    pub tokens: Vec<TokenId>,
    pub draft: Draft,
    pub draft_time: Duration,
    /// The masks of the round's rows when the output is constrained.
    pub constraint: Option<RoundConstraint>,
}

/// The state of one sequence between target passes.
pub struct SequenceState {
    pub seq: SeqId,
    params: GenerateParams,
    prompt_len: usize,
    history: Vec<TokenId>, // prompt + committed tokens
    pending: Option<TokenId>,
    ids: Vec<TokenId>,
    text: String,
    stream: StreamDecoder,
    stops: StopMatcher,
    finish: Option<FinishReason>,
    rng: ChaCha8Rng,
    controller: Option<AdaptiveK>,
    pub stats: SpecStats,
    /// Top-2 logit gap of the row each committed token came from (shadow checks only).
    gaps: Option<Vec<f32>>,
    /// Final hidden state of the row that produced the pending token, when the caller ran
    /// the target with hidden states ([hidden]; Medusa drafts from it).
    hidden: Option<Vec<f32>>,
    /// Hidden states of the rows behind the last round's committed tokens (EAGLE reads every
    /// committed position's; empty without hidden states).
    fresh: Vec<f32>,
    /// Log-probabilities of the generated tokens not yet handed out, when asked for.
    logprobs: Option<LogprobQueue>,
    /// The grammar the output must follow, when the request gave one.
    constraint: Option<Constrained>,
    /// Penalties and biases on every row, when the request gave any.
    penalties: Option<Penalised>,
}

impl SequenceState {
    /// A sequence whose prompt will be (or is being) appended to the model's `seq`.
    pub fn new(seq: SeqId, prompt: &[TokenId], params: &GenerateParams) -> Self {
        Self {
            seq,
            params: params.clone(),
            prompt_len: prompt.len(),
            history: prompt.to_vec(),
            pending: None,
            ids: Vec::new(),
            text: String::new(),
            stream: StreamDecoder::new(),
            stops: StopMatcher::new(&params.stop),
            finish: (params.max_tokens == 0).then_some(FinishReason::Length),
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            controller: params
                .adaptive_k
                .then(|| AdaptiveK::new(params.max_draft_tokens, 0.5)),
            stats: SpecStats::default(),
            gaps: None,
            hidden: None,
            fresh: Vec::new(),
            logprobs: None,
            constraint: None,
            penalties: Penalised::new(&params.penalties, prompt),
        }
    }

    /// Constrain the output: every row is masked by the grammar before a token is chosen.
    pub fn constrain(&mut self, grammar: Box<dyn specgate_strategies::TokenConstraint>) {
        self.constraint = Some(Constrained::new(grammar));
    }

    pub fn prompt(&self) -> &[TokenId] {
        &self.history[..self.prompt_len]
    }

    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The prompt and every committed token (EOS included), in order.
    pub fn tokens(&self) -> &[TokenId] {
        &self.history
    }

    /// Committed token ids (EOS excluded).
    pub fn generated(&self) -> &[TokenId] {
        &self.ids
    }

    /// Committed text released so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The first token, sampled from the prompt pass's last row ([vocab]; its hidden state
    /// [hidden], or empty); returns the text it releases.
    pub fn start(
        &mut self,
        last_row: &[f32],
        last_hidden: &[f32],
        tok: &Tokenizer,
    ) -> Result<String, GenerateError> {
        let vocab = last_row.len();
        let shaped = self.penalties.as_ref().map(|p| p.first_row(last_row));
        let shaped = shaped.as_deref().unwrap_or(last_row);
        let masked = match self.constraint.as_mut() {
            Some(c) => Some(c.first_row(shaped, vocab)?),
            None => None,
        };
        // The row the token is chosen from, as `settle` judges its rounds' rows.
        let judge = masked.as_deref().unwrap_or(shaped);
        let first = self.params.sampling.sample(judge, &mut self.rng);
        self.hidden = (!last_hidden.is_empty()).then(|| last_hidden.to_vec());
        self.fresh = last_hidden.to_vec();
        if let Some(g) = self.gaps.as_mut() {
            g.push(top2_gap(judge));
        }
        if self.finish.is_some() {
            return Ok(String::new());
        }
        self.pending = Some(first);
        let before = self.ids.len();
        let released = self.commit(&[first], tok)?;
        self.record_logprobs(before, &[first], |_| last_row);
        if let (Some(c), false) = (self.constraint.as_mut(), self.finish.is_some()) {
            c.commit(&[first])?;
        }
        Ok(released)
    }

    /// Draft for the next round, at most `k_cap` tokens (the engine's load limit), never past
    /// max_tokens (a round commits up to k + 1 tokens); `row_cost` is what a verify row costs
    /// now, relative to a plain pass (see `DraftContext::row_cost`).
    /// `room`: most tokens the round may put in the batch after the pending one (the
    /// grammar's forced tokens are bounded by it, not by the load's k).
    pub fn propose(
        &mut self,
        drafter: &mut dyn Drafter,
        k_cap: usize,
        room: usize,
        row_cost: Option<f32>,
        vocab: usize,
    ) -> RoundInput {
        if let (Some(c), 0) = (self.controller.as_mut(), self.stats.rounds) {
            // A drafter's fault costs speculation, never the request.
            if let Some(r) = guarded(&mut self.stats, || drafter.track_record()).flatten() {
                c.seed(r.alpha, r.judged, r.step_secs);
            }
        }
        let wanted = self
            .controller
            .as_mut()
            .map_or(self.params.max_draft_tokens, AdaptiveK::next_k);
        let left = self.params.max_tokens.saturating_sub(self.ids.len() + 1);
        let k = wanted.min(k_cap).min(left);
        let ctx = DraftContext {
            tokens: &self.history,
            prompt_len: self.prompt_len,
            sampling: &self.params.sampling,
            hidden: self.hidden.as_deref(),
            fresh_hidden: &self.fresh,
            row_cost,
        };
        let t = Instant::now();
        let forced_cap = if self.params.max_draft_tokens > 0 {
            FORCED_MAX.min(room).min(left)
        } else {
            0
        };
        let forced = self.constraint.as_mut().and_then(|c| c.forced(forced_cap));
        let is_forced = forced.is_some();
        let mut draft =
            forced.unwrap_or_else(|| propose_checked(drafter, &ctx, k, vocab, &mut self.stats));
        let constraint = self
            .constraint
            .as_mut()
            .and_then(|c| c.check(&mut draft, is_forced));
        let draft_time = t.elapsed();
        let mut tokens = Vec::with_capacity(draft.len() + 1);
        tokens.extend(self.pending);
        tokens.extend_from_slice(&draft.tokens);
        RoundInput {
            tokens,
            draft,
            draft_time,
            constraint,
        }
    }

    /// Verify a round against the target's rows for it (logits [k + 1, vocab], hidden states
    /// [k + 1, hidden] or empty), roll the cache back to the accepted prefix, commit, and
    /// return the text released.
    #[allow(clippy::too_many_arguments)]
    pub fn settle(
        &mut self,
        model: &mut dyn TargetBackend,
        round: RoundInput,
        rows: &[f32],
        hidden: &[f32],
        verify_time: Duration,
        drafter: &mut dyn Drafter,
        tok: &Tokenizer,
    ) -> Result<String, GenerateError> {
        if let Some(e) = self.constraint.as_mut().and_then(Constrained::take_failure) {
            return Err(e.into());
        }
        let vocab = model.config().vocab_size;
        let base = model.seq_len(self.seq).unwrap_or(0) - round.tokens.len();
        let draft = round.draft;
        let mut rc = round.constraint;
        // Log-probabilities report the target's own rows; tokens are chosen from these.
        let judged = self.judged_rows(rows, vocab, &draft, rc.as_ref());
        let judge: &[f32] = &judged;
        let forced = rc.as_ref().is_some_and(|rc| rc.forced);
        // The pass's rows behind the committed tokens: the accepted path, then `next`'s.
        let (committed, used_rows, judged) = match draft.as_tree() {
            Some(tree) => {
                let v = verify_tree_greedy(&tree, judge, vocab);
                let used: Vec<usize> = std::iter::once(0)
                    .chain(v.path.iter().map(|n| n + 1))
                    .collect();
                // The path's keys and values move into place; other branches leave.
                model.keep_rows(self.seq, base, &used)?;
                let mut c: Vec<TokenId> = v.path.iter().map(|&n| tree.tokens[n]).collect();
                c.push(v.next);
                (c, used, tree.max_depth())
            }
            None => {
                // A drafted token the grammar forbids is judged, and rejected, by the row
                // after the kept drafts: a sampled rejection draws from its residual.
                let forbidden = rc.as_mut().and_then(|rc| rc.round.forbidden.take());
                let judged = Constrained::judged_draft(&draft, forbidden);
                let judged = judged.as_ref().unwrap_or(&draft);
                let v = verify(judged, judge, vocab, &self.params.sampling, &mut self.rng);
                // Rejected drafts leave the cache; `v.next` is not in it yet.
                model.truncate(self.seq, base + 1 + v.accepted)?;
                let mut c = draft.tokens[..v.accepted].to_vec();
                c.push(v.next);
                (c, (0..=v.accepted).collect(), judged.len())
            }
        };
        let accepted = committed.len() - 1;
        self.stats
            .record_round(judged, accepted, round.draft_time, verify_time);
        if forced {
            self.stats.forced += judged as u64;
        }
        // Forced rounds say nothing of the drafter: its k controller does not see them.
        if let Some(c) = self.controller.as_mut().filter(|_| !forced) {
            c.observe(
                judged,
                accepted,
                round.draft_time.as_secs_f64(),
                verify_time.as_secs_f64(),
            );
        }
        // `next` came from the last used row: its hidden state drafts the next round.
        let width = model.config().hidden;
        let last = used_rows[accepted];
        self.hidden = hidden
            .get(last * width..(last + 1) * width)
            .map(<[f32]>::to_vec);
        self.fresh.clear();
        for &j in &used_rows {
            if let Some(row) = hidden.get(j * width..(j + 1) * width) {
                self.fresh.extend_from_slice(row);
            }
        }
        if let Some(g) = self.gaps.as_mut() {
            g.extend(
                used_rows
                    .iter()
                    .map(|&j| top2_gap(&judge[j * vocab..(j + 1) * vocab])),
            );
        }
        let before = self.ids.len();
        let history = self.history.len();
        let released = self.commit(&committed, tok)?;
        let used = self.history.len() - history;
        if used < committed.len() {
            self.stats.trim_last_round(judged, accepted, used);
        }
        self.record_logprobs(before, &committed, |j| {
            &rows[used_rows[j] * vocab..(used_rows[j] + 1) * vocab]
        });
        if let (Some(c), Some(rc), None) = (self.constraint.as_mut(), rc.as_ref(), self.finish) {
            c.settle(rc, &committed)?;
        }
        if self.finish.is_some() {
            // Stopped inside the round: accepted drafts past the end leave the cache too.
            let end = self.prompt_len + self.ids.len();
            if model.seq_len(self.seq).is_some_and(|len| len > end) {
                model.truncate(self.seq, end)?;
            }
        }
        let ctx = DraftContext {
            tokens: &self.history,
            prompt_len: self.prompt_len,
            sampling: &self.params.sampling,
            hidden: self.hidden.as_deref(),
            fresh_hidden: &self.fresh,
            row_cost: None,
        };
        // A forced round's draft was not the drafter's: none of its draft was accepted.
        let drafter_accepted = if forced { 0 } else { accepted };
        guarded(&mut self.stats, || {
            drafter.on_commit(&ctx, drafter_accepted)
        });
        self.pending = committed.last().copied();
        Ok(released)
    }

    /// Commit tokens in order until one ends the sequence (EOS, a stop string, max_tokens).
    fn commit(&mut self, tokens: &[TokenId], tok: &Tokenizer) -> Result<String, GenerateError> {
        let mut released = String::new();
        for &t in tokens {
            if self.finish.is_some() {
                break;
            }
            self.history.push(t);
            if t == tok.eos() {
                self.finish = Some(FinishReason::Stop);
                break;
            }
            self.ids.push(t);
            if let Some(p) = self.penalties.as_mut() {
                p.generated(t);
            }
            let piece = self.stream.push(tok, t)?;
            if let Some(q) = self.logprobs.as_mut() {
                q.committed(piece.as_ref().map(String::len));
            }
            if let Some(piece) = piece {
                released += &self.stops.push(&piece);
            }
            if self.stops.stopped() {
                self.finish = Some(FinishReason::Stop);
            } else if self.ids.len() >= self.params.max_tokens {
                self.finish = Some(FinishReason::Length);
            }
        }
        self.text += &released;
        Ok(released)
    }

    /// End the sequence: release held-back text, let the drafter learn from it.
    pub fn finish(
        &mut self,
        drafter: &mut dyn Drafter,
        tok: &Tokenizer,
    ) -> Result<String, GenerateError> {
        let mut tail = String::new();
        if !self.stops.stopped() {
            let rest = self.stream.flush(tok)?.unwrap_or_default();
            tail += &self.stops.push(&rest);
            tail += &self.stops.finish();
        }
        self.text += &tail;
        if let Some(q) = self.logprobs.as_mut() {
            q.release_all();
        }
        self.finish.get_or_insert(FinishReason::Length);
        guarded(&mut self.stats, || drafter.finish());
        Ok(tail)
    }
}
