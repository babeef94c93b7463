//! The plan for a request that brings a predicted output (OpenAI's `prediction`).
//!
//! The learner's evidence is about the route's drafters on the route's usual text. A
//! prediction is different evidence: for an edit it holds most of the answer. So where the
//! learner chose plain decoding for the route, a predicted request is planned on its own:
//! it drafts when a prediction accepted at [`PREDICTION_ALPHA`] pays at the engine's load,
//! and its rounds adapt k to what the prediction really achieves. Where the load or the
//! route's policy turns speculation off, it stays off.

use specgate_strategies::StrategyKind;

use crate::cost::{DraftCost, LoadView};
use crate::learner::{best_k, Constraints, HYSTERESIS};
use crate::plan::SpecPlan;

/// The acceptance a prediction is planned with before its request has drafted. In
/// tests/prediction.rs a prediction with one word changed commits 64 tokens in 12 passes
/// (about 0.85 per drafted position at k = 8); a wrong one turns its rounds plain through
/// the per-round adaptive k.
pub const PREDICTION_ALPHA: f64 = 0.8;

/// The lookups a prediction falls back to where the output has no place in it, best first:
/// free to run, so a wrong prediction costs only its rejected rows.
const FALLBACKS: [StrategyKind; 2] = [StrategyKind::Suffix, StrategyKind::Ngram];

/// `learned` (the learner's plan for the route), or where that is plain, a plan that
/// drafts from the prediction when doing so pays at `load`: one of the route's allowed
/// lookups to fall back to, k by the cost model at [`PREDICTION_ALPHA`], adapted per round.
pub fn plan_for_prediction(learned: SpecPlan, limits: &Constraints, load: &LoadView) -> SpecPlan {
    if !learned.is_plain() {
        return learned;
    }
    let Some(strategy) = FALLBACKS.into_iter().find(|s| limits.allowed.contains(s)) else {
        return learned;
    };
    match k_for_known_answer(limits, load) {
        Some(k) => SpecPlan {
            strategy,
            k,
            adaptive: true,
        },
        None => learned,
    }
}

/// The k at which drafting a known answer (a prediction, a recalled earlier answer),
/// accepted at [`PREDICTION_ALPHA`] by a free lookup, pays at `load` by more than the
/// learner's hysteresis; None where the policy or the load rules drafting out.
pub(crate) fn k_for_known_answer(limits: &Constraints, load: &LoadView) -> Option<usize> {
    if !limits.speculation || limits.k_max == 0 {
        return None;
    }
    let (k, value) = best_k(
        PREDICTION_ALPHA,
        DraftCost::PerRound(0.0),
        load,
        limits.k_min,
        limits.k_max,
    );
    (value >= HYSTERESIS).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{limits, load};

    #[test]
    fn where_the_learner_chose_plain_an_idle_engine_drafts_from_the_prediction() {
        let lookups = [StrategyKind::Ngram, StrategyKind::Suffix];
        let p = plan_for_prediction(SpecPlan::PLAIN, &limits(&lookups), &load(1));
        assert_eq!(p.strategy, StrategyKind::Suffix, "suffix falls back first");
        assert!(p.k >= 4 && p.adaptive, "{p:?}");
        let ngram_only =
            plan_for_prediction(SpecPlan::PLAIN, &limits(&[StrategyKind::Ngram]), &load(1));
        assert_eq!(ngram_only.strategy, StrategyKind::Ngram);
        // More sequences, shorter drafts; a full engine, none.
        let busy = plan_for_prediction(SpecPlan::PLAIN, &limits(&lookups), &load(8));
        assert!(busy.k >= 1 && busy.k < p.k, "{busy:?} against {p:?}");
        let full = plan_for_prediction(SpecPlan::PLAIN, &limits(&lookups), &load(64));
        assert!(full.is_plain(), "{full:?}");
    }

    #[test]
    fn a_drafting_plan_the_policy_and_the_allowed_strategies_are_kept() {
        let lookups = [StrategyKind::Suffix];
        let learned = SpecPlan {
            strategy: StrategyKind::MedusaTree,
            k: 6,
            adaptive: false,
        };
        assert_eq!(
            plan_for_prediction(learned, &limits(&lookups), &load(1)),
            learned
        );
        let off = Constraints {
            speculation: false,
            ..limits(&lookups)
        };
        assert!(plan_for_prediction(SpecPlan::PLAIN, &off, &load(1)).is_plain());
        let fixed_zero = Constraints {
            k_max: 0,
            ..limits(&lookups)
        };
        assert!(plan_for_prediction(SpecPlan::PLAIN, &fixed_zero, &load(1)).is_plain());
        let models_only = limits(&[StrategyKind::EarlyExit, StrategyKind::Medusa]);
        assert!(
            plan_for_prediction(SpecPlan::PLAIN, &models_only, &load(1)).is_plain(),
            "no lookup allowed: no strategy of the policy's to fall back to"
        );
    }
}
