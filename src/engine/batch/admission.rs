//! Entering and leaving a batch slot: admission of waiting requests (their sequence started
//! from the prefix cache where the prompt hits), room on a fixed KV pool, and retirement (the
//! sequence's blocks kept for later prompts).

use std::sync::atomic::Ordering;

use super::{Engine, Live};
use crate::engine::prefix::Lease;
use crate::engine::sequence::SequenceState;

impl Engine {
    /// Free a slot and its cache; with `keep`, its committed tokens' full blocks stay in the
    /// prefix cache (not after a failure, whose cache may hold anything).
    pub(super) fn retire(&mut self, i: usize, keep: bool) {
        let mut live = self.live.swap_remove(i);
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

    /// Move waiting requests into free slots while their KV reservation fits (FIFO: a large
    /// request at the head is not overtaken, so it cannot starve).
    pub(super) fn admit(&mut self) {
        while self.live.len() < self.config.max_sequences {
            let Some((sub, _)) = self.waiting.front() else {
                break;
            };
            let reserve =
                crate::engine::kv_reservation(sub, self.lm.model.config().kv_bytes_per_token());
            if self.reserved + reserve > self.config.kv_budget_bytes && !self.live.is_empty() {
                break;
            }
            let Some((mut sub, since)) = self.waiting.pop_front() else {
                break;
            };
            self.status.queued.fetch_sub(1, Ordering::SeqCst);
            if sub.events.is_closed() {
                continue;
            }
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
            self.reserved += reserve;
            self.live.push(Live {
                sub,
                state,
                prefilled: cached,
                cached,
                lease,
                reserved: reserve,
                queued: since.elapsed(),
                round_company: 0,
                held: Default::default(),
            });
        }
        self.room_for_reservations();
    }

    /// On a fixed KV pool, what admitted sequences may still grow into must be free: cached
    /// blocks make way (one block per sequence allowed for rounding).
    fn room_for_reservations(&mut self) {
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
