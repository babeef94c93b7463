//! The engine thread's loop: admit, gather one ragged batch, run it, settle every sequence.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use specgate_policies::k_under_load;

use super::{Command, EngineConfig, EngineStatus, Event, RequestId, Submission, Summary};
use crate::generate::GenerateError;
use crate::loaded::LoadedModel;
use crate::model::{BatchItem, ForwardOptions, LogitRows};
use crate::sequence::{FinishReason, RoundInput, SequenceState};

/// A sequence in a batch slot.
struct Live {
    sub: Box<Submission>,
    state: SequenceState,
    prefilled: usize,
    reserved: usize,
    queued: Duration,
    /// Σ over the steps that ran this sequence's rounds of the sequences in them.
    round_company: u64,
    /// Text and step times not delivered yet (an answer that is not streamed).
    held: (String, Vec<(Instant, usize)>),
}

/// One sequence's share of a step.
enum Work {
    Round(usize, RoundInput),
    Prefill(usize, usize), // live index, tokens
}

/// The engine thread's state. Owns the model; everything else reaches it through commands.
pub struct Engine {
    lm: LoadedModel,
    config: Arc<EngineConfig>,
    status: Arc<EngineStatus>,
    rx: mpsc::Receiver<Command>,
    waiting: VecDeque<(Box<Submission>, Instant)>,
    live: Vec<Live>,
    reserved: usize,
    steps: u64,
}

impl Engine {
    pub(super) fn new(
        lm: LoadedModel,
        config: Arc<EngineConfig>,
        status: Arc<EngineStatus>,
        rx: mpsc::Receiver<Command>,
    ) -> Self {
        Self {
            lm,
            config,
            status,
            rx,
            waiting: VecDeque::new(),
            live: Vec::new(),
            reserved: 0,
            steps: 0,
        }
    }

    /// Run until every handle is gone. A panic inside a step fails every request in flight
    /// and marks the engine dead (readiness turns false, submissions get 503) instead of
    /// leaving clients hanging.
    pub fn run(mut self) {
        self.calibrate();
        loop {
            if !self.receive() {
                break;
            }
            let stepped = catch_unwind(AssertUnwindSafe(|| self.step()));
            if stepped.is_err() {
                self.fail_all("the engine failed while running a batch");
                break;
            }
            self.publish();
        }
        self.status.alive.store(false, Ordering::SeqCst);
        self.publish();
    }

    /// Take commands: block while there is nothing to do. False when every handle is gone.
    fn receive(&mut self) -> bool {
        if self.live.is_empty() && self.waiting.is_empty() {
            match self.rx.recv() {
                Ok(cmd) => self.apply(cmd),
                Err(_) => return false,
            }
        }
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => self.apply(cmd),
                Err(mpsc::TryRecvError::Empty) => return true,
                Err(mpsc::TryRecvError::Disconnected) => {
                    return !(self.live.is_empty() && self.waiting.is_empty());
                }
            }
        }
    }

    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(sub) => self.waiting.push_back((sub, Instant::now())),
            Command::Cancel(id) => self.cancel(id),
        }
    }

    fn cancel(&mut self, id: RequestId) {
        if let Some(i) = self.waiting.iter().position(|(s, _)| s.id == id) {
            self.waiting.remove(i);
            self.status.queued.fetch_sub(1, Ordering::SeqCst);
            metrics::counter!("specgate_requests_cancelled_total").increment(1);
        }
        if let Some(i) = self.live.iter().position(|l| l.sub.id == id) {
            self.retire(i);
            metrics::counter!("specgate_requests_cancelled_total").increment(1);
        }
    }

    /// Free a slot and its cache.
    fn retire(&mut self, i: usize) {
        let live = self.live.swap_remove(i);
        if !live.sub.shadow {
            crate::telemetry::record_spec(&live.sub.route, &live.sub.plan, &live.state.stats);
        }
        self.lm.model.release(live.state.seq);
        self.reserved -= live.reserved;
    }

    fn step(&mut self) {
        // Clients that went away: free their caches before spending a pass on them.
        for i in (0..self.live.len()).rev() {
            if self.live[i].sub.events.is_closed() {
                metrics::counter!("specgate_requests_cancelled_total").increment(1);
                self.retire(i);
            }
        }
        self.admit();
        if self.live.is_empty() {
            return;
        }
        self.steps += 1;
        if self.config.faults.engine_panic_at_step == Some(self.steps) {
            panic!("injected engine fault at step {}", self.steps);
        }
        let work = self.gather();
        let items: Vec<BatchItem<'_>> = work
            .iter()
            .map(|w| match w {
                Work::Round(i, round) => BatchItem {
                    tree: round.draft.parents.as_deref(),
                    seq: self.live[*i].state.seq,
                    tokens: &round.tokens,
                    logits: LogitRows::All,
                },
                Work::Prefill(i, n) => {
                    let l = &self.live[*i];
                    let done = l.prefilled + n == l.state.prompt().len();
                    BatchItem {
                        tree: None,
                        seq: l.state.seq,
                        tokens: &l.state.prompt()[l.prefilled..l.prefilled + n],
                        logits: if done {
                            LogitRows::Last
                        } else {
                            LogitRows::None
                        },
                    }
                }
            })
            .collect();
        let batch_tokens: usize = items.iter().map(|it| it.tokens.len()).sum();
        let t = Instant::now();
        // Hidden states too: Medusa drafts from them (a copy of the rows, nothing more).
        let opts = ForwardOptions {
            hidden: true,
            ..ForwardOptions::default()
        };
        let result = self.lm.model.forward(&items, opts);
        let pass = t.elapsed();
        metrics::histogram!("specgate_batch_tokens").record(batch_tokens as f64);
        metrics::histogram!("specgate_batch_sequences").record(work.len() as f64);
        metrics::histogram!("specgate_step_seconds").record(pass.as_secs_f64());
        // Only steps of rounds price a verify row: a prompt chunk's tokens skip the LM head
        // and attend over the prompt, and one long chunk would set the fit's slope (a single
        // request's row cost read 0.5-0.6 with them).
        // A failed pass's time prices nothing.
        let rounds_only = work.iter().all(|w| matches!(w, Work::Round(..)));
        if rounds_only && result.is_ok() {
            self.status
                .step_costs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .observe(work.len(), batch_tokens, pass.as_secs_f64());
        }
        self.status.steps.fetch_add(1, Ordering::Relaxed);
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                self.fail_all(&format!("the engine failed: {e}"));
                return;
            }
        };
        let mut ended = Vec::new();
        let company = work.len() as u64;
        for (slot, w) in work.into_iter().enumerate() {
            let (i, outcome) = match w {
                Work::Round(i, round) => {
                    let l = &mut self.live[i];
                    l.round_company += company;
                    let r = l.state.settle(
                        &mut self.lm.model,
                        round,
                        out.item_logits(slot),
                        out.item_hidden(slot),
                        pass,
                        &mut *l.sub.drafter,
                        &self.lm.tokenizer,
                    );
                    (i, r)
                }
                Work::Prefill(i, n) => {
                    let l = &mut self.live[i];
                    l.prefilled += n;
                    if l.prefilled < l.state.prompt().len() {
                        continue;
                    }
                    let (row, hidden) = (out.row(slot, 0), out.item_hidden(slot));
                    (i, l.state.start(row, hidden, &self.lm.tokenizer))
                }
            };
            if self.deliver(i, outcome) {
                ended.push(i);
            }
        }
        ended.sort_unstable();
        for i in ended.into_iter().rev() {
            self.retire(i);
        }
    }

    /// Move waiting requests into free slots while their KV reservation fits (FIFO: a large
    /// request at the head is not overtaken, so it cannot starve).
    fn admit(&mut self) {
        while self.live.len() < self.config.max_sequences {
            let Some((sub, _)) = self.waiting.front() else {
                break;
            };
            let reserve = self.reservation(sub);
            if self.reserved + reserve > self.config.kv_budget_bytes && !self.live.is_empty() {
                break;
            }
            let Some((sub, since)) = self.waiting.pop_front() else {
                break;
            };
            self.status.queued.fetch_sub(1, Ordering::SeqCst);
            if sub.events.is_closed() {
                continue;
            }
            let seq = self.lm.model.new_sequence();
            let mut state = SequenceState::new(seq, &sub.prompt, &sub.params);
            if sub.shadow {
                state.track_gaps();
            }
            if let Some(top) = sub.logprobs {
                state.track_logprobs(top);
            }
            self.reserved += reserve;
            self.live.push(Live {
                sub,
                state,
                prefilled: 0,
                reserved: reserve,
                queued: since.elapsed(),
                round_company: 0,
                held: Default::default(),
            });
        }
    }

    fn reservation(&self, sub: &Submission) -> usize {
        let cfg = self.lm.model.config();
        let per_token = cfg.n_layers * cfg.kv_width() * 2 * 2;
        // A round appends at most k drafts, chain or tree, before rolling back.
        (sub.prompt.len() + sub.params.max_tokens + sub.plan.k + 1) * per_token
    }

    /// Seed the step-cost fit with this machine's own timings before serving. Without them
    /// the engine prices a verify row with the cost model's prior until traffic fits it.
    fn calibrate(&mut self) {
        let measured = catch_unwind(AssertUnwindSafe(|| {
            super::calibrate::measure(&mut self.lm.model)
        }));
        match measured {
            Ok(Ok(measured)) => {
                let ms: Vec<String> = measured
                    .iter()
                    .map(|(n, secs)| format!("{n}: {:.2} ms", secs * 1e3))
                    .collect();
                eprintln!("specgate: engine step by rows, {}", ms.join(", "));
                if let Ok(mut costs) = self.status.step_costs.lock() {
                    *costs = super::calibrate::seeded(&measured);
                }
            }
            Ok(Err(e)) => eprintln!("specgate: timing the engine's steps failed: {e}"),
            Err(_) => eprintln!("specgate: timing the engine's steps panicked"),
        }
        self.status.warm.store(true, Ordering::SeqCst);
    }

    /// This step's work: every decoding sequence's round first (latency), then prompt chunks
    /// with the budget left. k is shrunk by the load the engine is under right now.
    fn gather(&mut self) -> Vec<Work> {
        let load = super::load_of(
            self.live.len() + self.waiting.len(),
            self.config.max_sequences,
        );
        // What a verify row costs in this step: every live sequence's tokens share it.
        let row_cost = self.status.load_view(self.live.len()).row_cost() as f32;
        metrics::gauge!("specgate_verify_row_cost").set(f64::from(row_cost));
        let vocab = self.lm.model.config().vocab_size;
        let mut budget = self.config.max_batch_tokens.max(1);
        let mut work = Vec::with_capacity(self.live.len());
        for (i, l) in self.live.iter_mut().enumerate() {
            let decoding = l.prefilled == l.state.prompt().len();
            if !decoding || l.state.is_finished() || budget == 0 {
                continue;
            }
            let k =
                k_under_load(l.sub.plan.k, load, self.config.spec_off_occupancy).min(budget - 1);
            let round = l
                .state
                .propose(&mut *l.sub.drafter, k, Some(row_cost), vocab);
            budget -= round.tokens.len();
            work.push(Work::Round(i, round));
        }
        for (i, l) in self.live.iter().enumerate() {
            let left = l.state.prompt().len() - l.prefilled;
            if left == 0 || budget == 0 {
                continue;
            }
            let n = left.min(self.config.prefill_chunk.max(1)).min(budget);
            budget -= n;
            work.push(Work::Prefill(i, n));
        }
        work
    }

    /// Send a step's outcome to its request; true when the sequence has ended.
    fn deliver(&mut self, i: usize, outcome: Result<String, GenerateError>) -> bool {
        let l = &mut self.live[i];
        let text = match outcome {
            Ok(text) => text,
            Err(e) => {
                let _ = l.sub.events.send(Event::Failed(e.to_string()));
                return true;
            }
        };
        let tokens = l.state.generated().len();
        l.held.0 += &text;
        l.held.1.push((Instant::now(), tokens));
        if l.sub.stream || l.state.is_finished() {
            let (text, steps) = std::mem::take(&mut l.held);
            let _ = l.sub.events.send(Event::Text {
                text,
                logprobs: l.state.take_logprobs(),
                steps,
            });
        }
        if !l.state.is_finished() {
            return false;
        }
        let tail = match l.state.finish(&mut *l.sub.drafter, &self.lm.tokenizer) {
            Ok(tail) => tail,
            Err(e) => {
                let _ = l.sub.events.send(Event::Failed(e.to_string()));
                return true;
            }
        };
        if !tail.is_empty() {
            let _ = l.sub.events.send(Event::Text {
                text: tail,
                logprobs: Vec::new(),
                steps: Vec::new(),
            });
        }
        let summary = Summary {
            prompt_tokens: l.state.prompt().len(),
            completion_tokens: tokens,
            finish_reason: l.state.finish_reason().unwrap_or(FinishReason::Length),
            plan: l.sub.plan,
            stats: l.state.stats.clone(),
            queued: l.queued,
            sequences: match l.state.stats.rounds {
                0 => 1.0,
                rounds => l.round_company as f64 / rounds as f64,
            },
            token_ids: l.state.generated().to_vec(),
            prediction: l.sub.drafter.prediction_tokens(),
            top2_gaps: l.state.gaps().to_vec(),
        };
        let _ = l.sub.events.send(Event::Done(summary));
        true
    }

    fn fail_all(&mut self, why: &str) {
        for l in self.live.drain(..) {
            let _ = l.sub.events.send(Event::Failed(why.to_string()));
            self.lm.model.release(l.state.seq);
        }
        // Only what this thread took off the queue: submissions still in the channel keep
        // their count until they are received.
        let waiting = self.waiting.len();
        for (sub, _) in self.waiting.drain(..) {
            let _ = sub.events.send(Event::Failed(why.to_string()));
        }
        self.reserved = 0;
        self.status.queued.fetch_sub(waiting, Ordering::SeqCst);
    }

    fn publish(&self) {
        let kv = self.lm.model.kv_bytes();
        self.status.live.store(self.live.len(), Ordering::Relaxed);
        self.status.kv_bytes.store(kv, Ordering::Relaxed);
        metrics::gauge!("specgate_live_sequences").set(self.live.len() as f64);
        metrics::gauge!("specgate_queue_depth").set(self.waiting.len() as f64);
        metrics::gauge!("specgate_kv_cache_bytes").set(kv as f64);
        metrics::gauge!("specgate_kv_cache_reserved_bytes").set(self.reserved as f64);
    }
}
