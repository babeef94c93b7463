//! Submissions straight to the engine (no gateway): plain or n-gram drafted, greedy or
//! seeded sampling, as some tenant's share.

use specgate::drafting::registry::BoxedDrafter;
use specgate::engine::generate::GenerateParams;
use specgate::engine::{EngineHandle, Event, RouteLabels, Submission};
use specgate::scheduler::Share;
use specgate::SamplingParams;
use specgate_policies::{SpecPlan, WorkloadClass};
use specgate_strategies::{NgramDrafter, PlainDrafter, StrategyKind, TokenId};
use tokio::sync::mpsc;

/// Greedy, or sampled at temperature 0.9 with `seed`; `k` drafts a round.
pub fn params(max_tokens: usize, k: usize, seed: Option<u64>) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampling: match seed {
            Some(_) => SamplingParams {
                temperature: 0.9,
                ..SamplingParams::greedy()
            },
            None => SamplingParams::greedy(),
        },
        seed: seed.unwrap_or(0),
        stop: Vec::new(),
        max_draft_tokens: k,
        adaptive_k: false,
        row_cost: None,
        penalties: Default::default(),
    }
}

/// The drafts a request gets: n-gram (k = 3) or none.
pub fn drafting(ngram: bool) -> (SpecPlan, BoxedDrafter) {
    if ngram {
        let plan = SpecPlan {
            strategy: StrategyKind::Ngram,
            k: 3,
            adaptive: false,
        };
        (plan, Box::new(NgramDrafter::default()))
    } else {
        (SpecPlan::PLAIN, Box::new(PlainDrafter))
    }
}

/// A streamed chat request of `share`'s tenant, and the receiver of its events.
pub fn submission(
    engine: &EngineHandle,
    prompt: Vec<TokenId>,
    max_tokens: usize,
    ngram: bool,
    seed: Option<u64>,
    share: &Share,
) -> (Submission, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (plan, drafter) = drafting(ngram);
    let sub = Submission {
        id: engine.next_request_id(),
        prompt,
        params: params(max_tokens, plan.k, seed),
        plan,
        drafter,
        route: RouteLabels {
            tenant: share.tenant.clone(),
            class: WorkloadClass::Chat,
        },
        events: tx,
        shadow: false,
        logprobs: None,
        stream: true,
        grammar: None,
        cache: None,
        share: share.clone(),
    };
    (sub, rx)
}
