//! What one exploring request may cost its client. Thompson sampling explores in proportion
//! to uncertainty, and the exploration budget bounds how many requests explore, but neither
//! bounds what one of them loses: a cold route's draw sent a 128-token RAG answer to a draft
//! model that accepted nothing (every token one target pass plus the draft model's cost).
//!
//! So a draw that would explore is followed only where the strategy's *plausible* value, at a
//! low quantile of its acceptance posterior with its measured draft cost, is within
//! [`MAX_LOSS`] of plain decoding's: exploration where the gain may be real and, if the
//! optimism was wrong, the request still runs about as fast as it would without speculation.
//! (Measured against the incumbent's value instead, the gate also held back the exploration
//! that finds out an incumbent has stopped paying, since its mean lags a collapse: a route
//! left suffix drafting 36 requests after its α fell, against 30 or fewer without the gate.)
//! What exploring may lose against a better incumbent is bounded by the exploration budget
//! (a tenth of a route's requests) and by Thompson's draw, which beats the incumbent.

use specgate_strategies::StrategyKind;

use crate::learner::ArmState;

/// The largest share of plain decoding's speed an exploring request may plausibly lose (the
/// goal is that no request runs more than 15% slower than plain; the value model's own error
/// takes a few percent of that).
pub const MAX_LOSS: f64 = 0.12;

/// Standard normal quantile of the plausible acceptance: the 10th percentile.
const Z_LOW: f64 = 1.2816;

/// A low quantile of the arm's acceptance posterior (normal approximation of its Beta).
pub fn plausible_alpha(arm: &ArmState) -> f64 {
    (arm.mean_alpha() - Z_LOW * arm.alpha_variance().sqrt()).clamp(0.0, 1.0)
}

/// Whether following `drawn` instead of `greedy` (the posterior means' choice) risks more
/// than [`MAX_LOSS`] against plain decoding; `plausible` is a strategy's value at its
/// [`plausible_alpha`]. Choosing the greedy strategy, or plain decoding, explores nothing
/// and risks nothing.
pub fn too_risky(
    drawn: (StrategyKind, usize),
    greedy: Option<(StrategyKind, usize)>,
    plausible: impl Fn(StrategyKind) -> f64,
) -> bool {
    if drawn.0 == StrategyKind::Plain || Some(drawn.0) == greedy.map(|g| g.0) {
        return false;
    }
    plausible(drawn.0) < 1.0 - MAX_LOSS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(accepted: f64, rejected: f64) -> ArmState {
        ArmState {
            accepted,
            rejected,
            ..ArmState::default()
        }
    }

    #[test]
    fn the_plausible_alpha_nears_the_mean_as_evidence_grows() {
        let few = arm(3.0, 3.0);
        let many = arm(300.0, 300.0);
        assert!(plausible_alpha(&few) < 0.35, "{}", plausible_alpha(&few));
        assert!((plausible_alpha(&many) - 0.5).abs() < 0.03);
        assert_eq!(plausible_alpha(&arm(1.0, 1e9)), 0.0);
    }

    #[test]
    fn a_draw_that_may_run_slower_than_plain_is_refused() {
        use StrategyKind::*;
        let greedy = Some((Suffix, 8));
        // The draft model plausibly runs slower than plain decoding.
        assert!(too_risky((Draft, 3), greedy, |_| 0.8));
        // Plausibly about as fast as plain or faster: worth trying.
        assert!(!too_risky((Draft, 3), greedy, |_| 0.95));
        assert!(!too_risky((Draft, 3), Some((Plain, 0)), |_| 1.2));
        // The incumbent itself and plain decoding explore nothing.
        assert!(!too_risky((Suffix, 4), greedy, |_| 0.0));
        assert!(!too_risky((Plain, 0), greedy, |_| 0.0));
    }
}
