//! The plan for one request: which strategy drafts and how many tokens a round may draft.
//! Until per-route learning exists the plan comes from a fixed table per workload class,
//! shrunk by the engine's load: speculation spends idle compute, and when the batch is full
//! every verification token competes with another sequence's real token.

use specgate_strategies::StrategyKind;

use crate::workload::WorkloadClass;

/// What the client asked of speculation for one request (the planner honours it within
/// the route's policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecOverride {
    #[default]
    Default,
    Disabled,
    Use {
        strategy: Option<StrategyKind>,
        k: Option<usize>,
    },
}

/// Strategy and k for a request (k = 0 or `Plain`: no speculation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecPlan {
    pub strategy: StrategyKind,
    pub k: usize,
    /// Let the request adapt k per round (up to `k`) from its own measured α and costs.
    pub adaptive: bool,
}

impl SpecPlan {
    pub const PLAIN: SpecPlan = SpecPlan {
        strategy: StrategyKind::Plain,
        k: 0,
        adaptive: false,
    };

    pub fn is_plain(&self) -> bool {
        self.strategy == StrategyKind::Plain || self.k == 0
    }
}

/// The default plan per class, from `bench spec` on this model: lookup drafting pays where
/// the output copies the prompt (code edits, RAG) and costs nothing where it does not; the
/// per-round adaptive k turns it off for a request whose α is too low.
pub fn default_plan(class: WorkloadClass) -> SpecPlan {
    let (strategy, k) = match class {
        WorkloadClass::CodeEdit => (StrategyKind::Suffix, 6),
        WorkloadClass::Rag => (StrategyKind::Suffix, 4),
        WorkloadClass::Creative => (StrategyKind::Ngram, 2),
        WorkloadClass::Chat => (StrategyKind::Ngram, 3),
        // Forced tokens draft themselves; lookups of earlier answers fill repeated values.
        WorkloadClass::Structured => (StrategyKind::Suffix, 4),
    };
    SpecPlan {
        strategy,
        k,
        adaptive: true,
    }
}

/// The engine's load as the plan sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Live sequences over the batch slots the operator configured, 0…1 (may exceed 1 while
    /// requests queue).
    pub occupancy: f64,
}

/// Load shaping of k: full k while the engine is mostly idle, shrinking linearly as occupancy
/// rises, and 0 (plain decoding) at `off_at` and above. `off_at` ≤ 0 disables speculation.
pub fn k_under_load(k: usize, load: Load, off_at: f64) -> usize {
    if off_at <= 0.0 || load.occupancy >= off_at {
        return 0;
    }
    // Half of the threshold is "mostly idle": speculation costs nothing there.
    let free = off_at / 2.0;
    if load.occupancy <= free {
        return k;
    }
    let left = (off_at - load.occupancy) / (off_at - free);
    ((k as f64) * left).round().max(1.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_shrinks_with_occupancy_and_stops_at_the_threshold() {
        let at = |o| k_under_load(8, Load { occupancy: o }, 0.5);
        assert_eq!(at(0.0), 8);
        assert_eq!(at(0.25), 8);
        assert_eq!(at(0.375), 4);
        assert!(at(0.49) >= 1);
        assert_eq!(at(0.5), 0);
        assert_eq!(at(2.0), 0);
        assert_eq!(k_under_load(8, Load { occupancy: 0.0 }, 0.0), 0);
        let ks: Vec<usize> = (0..=10).map(|i| at(i as f64 / 20.0)).collect();
        assert!(ks.windows(2).all(|w| w[1] <= w[0]), "monotone: {ks:?}");
    }

    #[test]
    fn every_class_has_a_speculative_default() {
        for c in WorkloadClass::ALL {
            let p = default_plan(c);
            assert!(!p.is_plain() && p.strategy.is_lookup(), "{c}: {p:?}");
        }
    }
}
