//! Metric names and the recording helpers the engine and the gateway share. Names mirror
//! vLLM's speculative-decoding counters with our prefix, labelled by route and strategy.

use metrics::{counter, histogram};
use specgate_policies::{SpecPlan, WorkloadClass};
use specgate_strategies::SpecStats;

/// Whose request this is, for metrics and history.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteLabels {
    pub tenant: String,
    pub class: WorkloadClass,
}

/// Add one finished (or cancelled) sequence's speculative statistics to the counters.
pub fn record_spec(route: &RouteLabels, plan: &SpecPlan, stats: &SpecStats) {
    let labels = [
        ("tenant", route.tenant.clone()),
        ("class", route.class.name().to_string()),
        ("strategy", plan.strategy.name().to_string()),
    ];
    counter!("specgate_spec_decode_num_drafts_total", &labels).increment(stats.rounds);
    counter!("specgate_spec_decode_num_draft_tokens_total", &labels).increment(stats.drafted);
    counter!("specgate_spec_decode_num_accepted_tokens_total", &labels).increment(stats.accepted);
    counter!("specgate_spec_decode_drafter_failures_total", &labels)
        .increment(stats.drafter_failures);
    // Draft tokens an output grammar forced (in num_draft_tokens too).
    counter!("specgate_spec_decode_num_forced_tokens_total", &labels).increment(stats.forced);
    for (pos, &n) in stats.accepted_per_pos.iter().enumerate() {
        let mut l = labels.to_vec();
        l.push(("position", pos.to_string()));
        counter!("specgate_spec_decode_num_accepted_tokens_per_pos_total", &l).increment(n);
    }
    histogram!("specgate_spec_decode_draft_seconds", &labels)
        .record(stats.draft_time.as_secs_f64());
    histogram!("specgate_spec_decode_verify_seconds", &labels)
        .record(stats.verify_time.as_secs_f64());
}
