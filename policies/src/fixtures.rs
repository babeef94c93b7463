//! Test fixtures shared by the planners' tests.

use specgate_strategies::StrategyKind;

use crate::cost::LoadView;
use crate::learner::Constraints;

/// A route that may draft with `allowed`, k in 1..=8, exploring.
pub(crate) fn limits(allowed: &[StrategyKind]) -> Constraints {
    Constraints {
        speculation: true,
        allowed: allowed.to_vec(),
        k_min: 1,
        k_max: 8,
        explore: true,
    }
}

/// This CPU's step curve: t(n rows) ≈ 3.6 ms + 0.53 ms · n (`bench decode`).
pub(crate) fn load(sequences: usize) -> LoadView {
    LoadView {
        sequences,
        step: Some((0.0036, 0.00053)),
    }
}
