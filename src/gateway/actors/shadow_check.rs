//! Running a shadow check: the same prompt decoded plainly by the engine, as one more
//! sequence in its batches, after the client already has its answer; the outcome goes to the
//! planner.

use actix::Addr;
use specgate_policies::SpecPlan;
use specgate_strategies::{PlainDrafter, StrategyKind, TokenId};
use tokio::sync::mpsc;

use crate::engine::generate::GenerateParams;
use crate::engine::{EngineHandle, Event, RouteLabels, Submission};
use crate::gateway::actors::planner::{Planner, ShadowResult};
use specgate_policies::shadow_verdict::compare;

/// What a shadow check needs from the request it checks.
pub struct ShadowJob {
    pub route: RouteLabels,
    pub strategy: StrategyKind,
    pub prompt: Vec<TokenId>,
    pub params: GenerateParams,
    pub speculative: Vec<TokenId>,
}

/// Start the check in the background. A busy engine skips it (and counts it): shadow checks
/// run only while nothing waits and at most half the batch slots are in use, so they never
/// take a slot from real traffic.
pub fn launch(engine: &EngineHandle, planner: Addr<Planner>, job: ShadowJob) {
    if !engine.is_idle_enough() {
        metrics::counter!("specgate_shadow_checks_skipped_total").increment(1);
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut params = job.params;
    params.max_draft_tokens = 0;
    params.adaptive_k = false;
    let sub = Submission {
        id: engine.next_request_id(),
        prompt: job.prompt,
        params,
        plan: SpecPlan::PLAIN,
        drafter: Box::new(PlainDrafter),
        route: job.route.clone(),
        events: tx,
        shadow: true,
        logprobs: None,
        stream: false,
        grammar: None,
        // Computed from scratch: the check compares against a full prefill.
        cache: None,
        // Background work: it runs on what the tenants leave.
        share: crate::scheduler::Share {
            tenant: job.route.tenant.clone(),
            weight: 1,
            priority: crate::scheduler::Priority::Batch,
        },
    };
    if engine.submit(sub).is_err() {
        metrics::counter!("specgate_shadow_checks_skipped_total").increment(1);
        return;
    }
    let (route, strategy, speculative) = (job.route, job.strategy, job.speculative);
    actix::spawn(async move {
        while let Some(event) = rx.recv().await {
            match event {
                Event::Text { .. } => continue,
                Event::Done(plain) => {
                    let outcome = compare(&speculative, &plain.token_ids, &plain.top2_gaps);
                    // The first token comes from the prompt's pass: decoding is the rest.
                    let decode = plain.stats.draft_time + plain.stats.verify_time;
                    planner.do_send(ShadowResult {
                        route,
                        strategy,
                        outcome,
                        plain_tokens: plain.completion_tokens.saturating_sub(1) as u64,
                        plain_secs: decode.as_secs_f64(),
                    });
                    return;
                }
                Event::Failed(_) => break,
            }
        }
        metrics::counter!("specgate_shadow_checks_skipped_total").increment(1);
    });
}
