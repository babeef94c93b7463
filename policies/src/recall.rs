//! The plan for a request whose prompt the tenant's suffix cache has answered before.
//!
//! The learner's evidence is about the route's usual, fresh text. A prompt sent again (an
//! agent's retry, a batch job's rerun, a client without a response cache) comes with its
//! earlier answer in the tenant's cache: evidence like a client's prediction. So where the
//! route's plan does not draft from that cache, such a request drafts from it anyway when
//! drafting pays at the engine's load; its drafter prices every token it drafts, so a
//! recalled answer that stops matching costs little.

use specgate_strategies::StrategyKind;

use crate::cost::LoadView;
use crate::learner::{plan, Constraints};
use crate::plan::SpecPlan;
use crate::prediction::k_for_known_answer;

/// The fewest tokens of an earlier answer that make a prompt recalled: a shorter run is
/// what different prompts with one ending share (a code fence, a greeting).
pub const RECALL_MIN_TOKENS: usize = 16;

/// `learned`, or where a recalled answer of `recalled` tokens is there to copy and the
/// learned plan does not draft from the tenant's cache, a plan that does: suffix-medusa where
/// the route chose Medusa heads (they still draft where the answer stops matching), else
/// suffix, whichever the route's policy allows.
pub fn plan_for_recall(
    learned: SpecPlan,
    recalled: usize,
    limits: &Constraints,
    load: &LoadView,
) -> SpecPlan {
    if recalled < RECALL_MIN_TOKENS || learned.strategy.uses_suffix_cache() {
        return learned;
    }
    let preferred = match learned.strategy.uses_medusa() {
        true => [StrategyKind::SuffixMedusa, StrategyKind::Suffix],
        false => [StrategyKind::Suffix, StrategyKind::SuffixMedusa],
    };
    let Some(strategy) = preferred.into_iter().find(|s| limits.allowed.contains(s)) else {
        return learned;
    };
    // The drafter prices each token it drafts from the cache, so k is only the route's cap.
    match k_for_known_answer(limits, load) {
        Some(_) => plan(strategy, limits.k_max, limits),
        None => learned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{limits, load};

    fn learned(strategy: StrategyKind) -> SpecPlan {
        SpecPlan {
            strategy,
            k: 3,
            adaptive: true,
        }
    }

    #[test]
    fn a_recalled_prompt_drafts_from_the_cache_whatever_the_route_learned() {
        use StrategyKind::*;
        let all = limits(&[Ngram, Suffix, SuffixMedusa, Medusa, MedusaTree]);
        let p = plan_for_recall(SpecPlan::PLAIN, 40, &all, &load(1));
        assert_eq!((p.strategy, p.k), (Suffix, 8), "k is the route's cap");
        assert_eq!(
            plan_for_recall(learned(Ngram), 40, &all, &load(1)).strategy,
            Suffix
        );
        // Heads the route chose keep drafting where the recalled answer stops matching.
        assert_eq!(
            plan_for_recall(learned(Medusa), 40, &all, &load(1)).strategy,
            SuffixMedusa
        );
        let heads_only = limits(&[Medusa, Suffix]);
        assert_eq!(
            plan_for_recall(learned(Medusa), 40, &heads_only, &load(1)).strategy,
            Suffix
        );
        // A route already on the cache keeps its plan.
        let on_cache = learned(SuffixMedusa);
        assert_eq!(plan_for_recall(on_cache, 40, &all, &load(1)), on_cache);
    }

    #[test]
    fn too_short_a_recall_the_policy_and_the_load_keep_the_learned_plan() {
        use StrategyKind::*;
        let all = limits(&[Suffix, Medusa]);
        let short = plan_for_recall(learned(Medusa), RECALL_MIN_TOKENS - 1, &all, &load(1));
        assert_eq!(short, learned(Medusa));
        let no_cache = limits(&[Medusa, Ngram]);
        assert_eq!(
            plan_for_recall(learned(Medusa), 40, &no_cache, &load(1)),
            learned(Medusa)
        );
        let off = Constraints {
            speculation: false,
            ..all.clone()
        };
        assert!(plan_for_recall(SpecPlan::PLAIN, 40, &off, &load(1)).is_plain());
        assert!(plan_for_recall(SpecPlan::PLAIN, 40, &all, &load(64)).is_plain());
    }
}
