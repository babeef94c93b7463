//! The planner actor: a plan (strategy, k) per request from the route's policy, the per-route
//! learner and the engine's load; it learns from finished requests and reacts to shadow
//! checks.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix::prelude::*;
use specgate_policies::{
    default_plan, k_under_load, plan_for_prediction, plan_for_recall, Learner, LoadView,
    Observation, RouteKey, RoutePolicy, SpecPlan, RECALL_MIN_TOKENS,
};
use specgate_strategies::StrategyKind;

use crate::engine::{EngineHandle, RouteLabels, Summary};
use crate::gateway::actors::history_writer::{HistoryWriter, Record};
use crate::gateway::error::ApiError;
use crate::store::history::{HistoryKey, HistoryRecord};
use crate::store::{HistoryStore, PolicyStore};
use specgate_policies::shadow_verdict::{without_strategy, ShadowOutcome};
use specgate_policies::SpecOverride;

pub struct Planner {
    pub engine: EngineHandle,
    pub available: Vec<StrategyKind>,
    pub learner: Learner,
    pub policies: Arc<dyn PolicyStore>,
    pub history: Addr<HistoryWriter>,
}

impl Planner {
    pub fn new(
        engine: EngineHandle,
        available: Vec<StrategyKind>,
        policies: Arc<dyn PolicyStore>,
        history: Addr<HistoryWriter>,
    ) -> Self {
        Self {
            engine,
            available,
            learner: Learner::default(),
            policies,
            history,
        }
    }

    /// Start the learner from the store's recent history (the last `window` seconds), so a
    /// restart does not forget what each route's strategies accept.
    pub fn warm_start(&mut self, history: &dyn HistoryStore, window: u64) -> usize {
        let now = crate::clock::unix_now();
        let records = match history.read(None, now.saturating_sub(window), u64::MAX) {
            Ok(records) => records,
            Err(e) => {
                eprintln!("specgate: the learner starts cold: reading history failed: {e}");
                return 0;
            }
        };
        let mut seen = 0;
        for (key, rec) in records {
            let learned = rec.learned();
            if learned.judged == 0 {
                continue;
            }
            let route = RouteKey {
                tenant: key.tenant,
                class: key.class,
            };
            self.learner.observe(
                &route,
                &Observation {
                    strategy: key.strategy,
                    rounds: learned.rounds,
                    drafted: learned.drafted,
                    accepted: learned.accepted,
                    judged: learned.judged,
                    draft_secs: learned.draft_secs,
                    verify_secs: learned.verify_secs,
                    sequences: typical(learned.sequences()),
                    // The history keeps no step times: passes are measured live only.
                    step: None,
                },
            );
            seen += 1;
        }
        seen
    }

    /// The load as the cost model sees it: every busy sequence plus this one.
    fn load_view(&self) -> LoadView {
        let status = self.engine.status();
        let busy = status
            .live
            .load(Ordering::Relaxed)
            .saturating_add(status.queued.load(Ordering::Relaxed));
        status.load_view(busy + 1)
    }
}

impl Actor for Planner {
    type Context = Context<Self>;
}

/// Ask for a request's plan.
#[derive(Message)]
#[rtype(result = "Result<Planned, ApiError>")]
pub struct PlanFor {
    pub route: RouteLabels,
    pub speculation: SpecOverride,
    /// The request brings a predicted output (planned on its own where the route's is plain).
    pub predicted: bool,
    /// Tokens of an earlier answer to the prompt in the tenant's suffix cache.
    pub recalled: usize,
}

/// A request's plan and the chance that it gets a shadow check.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    pub plan: SpecPlan,
    pub shadow_rate: f64,
    /// The plan drafts from a recalled answer (whether or not the route's learned plan
    /// would have): the request's rounds say nothing of the route's usual text.
    pub recalled: bool,
}

impl Handler<PlanFor> for Planner {
    type Result = Result<Planned, ApiError>;

    fn handle(&mut self, msg: PlanFor, _: &mut Context<Self>) -> Self::Result {
        // One read of the route's policy serves the plan and the shadow rate.
        let (policy, _) = self.policies.effective(&msg.route.tenant, msg.route.class);
        let labels = [
            ("tenant", msg.route.tenant.clone()),
            ("class", msg.route.class.name().to_string()),
        ];
        let shadow_rate = policy.shadow_rate;
        let (plan, recalled) = self.plan(msg, &policy)?;
        if recalled {
            metrics::counter!("specgate_recalled_prompts_total", &labels).increment(1);
        }
        Ok(Planned {
            plan,
            shadow_rate,
            recalled,
        })
    }
}

impl Planner {
    /// The plan, and whether a recalled answer made it.
    fn plan(&mut self, msg: PlanFor, policy: &RoutePolicy) -> Result<(SpecPlan, bool), ApiError> {
        let route = RouteKey {
            tenant: msg.route.tenant.clone(),
            class: msg.route.class,
        };
        let mut recalled = false;
        let plan = match msg.speculation {
            SpecOverride::Disabled => return Ok((SpecPlan::PLAIN, false)),
            SpecOverride::Default => {
                let (limits, load) = (policy.constraints(&self.available), self.load_view());
                let learned = self
                    .learner
                    .choose(&route, &limits, &load, &mut rand::rng());
                if msg.predicted {
                    plan_for_prediction(learned, &limits, &load)
                } else {
                    let plan = plan_for_recall(learned, msg.recalled, &limits, &load);
                    // A repeat is kept from the learner whichever plan copies it, or its
                    // near-perfect rounds would teach the route's suffix arm only once
                    // suffix was already ahead.
                    recalled =
                        msg.recalled >= RECALL_MIN_TOKENS && plan.strategy.uses_suffix_cache();
                    plan
                }
            }
            SpecOverride::Use { strategy, k } => {
                // Within what the route's policy allows: speculation off stays off.
                let limits = policy.constraints(&self.available);
                if !limits.speculation {
                    return Ok((SpecPlan::PLAIN, false));
                }
                let base = default_plan(msg.route.class);
                // A client that sets only k gets the class default if its policy allows it,
                // else the policy's first drafting strategy that this server has: never a 403
                // for a strategy it did not name, and always one that drafts.
                let strategy = strategy.unwrap_or_else(|| {
                    let usable =
                        |s: &StrategyKind| *s != StrategyKind::Plain && self.available.contains(s);
                    match usable(&base.strategy) && limits.allowed.contains(&base.strategy) {
                        true => base.strategy,
                        false => limits
                            .allowed
                            .iter()
                            .copied()
                            .find(usable)
                            .unwrap_or(StrategyKind::Plain),
                    }
                });
                if !self.available.contains(&strategy) {
                    return Err(ApiError::invalid(
                        Some("speculation.strategy"),
                        format!("strategy {strategy} is not available on this server"),
                    ));
                }
                if strategy != StrategyKind::Plain && !limits.allowed.contains(&strategy) {
                    return Err(ApiError::forbidden(format!(
                        "strategy {strategy} is not allowed for this route by its policy"
                    ))
                    .with_param("speculation.strategy"));
                }
                SpecPlan {
                    strategy,
                    k: k.unwrap_or(base.k).clamp(limits.k_min, limits.k_max),
                    // A client that fixes k gets that k (load permitting), every round.
                    adaptive: k.is_none(),
                }
            }
        };
        if !self.available.contains(&plan.strategy) {
            return Err(ApiError::invalid(
                Some("speculation.strategy"),
                format!("strategy {} is not available on this server", plan.strategy),
            ));
        }
        // Above the occupancy threshold nothing speculates: start plain. Below it the engine
        // shapes k every step from the occupancy of that moment.
        let off_at = self.engine.config().spec_off_occupancy;
        if plan.strategy == StrategyKind::Plain
            || k_under_load(plan.k, self.engine.load(), off_at) == 0
        {
            return Ok((SpecPlan::PLAIN, false));
        }
        Ok((plan, recalled))
    }
}

/// What a finished request measured, for the route's learner.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Observe {
    pub route: RouteLabels,
    pub summary: Summary,
}

impl Handler<Observe> for Planner {
    type Result = ();

    fn handle(&mut self, msg: Observe, _: &mut Context<Self>) {
        let route = RouteKey {
            tenant: msg.route.tenant,
            class: msg.route.class,
        };
        let s = &msg.summary;
        let obs = Observation {
            strategy: s.plan.strategy,
            rounds: s.stats.rounds,
            drafted: s.stats.drafted,
            accepted: s.stats.accepted,
            judged: s.stats.verified,
            draft_secs: s.stats.draft_time.as_secs_f64(),
            verify_secs: s.stats.verify_time.as_secs_f64(),
            sequences: typical(s.sequences),
            step: self.engine.status().load_view(typical(s.sequences)).step,
        };
        self.learner.observe(&route, &obs);
    }
}

/// A mean count of sequences as the learner takes it.
fn typical(sequences: f64) -> usize {
    sequences.round().max(1.0) as usize
}

/// The outcome of a shadow check of one of the route's requests.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ShadowResult {
    pub route: RouteLabels,
    pub strategy: StrategyKind,
    pub outcome: ShadowOutcome,
    /// The plain decode's tokens after the first, and the engine seconds they took.
    pub plain_tokens: u64,
    pub plain_secs: f64,
}

impl Handler<ShadowResult> for Planner {
    type Result = ();

    fn handle(&mut self, msg: ShadowResult, _: &mut Context<Self>) {
        let (tenant, class) = (msg.route.tenant.clone(), msg.route.class);
        let label = msg.outcome.label();
        let mismatch = matches!(msg.outcome, ShadowOutcome::Mismatch { .. });
        let now = crate::clock::unix_now();
        // The record goes first, so whoever sees the counter finds it in the history too.
        self.history.do_send(Record {
            key: HistoryKey::minute(&tenant, class, msg.strategy, 0, now),
            record: HistoryRecord {
                shadow_checks: 1,
                shadow_mismatches: u64::from(mismatch),
                shadow_plain_tokens: msg.plain_tokens,
                shadow_plain_secs: msg.plain_secs,
                ..Default::default()
            },
        });
        metrics::counter!(
            "specgate_shadow_checks_total",
            "tenant" => tenant.clone(),
            "class" => class.name(),
            "strategy" => msg.strategy.name(),
            "result" => label
        )
        .increment(1);
        if !mismatch {
            return;
        }
        // Not a tie: the strategy produced output plain decoding would not have. Take it
        // out of the route's policy (a new version, by "shadow check") so no further request
        // of the route uses it until an admin puts it back.
        eprintln!(
            "specgate: shadow check mismatch for {tenant}/{}: strategy {} disabled ({:?})",
            class.name(),
            msg.strategy,
            msg.outcome
        );
        let (policy, _) = self.policies.effective(&tenant, class);
        let safer = without_strategy(&policy, msg.strategy);
        if let Err(e) = self.policies.put(&tenant, class, safer, "shadow check") {
            eprintln!(
                "specgate: could not disable {} for {tenant}: {e}",
                msg.strategy
            );
        }
    }
}
