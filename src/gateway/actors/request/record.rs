//! What a finished request leaves behind: its history record (the route's minute bucket) and,
//! when sampled at admission, a shadow check of its greedy answer against plain decoding.

use super::RequestActor;
use crate::engine::Summary;
use crate::gateway::actors::history_writer::Record;
use crate::gateway::actors::shadow_check::{self, ShadowJob};
use crate::store::history::{HistoryKey, HistoryRecord, LatencyHistogram};

impl RequestActor {
    /// A request sampled at admission (the route's shadow rate) that drafted: check its greedy
    /// answer against plain decoding in the background.
    pub(super) fn maybe_shadow_check(&mut self, s: &Summary) {
        let Some((prompt, params)) = self.shadow.take() else {
            return;
        };
        if s.stats.drafted == 0 {
            return;
        }
        let job = ShadowJob {
            route: self.route.clone(),
            strategy: s.plan.strategy,
            prompt,
            params,
            speculative: s.token_ids.clone(),
        };
        shadow_check::launch(&self.engine, self.planner.clone(), job);
    }

    /// This request as a history record in its minute bucket.
    pub(super) fn history_record(&self, s: &Summary) -> Record {
        let now = crate::clock::unix_now();
        let key = HistoryKey::minute(
            &self.route.tenant,
            self.route.class,
            s.plan.strategy,
            s.plan.k,
            now,
        );
        let mut queue = LatencyHistogram::default();
        queue.record(s.queued.as_secs_f64());
        let mut record = HistoryRecord {
            requests: 1,
            prompt_tokens: s.prompt_tokens as u64,
            cached_tokens: s.cached_tokens as u64,
            tokens_out: s.completion_tokens as u64,
            target_passes: 1 + s.stats.rounds,
            rounds: s.stats.rounds,
            drafted: s.stats.drafted,
            accepted: s.stats.accepted,
            judged: s.stats.verified,
            accepted_per_pos: s.stats.accepted_per_pos.clone(),
            draft_secs: s.stats.draft_time.as_secs_f64(),
            verify_secs: s.stats.verify_time.as_secs_f64(),
            e2e_secs: self.started.elapsed().as_secs_f64(),
            ttft: self.ttft.clone(),
            itl: self.itl.clone(),
            queue,
            load_share: Some(1.0 / s.sequences.max(1.0)),
            ..Default::default()
        };
        if self.off_route {
            record.unlearned = record.evidence();
        }
        Record { key, record }
    }
}
