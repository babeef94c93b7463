//! The cost model: what a round of k drafts costs relative to a plain step, at the engine's
//! current load.
//!
//! An engine step over B batch tokens takes about t(B) = t0 + t1·B: t0 is what every step
//! pays whatever its size (reading the weights, dispatch), t1 the arithmetic per token. With n
//! live sequences each drafting k tokens, a step carries n·(k + 1) tokens, so relative to a
//! plain step (n tokens) it costs
//!
//!   v(k) = (t0 + t1·n·(k + 1)) / (t0 + t1·n) = (1 + ρ(k + 1)) / (1 + ρ),   ρ = t1·n / t0.
//!
//! Idle (ρ → 0) verification is free and any acceptance pays; saturated (ρ large) a verify
//! token costs as much as another sequence's real token and v(k) → k + 1, which no α < 1
//! repays. The crossover between the two comes from the measured t0 and t1, not a constant.

/// The engine's load as the cost model needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadView {
    /// Sequences sharing the engine (at least 1: the request itself).
    pub sequences: usize,
    /// The fitted step cost; before any fit a prior of ρ = 0.15 per sequence (measured on the
    /// default model on 2 cores: t(1) ≈ 27 ms, t(8) ≈ 50 ms).
    pub step: Option<(f64, f64)>,
}

impl LoadView {
    pub fn rho(&self) -> f64 {
        let n = self.sequences.max(1) as f64;
        match self.step {
            Some((t0, t1)) if t0 > 0.0 => t1 * n / t0,
            _ => 0.15 * n,
        }
    }

    /// v(k): a step with k drafts per sequence relative to a plain step.
    pub fn verify_cost(&self, k: usize) -> f64 {
        self.verify_cost_of(k as f64)
    }

    /// v at a mean of `drafts` per sequence (the cost is linear in the step's tokens).
    pub fn verify_cost_of(&self, drafts: f64) -> f64 {
        let rho = self.rho();
        (1.0 + rho * (drafts + 1.0)) / (1.0 + rho)
    }

    /// What one more verify row costs relative to a plain step, v(k + 1) − v(k) = ρ / (1 + ρ):
    /// the chance of acceptance a drafted token needs to pay for its row. Near 0 where a step
    /// costs the same whatever its size (an idle GPU), t1 / (t0 + t1) for one sequence on a
    /// CPU, toward 1 as other sequences fill the batch.
    pub fn row_cost(&self) -> f64 {
        let rho = self.rho();
        rho / (1.0 + rho)
    }
}

/// What drafting costs, relative to a plain step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DraftCost {
    /// Each of a round's k drafted tokens costs this (a draft model runs once per token).
    PerToken(f64),
    /// A round costs this whatever k allows: a drafter that prices its own drafts decides
    /// how many it drafts, so k is only its cap (a Medusa head pass is one per round).
    PerRound(f64),
}

impl DraftCost {
    /// A round's drafting at k drafts.
    pub fn of_round(self, k: usize) -> f64 {
        match self {
            Self::PerToken(c) => k as f64 * c,
            Self::PerRound(c) => c,
        }
    }
}

/// Expected committed tokens per unit of plain-step time for k drafts at acceptance α, draft
/// cost and load: plain decoding is 1.
pub fn value(alpha: f64, k: usize, cost: DraftCost, load: &LoadView) -> f64 {
    let alpha = alpha.clamp(0.0, 0.999_999);
    let tokens = (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha);
    tokens / (load.verify_cost(k) + cost.of_round(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculation_pays_idle_and_loses_saturated() {
        let idle = LoadView {
            sequences: 1,
            step: Some((0.02, 0.0005)),
        };
        let full = LoadView {
            sequences: 64,
            step: Some((0.02, 0.0005)),
        };
        assert!(value(0.6, 3, DraftCost::PerToken(0.0), &idle) > 1.5);
        assert!(value(0.6, 3, DraftCost::PerToken(0.0), &full) < 1.0);
        assert!(
            (value(0.0, 0, DraftCost::PerToken(0.0), &full) - 1.0).abs() < 1e-12,
            "k = 0 is plain"
        );
        // Monotone in load.
        let v: Vec<f64> = [1, 2, 4, 8, 16, 32]
            .map(|n| {
                value(
                    0.7,
                    4,
                    DraftCost::PerToken(0.0),
                    &LoadView {
                        sequences: n,
                        step: Some((0.02, 0.001)),
                    },
                )
            })
            .to_vec();
        assert!(v.windows(2).all(|w| w[1] < w[0]), "{v:?}");
    }

    #[test]
    fn a_rows_cost_is_the_marginal_verify_cost_and_rises_with_load() {
        let at = |sequences, step| LoadView { sequences, step };
        // This CPU's curve: a step of n rows costs 0.785 + 0.215·n of a one-row step.
        let cpu = Some((0.785, 0.215));
        let one = at(1, cpu);
        assert!((one.row_cost() - 0.215).abs() < 1e-9, "{}", one.row_cost());
        for k in 0..8 {
            let marginal = one.verify_cost(k + 1) - one.verify_cost(k);
            assert!((marginal - one.row_cost()).abs() < 1e-12);
        }
        assert!(
            at(1, Some((0.01, 0.0))).row_cost() < 1e-9,
            "flat steps: rows are free"
        );
        let costs: Vec<f64> = [1, 2, 4, 16, 64].map(|n| at(n, cpu).row_cost()).to_vec();
        assert!(costs.windows(2).all(|w| w[1] > w[0]), "{costs:?}");
        assert!(costs[4] > 0.9 && costs[4] < 1.0, "{costs:?}");
    }
}
