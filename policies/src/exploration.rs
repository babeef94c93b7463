//! How much of a route's traffic may explore: Thompson sampling's draw is followed only
//! where it picks another draft strategy than the posterior means do, and only within a
//! share of the route's recent requests.

use specgate_strategies::StrategyKind;

/// Most of a route's recent requests that may go to a draw's choice where the posterior
/// means choose another: Thompson sampling alone sent 6-10 of a new chat route's first 18
/// requests to strategies near the best (several Medusa variants, plain), each costing
/// 10-40% of a request's speed.
const EXPLORE_SHARE: f64 = 0.1;
/// Exploratory requests a route may make beyond its share (a new route's first tries).
const EXPLORE_FREE: f64 = 2.0;
/// Per request: the budget's memory is about the route's last 100 requests.
const BUDGET_DECAY: f64 = 0.99;

/// A route's recent requests and how many of them explored (both decayed per request).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ExplorationBudget {
    requests: f64,
    explored: f64,
}

impl ExplorationBudget {
    /// The choice for this request: `drawn` (Thompson's) where it is a draft strategy other
    /// than `greedy`'s (the posterior means') and the budget allows one more exploration,
    /// else `greedy`. An untried strategy's mean is its prior's, so greedy tries it too.
    pub(crate) fn admit(
        &mut self,
        drawn: Option<(StrategyKind, usize)>,
        greedy: Option<(StrategyKind, usize)>,
    ) -> Option<(StrategyKind, usize)> {
        self.requests = self.requests * BUDGET_DECAY + 1.0;
        self.explored *= BUDGET_DECAY;
        // Plain decoding's value is known (1): drawing it teaches nothing, so only a draft
        // strategy's draw may explore.
        let plain = drawn.is_none_or(|d| d.0 == StrategyKind::Plain);
        if plain || drawn.map(|d| d.0) == greedy.map(|g| g.0) {
            return greedy;
        }
        if self.explored + 1.0 > EXPLORE_SHARE * self.requests + EXPLORE_FREE {
            return greedy;
        }
        self.explored += 1.0;
        drawn
    }
}
