//! Each step's sequences, asked of the scheduler (`crate::scheduler`): what runs, which
//! waiting requests start, and which live sequences sit the step out (paused: their KV, RNG,
//! grammar and drafter state untouched, so their output is what it would have been).

use std::time::{Duration, Instant};

use super::{Engine, Waiting};
use crate::scheduler::{Candidate, FairShare, Priority, Scheduling, Share};

/// A tier's pauses are logged at most this often (a flood pauses on every first token).
const PAUSE_LOG_EVERY: Duration = Duration::from_secs(10);

impl Engine {
    /// The live indices to run this step, in the scheduler's order; the waiting requests it
    /// picked are started first.
    pub(super) fn schedule(&mut self) -> Vec<usize> {
        let picks = self.picks();
        let n_live = self.live.len();
        let mut waiting: Vec<Option<Waiting>> = std::mem::take(&mut self.waiting)
            .into_iter()
            .map(Some)
            .collect();
        let mut run = Vec::with_capacity(picks.len());
        let mut started = false;
        for c in picks {
            if c < n_live {
                run.push(c);
            } else if let Some(w) = waiting.get_mut(c - n_live).and_then(Option::take) {
                started = true;
                run.extend(self.start(w));
            }
        }
        self.waiting = waiting.into_iter().flatten().collect();
        if started {
            self.room_for_reservations();
        }
        self.note_pauses(&run);
        run
    }

    /// Ask the scheduler: indices into live ++ waiting.
    fn picks(&self) -> Vec<usize> {
        let fcfs = self.config.scheduling == Scheduling::Fcfs;
        let chunk = self.config.prefill_chunk.max(1);
        let per_token = self.lm.model.config().kv_bytes_per_token();
        let live = self.live.iter().map(|l| {
            let (tenant, priority) = who(fcfs, &l.sub.share);
            let left = l.state.prompt().len() - l.prefilled;
            Candidate {
                tenant,
                priority,
                arrival: l.arrival,
                started: true,
                urgent: left > 0,
                cost: if left > 0 {
                    FairShare::cost(left.min(chunk), 0)
                } else {
                    FairShare::cost(0, 1)
                },
                reserve: 0,
            }
        });
        let waiting = self.waiting.iter().map(|w| {
            let (tenant, priority) = who(fcfs, &w.sub.share);
            Candidate {
                tenant,
                priority,
                arrival: w.arrival,
                started: false,
                urgent: true,
                cost: FairShare::cost(w.sub.prompt.len().min(chunk), 0),
                reserve: crate::engine::kv_reservation(&w.sub, per_token),
            }
        });
        let candidates: Vec<Candidate<'_>> = live.chain(waiting).collect();
        let kv_free = self.config.kv_budget_bytes.saturating_sub(self.reserved);
        self.fair
            .pick(&candidates, self.config.max_sequences, kv_free)
    }

    /// Count the sequences that ran last step and sit this one out; say so in the log when a
    /// higher tier took their place.
    fn note_pauses(&mut self, run: &[usize]) {
        let top = run
            .iter()
            .map(|&i| self.live[i].sub.share.priority)
            .max()
            .unwrap_or(Priority::Batch);
        let mut ran = vec![false; self.live.len()];
        for &i in run {
            ran[i] = true;
        }
        for (l, now) in self.live.iter_mut().zip(ran) {
            if l.ran && !now {
                let labels = [
                    ("tenant", l.sub.route.tenant.clone()),
                    ("priority", l.sub.share.priority.name().to_string()),
                ];
                metrics::counter!("specgate_sequences_paused_total", &labels).increment(1);
                if l.sub.share.priority < top {
                    self.tier_pauses += 1;
                }
            }
            l.ran = now;
        }
        let due = self
            .pause_logged
            .is_none_or(|t| t.elapsed() >= PAUSE_LOG_EVERY);
        if self.tier_pauses > 0 && due {
            eprintln!(
                "specgate: paused {} running sequence(s) of a lower tier for a higher tier's \
                 requests (since the last such line)",
                self.tier_pauses
            );
            self.tier_pauses = 0;
            self.pause_logged = Some(Instant::now());
        }
    }
}

/// Whose queue and tier a request is in: first come, first served is one tenant in one tier.
fn who(fcfs: bool, share: &Share) -> (&str, Priority) {
    if fcfs {
        ("", Priority::Standard)
    } else {
        (share.tenant.as_str(), share.priority)
    }
}
