//! Entering and leaving the live sequences: the start of a waiting request the scheduler
//! picked (its sequence started from the prefix cache where the prompt hits), room on a fixed
//! KV pool, and retirement (the sequence's blocks kept for later prompts).

use super::{Engine, Live, Waiting};
use crate::engine::prefix::Lease;
use crate::engine::sequence::SequenceState;

impl Engine {
    /// Free a slot and its cache; with `keep`, its committed tokens' full blocks stay in the
    /// prefix cache (not after a failure, whose cache may hold anything).
    pub(super) fn retire(&mut self, i: usize, keep: bool) {
        let mut live = self.live.swap_remove(i);
        self.fair.leave(&live.sub.share.tenant);
        if !live.sub.shadow {
            crate::telemetry::record_spec(&live.sub.route, &live.sub.plan, &live.state.stats);
        }
        if let Some(cache) = self.prefix.as_mut() {
            if keep {
                let tokens = live.state.tokens();
                cache.register(
                    &mut self.lm.model,
                    live.state.seq,
                    tokens,
                    &mut live.lease,
                    false,
                );
            } else {
                cache.release(&mut live.lease);
            }
        }
        self.lm.model.release(live.state.seq);
        self.reserved -= live.reserved;
    }

    /// Give a waiting request its sequence (started from the prefix cache where its prompt
    /// hits) and a place among the live ones; None when its client already went away.
    pub(super) fn start(&mut self, w: Waiting) -> Option<usize> {
        let Waiting {
            mut sub,
            since,
            arrival,
        } = w;
        self.dequeued(&sub.share.tenant);
        if sub.events.is_closed() {
            self.fair.leave(&sub.share.tenant);
            return None;
        }
        let reserve =
            crate::engine::kv_reservation(&sub, self.lm.model.config().kv_bytes_per_token());
        let (seq, cached, lease) = match self.prefix.as_mut() {
            Some(cache) => cache.start(&mut self.lm.model, sub.cache, &sub.prompt, &sub.route),
            None => (self.lm.model.new_sequence(), 0, Lease::default()),
        };
        let mut state = SequenceState::new(seq, &sub.prompt, &sub.params);
        if sub.shadow {
            state.track_gaps();
        }
        if let Some(top) = sub.logprobs {
            state.track_logprobs(top);
        }
        if let Some(grammar) = sub.grammar.take() {
            state.constrain(grammar);
        }
        let queued = since.elapsed();
        let labels = [
            ("tenant", sub.route.tenant.clone()),
            ("priority", sub.share.priority.name().to_string()),
        ];
        metrics::histogram!("specgate_queue_seconds", &labels).record(queued.as_secs_f64());
        self.reserved += reserve;
        let service = super::Service::new(&sub.share);
        self.live.push(Live {
            sub,
            state,
            prefilled: cached,
            cached,
            lease,
            reserved: reserve,
            queued,
            service,
            arrival,
            ran: false,
            round_company: 0,
            held: Default::default(),
        });
        Some(self.live.len() - 1)
    }

    /// On a fixed KV pool, what admitted sequences may still grow into must be free: cached
    /// blocks make way (one block per sequence allowed for rounding).
    pub(super) fn room_for_reservations(&mut self) {
        let Some(cache) = self.prefix.as_mut() else {
            return;
        };
        let per_token = self.lm.model.config().kv_bytes_per_token();
        let block = crate::prefix::BLOCK_TOKENS * per_token;
        let needed: usize = self
            .live
            .iter()
            .map(|l| {
                let held = self.lm.model.seq_len(l.state.seq).unwrap_or(0) * per_token;
                l.reserved.saturating_sub(held) + block
            })
            .sum();
        cache.make_room(&mut self.lm.model, needed);
    }
}
