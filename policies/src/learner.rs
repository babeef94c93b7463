//! Learning, per route, which strategy and k pay off.
//!
//! Each (route, strategy) keeps a Beta posterior on α from the draft positions its requests
//! judged, decayed toward the prior on every request of the route so old evidence fades (a
//! model update, a change of traffic) and untried or stale strategies get explored again.
//! Each strategy also keeps its measured draft cost c. A request's plan draws α from every
//! allowed strategy's posterior (Thompson sampling: exploration in proportion to
//! uncertainty), takes for each the k that maximises [`value`] at the current load, and keeps
//! plain decoding (value 1) as a candidate. The incumbent keeps its place unless a challenger
//! is better by a margin, so the choice does not flap.
//!
//! Every observation also feeds its workload class's pool (all tenants' routes of the class,
//! the same decay), and a route's arms are its own evidence on top of that pool scaled down
//! to one request's worth (a hierarchical prior): a new tenant's code edits start where code
//! edits accept, not from a uniform prior that spends its first requests on strategies the
//! class never pays for, and its own traffic outweighs the prior within a few requests. Only
//! acceptance counts and draft costs cross tenants, never text. A new server's pools start
//! from the priors measured for its model ([`crate::priors`]), and a draw that would explore
//! is priced first ([`crate::risk`]): none runs a request plausibly slower than plain.

use std::collections::BTreeMap;
use std::collections::HashMap;

use rand::Rng;
use rand_distr::{Beta, Distribution};
use specgate_strategies::StrategyKind;

use crate::cost::{value, DraftCost, LoadView};
use crate::evidence::learn;
use crate::exploration::ExplorationBudget;
use crate::plan::SpecPlan;
use crate::priors::{ArmPrior, PRIOR_EVIDENCE};
use crate::risk;
use crate::workload::WorkloadClass;

/// A route: one tenant's traffic of one workload class.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteKey {
    pub tenant: String,
    pub class: WorkloadClass,
}

/// What a route may do (admin policy; defaults per class).
#[derive(Debug, Clone, PartialEq)]
pub struct Constraints {
    pub speculation: bool,
    pub allowed: Vec<StrategyKind>,
    pub k_min: usize,
    pub k_max: usize,
    pub explore: bool,
}

/// What one finished request measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub strategy: StrategyKind,
    pub rounds: u64,
    pub drafted: u64,
    pub accepted: u64,
    /// Draft positions the target judged (a round stops at its first rejection).
    pub judged: u64,
    pub draft_secs: f64,
    pub verify_secs: f64,
    /// Sequences that shared the engine when the request ended (1: it ran alone).
    pub sequences: usize,
    /// The engine's step-cost fit (t0, t1) at that load, when it had one: what a verify pass
    /// of the request's rows was expected to cost, against which its passes are measured.
    pub step: Option<(f64, f64)>,
}

/// A request's evidence counts as at most this many judged positions: one long request must
/// not outweigh the route's recent history.
pub(crate) const MAX_EVIDENCE: f64 = 20.0;
/// Decay of an arm's evidence when it gets new evidence: about its last 20 requests count.
pub(crate) const DECAY_OWN: f64 = 0.95;
/// Decay of every other arm per request of the route: evidence nobody refreshes goes stale
/// (half-life ≈ 140 requests) and the strategy gets explored again, rarely.
pub(crate) const DECAY_STALE: f64 = 0.995;
/// The class prior under a route's own evidence: at most this many judged positions per arm.
const CLASS_PRIOR: f64 = MAX_EVIDENCE;
/// A challenger must beat the incumbent by this factor.
pub(crate) const HYSTERESIS: f64 = 1.03;
pub(crate) const PRIOR: (f64, f64) = (1.0, 1.0);
const K_LIMIT: usize = 16;

/// One strategy's evidence on one route.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmState {
    pub accepted: f64,
    pub rejected: f64,
    /// Draft cost relative to a verify pass (EMA): per round for a drafter that prices its
    /// own drafts, else per drafted token (see [`draft_cost`]).
    pub draft_cost: Option<f64>,
    /// Tokens drafted per round (EMA), for a drafter that prices its own drafts: what its
    /// rounds cost to verify, whatever k allows.
    pub drafts_per_round: Option<f64>,
    /// Its verify passes' measured time over what the step-cost line predicts for their rows
    /// (EMA), for a drafter that prices its own drafts: a Medusa tree's rows cost more than a
    /// chain's, which the line fitted over every step does not see.
    pub pass_factor: Option<f64>,
}

impl Default for ArmState {
    fn default() -> Self {
        Self {
            accepted: PRIOR.0,
            rejected: PRIOR.1,
            draft_cost: None,
            drafts_per_round: None,
            pass_factor: None,
        }
    }
}

impl ArmState {
    pub fn mean_alpha(&self) -> f64 {
        self.accepted / (self.accepted + self.rejected)
    }

    /// Posterior variance of α.
    pub fn alpha_variance(&self) -> f64 {
        let (a, b) = (self.accepted, self.rejected);
        a * b / ((a + b).powi(2) * (a + b + 1.0))
    }

    fn draw(&self, rng: &mut impl Rng) -> f64 {
        Beta::new(self.accepted, self.rejected).map_or(self.mean_alpha(), |b| b.sample(rng))
    }

    /// This arm's own evidence on top of `pool`'s scaled down to at most `cap` judged
    /// positions (the pool's mean kept); the arm's draft cost, else the pool's.
    fn over(&self, pool: Option<&ArmState>, cap: f64) -> Self {
        let Some(pool) = pool else {
            return *self;
        };
        let (a, r) = (pool.accepted - PRIOR.0, pool.rejected - PRIOR.1);
        let scale = (cap / (a + r).max(f64::MIN_POSITIVE)).min(1.0);
        Self {
            accepted: self.accepted + a * scale,
            rejected: self.rejected + r * scale,
            draft_cost: self.draft_cost.or(pool.draft_cost),
            drafts_per_round: self.drafts_per_round.or(pool.drafts_per_round),
            pass_factor: self.pass_factor.or(pool.pass_factor),
        }
    }
}

pub(crate) type Arms = BTreeMap<StrategyKind, ArmState>;

#[derive(Debug, Clone, Default)]
struct RouteState {
    arms: Arms,
    incumbent: Option<(StrategyKind, usize)>,
    budget: ExplorationBudget,
}

/// The per-route learner. Pure: load and randomness come in as arguments.
#[derive(Debug, Clone, Default)]
pub struct Learner {
    routes: HashMap<RouteKey, RouteState>,
    /// Every route's evidence pooled per workload class: new routes' starting point.
    classes: HashMap<WorkloadClass, Arms>,
}

/// Prior draft cost when none was measured: lookups are free, Medusa heads (one small
/// pass over the target's hidden state a round; measured 0.02 of a verify pass) nearly so,
/// model drafters are not. At 0.3 for the heads, greedy choice never tried suffix-medusa
/// on a new route once cheaper arms had evidence.
fn prior_cost(s: StrategyKind) -> f64 {
    if s.is_lookup() || s == StrategyKind::Plain {
        0.0
    } else if s.uses_medusa() {
        0.05
    } else {
        0.3
    }
}

/// An arm's draft cost in the unit its strategy spends it. A drafter that prices its own
/// drafts stops where a row no longer pays, so k is only its cap, and its Medusa heads run
/// once a round whatever it drafts: charged per drafted token at the k the constant-α model
/// liked, heads that cost 0.4 of a pass a round were charged 0.2 and kept on a route where
/// they lose.
fn draft_cost(s: StrategyKind, arm: &ArmState) -> DraftCost {
    let c = arm.draft_cost.unwrap_or_else(|| prior_cost(s));
    if s.prices_own_drafts() {
        DraftCost::PerRound(c)
    } else {
        DraftCost::PerToken(c)
    }
}

/// The best k for α in `[k_min, k_max]` and its value.
pub fn best_k(
    alpha: f64,
    cost: DraftCost,
    load: &LoadView,
    k_min: usize,
    k_max: usize,
) -> (usize, f64) {
    (k_min.max(1)..=k_max.min(K_LIMIT))
        .map(|k| (k, value(alpha, k, cost, load)))
        .fold((0, f64::MIN), |best, x| if x.1 > best.1 { x } else { best })
}

impl Learner {
    /// The plan for the route's next request.
    pub fn choose(
        &mut self,
        route: &RouteKey,
        limits: &Constraints,
        load: &LoadView,
        rng: &mut impl Rng,
    ) -> SpecPlan {
        let pool = self.classes.get(&route.class);
        let state = self.routes.entry(route.clone()).or_default();
        if !limits.speculation || limits.k_max == 0 {
            state.incumbent = None;
            return SpecPlan::PLAIN;
        }
        let draw = limits.explore;
        let drawn = pick(
            state.incumbent,
            &candidates(&state.arms, pool, limits, load, draw, rng),
        );
        state.incumbent = if draw {
            let means = candidates(&state.arms, pool, limits, load, false, rng);
            let greedy = pick(state.incumbent, &means);
            let risky = drawn.is_some_and(|d| {
                let plausible = |s| {
                    let arm = route_arm(&state.arms, pool, s);
                    arm_value(s, &arm, risk::plausible_alpha(&arm), limits, load).1
                };
                risk::too_risky(d, greedy, plausible)
            });
            state
                .budget
                .admit(if risky { greedy } else { drawn }, greedy)
        } else {
            drawn
        };
        match state.incumbent {
            Some((strategy, k)) => plan(strategy, k, limits),
            None => SpecPlan::PLAIN,
        }
    }

    /// Start each class's pool from measured priors ([`crate::priors`]): each counts as
    /// [`PRIOR_EVIDENCE`] judged positions, so a route's own traffic soon outweighs it.
    pub fn seed(&mut self, priors: &[(WorkloadClass, StrategyKind, ArmPrior)]) {
        for (class, strategy, prior) in priors {
            let arm = ArmState {
                accepted: PRIOR.0 + prior.alpha * PRIOR_EVIDENCE,
                rejected: PRIOR.1 + (1.0 - prior.alpha) * PRIOR_EVIDENCE,
                draft_cost: Some(prior.draft_cost),
                drafts_per_round: prior.drafts_per_round,
                pass_factor: prior.pass_factor,
            };
            self.classes
                .entry(*class)
                .or_default()
                .insert(*strategy, arm);
        }
    }

    /// Learn from a finished request of the route (and for its class's pool).
    pub fn observe(&mut self, route: &RouteKey, obs: &Observation) {
        learn(&mut self.routes.entry(route.clone()).or_default().arms, obs);
        learn(self.classes.entry(route.class).or_default(), obs);
    }

    /// The evidence a plan for the route draws from: its own over its class's prior (for
    /// analytics and tests).
    pub fn arms(&self, route: &RouteKey) -> Vec<(StrategyKind, ArmState)> {
        let empty = Arms::new();
        let own = self.routes.get(route).map_or(&empty, |s| &s.arms);
        let pool = self.classes.get(&route.class).unwrap_or(&empty);
        let kinds: std::collections::BTreeSet<_> = own.keys().chain(pool.keys()).collect();
        kinds
            .into_iter()
            .map(|s| {
                let arm = own.get(s).copied().unwrap_or_default();
                (*s, arm.over(pool.get(s), CLASS_PRIOR))
            })
            .collect()
    }
}

/// Every choice the route may make now, with its expected value at this load: each allowed
/// strategy at its best k for an α drawn from its arm (`draw`) or its mean, and plain
/// decoding (value 1).
fn candidates(
    arms: &Arms,
    pool: Option<&Arms>,
    limits: &Constraints,
    load: &LoadView,
    draw: bool,
    rng: &mut impl Rng,
) -> Vec<((StrategyKind, usize), f64)> {
    // A fixed k is the admin's choice: plain decoding competes only when the policy allows
    // it by name (load still shrinks k in the engine). Otherwise plain is always a
    // candidate, so nothing runs that is not expected to win.
    let fixed = limits.k_min == limits.k_max
        && !limits.allowed.contains(&StrategyKind::Plain)
        && limits.allowed.iter().any(|s| *s != StrategyKind::Plain);
    let mut candidates = if fixed {
        Vec::new()
    } else {
        vec![((StrategyKind::Plain, 0), 1.0)]
    };
    for &s in limits.allowed.iter().filter(|s| **s != StrategyKind::Plain) {
        let arm = route_arm(arms, pool, s);
        let alpha = if draw {
            arm.draw(rng)
        } else {
            arm.mean_alpha()
        };
        let (k, v) = arm_value(s, &arm, alpha, limits, load);
        if k > 0 {
            candidates.push(((s, k), v));
        }
    }
    candidates
}

/// A strategy's evidence on a route: its own over its class's pool.
fn route_arm(arms: &Arms, pool: Option<&Arms>, s: StrategyKind) -> ArmState {
    let own = arms.get(&s).copied().unwrap_or_default();
    own.over(pool.and_then(|p| p.get(&s)), CLASS_PRIOR)
}

/// A strategy's best k and its value at acceptance `alpha`, with the arm's draft cost.
fn arm_value(
    s: StrategyKind,
    arm: &ArmState,
    alpha: f64,
    limits: &Constraints,
    load: &LoadView,
) -> (usize, f64) {
    let cost = draft_cost(s, arm);
    match arm.drafts_per_round {
        Some(_) if s.prices_own_drafts() => (
            limits.k_max,
            self_priced_value(alpha, arm, cost, load, limits.k_max),
        ),
        _ => best_k(alpha, cost, load, limits.k_min, limits.k_max),
    }
}

/// The value of a drafter that prices its own drafts, from what its rounds measured: the
/// tokens a round commits at α (as `evidence::judged` defines it for such drafters, capped at
/// `k_max` drafts) over the verify cost of the drafts it actually makes a round. Valued at
/// the k the constant-α model likes instead, a Medusa tree that drafts 8-16 rows for 1.6
/// tokens a pass looked as cheap as 2 rows and won a creative route it slowed by a third.
/// Its passes are priced at what they measured against the step-cost line (`pass_factor`).
fn self_priced_value(
    alpha: f64,
    arm: &ArmState,
    cost: DraftCost,
    load: &LoadView,
    k_max: usize,
) -> f64 {
    let alpha = alpha.clamp(0.0, 0.999_999);
    let k = k_max.min(K_LIMIT); // the plan's cap
    let tokens = (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha);
    let rows = arm.drafts_per_round.unwrap_or(0.0);
    let pass = load.verify_cost_of(rows) * arm.pass_factor.unwrap_or(1.0);
    tokens / (pass + cost.of_round(0))
}

/// The best candidate, unless the incumbent strategy is within the hysteresis margin of it
/// (then the incumbent strategy, at its best k now); None when there is no candidate.
fn pick(
    incumbent: Option<(StrategyKind, usize)>,
    candidates: &[((StrategyKind, usize), f64)],
) -> Option<(StrategyKind, usize)> {
    let best = candidates
        .iter()
        .copied()
        .reduce(|b, x| if x.1 > b.1 { x } else { b })?;
    let keep = incumbent.and_then(|inc| {
        candidates
            .iter()
            .find(|c| c.0 .0 == inc.0)
            .filter(|c| c.1 * HYSTERESIS >= best.1)
    });
    Some(keep.copied().unwrap_or(best).0)
}

/// The plan for a chosen (strategy, k).
pub(crate) fn plan(strategy: StrategyKind, k: usize, limits: &Constraints) -> SpecPlan {
    if strategy == StrategyKind::Plain {
        return SpecPlan::PLAIN;
    }
    if strategy.prices_own_drafts() {
        // Its drafter stops each draft where the next token no longer pays for its row, so
        // the route's bound is only a cap (k from a constant-α model cut suffix code edits
        // from 1.9 to 1.6 tokens per pass).
        return SpecPlan {
            strategy,
            k: limits.k_max.min(K_LIMIT),
            adaptive: false,
        };
    }
    SpecPlan {
        strategy,
        k,
        adaptive: true,
    }
}
