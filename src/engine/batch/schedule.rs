//! Each step's sequences, asked of the scheduler (`crate::scheduler`): what runs, which
//! waiting requests start, and which live sequences sit the step out (paused: their KV, RNG,
//! grammar and drafter state untouched, so their output is what it would have been).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{Engine, Waiting};
use crate::scheduler::{Candidate, FairShare, Picks, Priority, Room, Scheduling, Share};

/// A tier's pauses are logged at most this often (a flood pauses on every first token).
const PAUSE_LOG_EVERY: Duration = Duration::from_secs(10);

/// At most one step in this many runs newcomers' prompts alone (see `FairShare::pick`): a
/// short prompt's first token in about one pass instead of a pass with every decode row, at
/// a bounded cost to everyone else's inter-token latency.
const NEWCOMERS_ALONE_EVERY: u64 = 4;

/// How long after an interactive tenant's last request its steps stay short: a person
/// sending one message after another is active between them too.
const INTERACTIVE_LINGER: Duration = Duration::from_secs(1);

impl Engine {
    /// The live indices to run this step, in the scheduler's order, with the most rows each
    /// may put in it; the waiting requests it picked are started first.
    pub(super) fn schedule(&mut self) -> Vec<(usize, usize)> {
        let picks = self.picks();
        if picks.newcomers_only {
            self.since_alone = 0;
            metrics::counter!("specgate_newcomer_steps_total").increment(1);
        } else {
            self.since_alone += 1;
        }
        let n_live = self.live.len();
        let mut waiting: Vec<Option<Waiting>> = std::mem::take(&mut self.waiting)
            .into_iter()
            .map(Some)
            .collect();
        let mut run = Vec::with_capacity(picks.run.len());
        let mut started = false;
        for (c, rows) in picks.run.into_iter().zip(picks.rows) {
            if c < n_live {
                run.push((c, rows));
            } else if let Some(w) = waiting.get_mut(c - n_live).and_then(Option::take) {
                started = true;
                run.extend(self.start(w).map(|i| (i, rows)));
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
    fn picks(&mut self) -> Picks {
        let lower_rows = self.lower_rows();
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
                rows: left.clamp(1, chunk),
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
                rows: w.sub.prompt.len().clamp(1, chunk),
            }
        });
        let candidates: Vec<Candidate<'_>> = live.chain(waiting).collect();
        // A fixed pool (a GPU's) sets aside a part-filled block per sequence for
        // `--max-sequences` sequences: there, no more than that hold KV at once.
        let pool_full = self.lm.model.kv_capacity_bytes(1).is_some()
            && self.live.len() >= self.config.max_sequences;
        let kv_free = if pool_full {
            0
        } else {
            self.config.kv_budget_bytes.saturating_sub(self.reserved)
        };
        let room = Room {
            slots: self.config.max_sequences,
            kv_free,
            newcomers_alone: !fcfs && self.since_alone + 1 >= NEWCOMERS_ALONE_EVERY,
            lower_rows: lower_rows.filter(|_| !fcfs),
        };
        self.fair.pick(&candidates, room)
    }

    /// While an interactive tenant is active (or was, within `INTERACTIVE_LINGER`): the most
    /// rows lower tiers may add to a step, so that by the step cost timed at start-up the step
    /// takes at most `interactive_slowdown` × what the interactive rows alone would (that
    /// line, not the traffic's fit: the traffic's one-sequence fit prices a row from steps
    /// of a few tokens, where its slope swings with noise). On a device where
    /// rows are nearly free (a GPU's decode) that is many rows; on a CPU, a few.
    fn lower_rows(&mut self) -> Option<usize> {
        let interactive = self
            .live
            .iter()
            .map(|l| &l.sub.share)
            .chain(self.waiting.iter().map(|w| &w.sub.share))
            .filter(|s| s.priority == Priority::Interactive)
            .count();
        let now = Instant::now();
        if interactive > 0 {
            self.interactive_seen = Some(now);
        }
        let recent = self
            .interactive_seen
            .is_some_and(|t| now.duration_since(t) < INTERACTIVE_LINGER);
        if !recent {
            return None;
        }
        let own = interactive.max(1);
        let (t0, t1) = self.row_line?;
        if t1 <= 0.0 {
            return None;
        }
        let budget = self.config.interactive_slowdown.max(1.0) * (t0 + t1 * own as f64);
        let rows = ((budget - t0) / t1).floor().max(0.0) as usize;
        // At least one row: lower tiers always progress (with no interactive sequence in
        // the step, lingering, a row-costly device would otherwise run nothing).
        Some(rows.saturating_sub(interactive).max(1))
    }

    /// Requests that just ended: a tenant left with nothing in the engine while others' work
    /// goes on is expected back (fair scheduling only; a batch tier's return would not run
    /// ahead of anything).
    pub(super) fn expect_back(&mut self, gone: &[Share]) {
        if self.config.scheduling == Scheduling::Fcfs
            || (self.live.is_empty() && self.waiting.is_empty())
        {
            return;
        }
        let now = Instant::now();
        for share in gone {
            // The scheduler's books count each tenant's requests in the engine.
            if share.priority > Priority::Batch && !self.fair.is_active(&share.tenant) {
                self.anticipation.ended(&share.tenant, now);
            }
        }
    }

    /// Hold the next step while a tenant is expected back (within the idle budget), taking
    /// commands meanwhile. False when every handle is gone and nothing is left to run.
    pub(super) fn hold_for_returns(&mut self) -> bool {
        while let Some(hold) = self.anticipation.hold(Instant::now()) {
            let t = Instant::now();
            let got = self.rx.recv_timeout(hold);
            let held = t.elapsed();
            self.anticipation.held(held);
            metrics::histogram!("specgate_anticipation_hold_seconds").record(held.as_secs_f64());
            match got {
                Ok(cmd) => self.apply(cmd),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return !(self.live.is_empty() && self.waiting.is_empty());
                }
            }
        }
        true
    }

    /// Count the sequences that ran last step and sit this one out; say so in the log when a
    /// higher tier took their place.
    fn note_pauses(&mut self, run: &[(usize, usize)]) {
        let top = run
            .iter()
            .map(|&(i, _)| self.live[i].sub.share.priority)
            .max()
            .unwrap_or(Priority::Batch);
        let mut ran = vec![false; self.live.len()];
        for &(i, _) in run {
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
