//! specgate's policy engine: per-route acceptance statistics, the cost model, and the choice
//! of draft strategy and k. Pure: no async, no storage; times are passed in as numbers.

pub mod adaptive_k;
pub mod cost;
mod evidence;
mod exploration;
pub mod learner;
pub mod plan;
pub mod policy;
pub mod prediction;
pub mod priors;
pub mod recall;
pub mod risk;
pub mod shadow_verdict;
pub mod step_costs;
pub mod workload;

#[cfg(test)]
mod fixtures;

pub use adaptive_k::{expected_speedup, AdaptiveK};
pub use cost::LoadView;
pub use learner::{Constraints, Learner, Observation, RouteKey};
pub use plan::{default_plan, k_under_load, Load, SpecOverride, SpecPlan};
pub use policy::{default_policy, PolicyError, RoutePolicy, ANY_TENANT};
pub use prediction::{plan_for_prediction, PREDICTION_ALPHA};
pub use priors::{ArmPrior, Priors, PriorsError, DEFAULT_MODEL_PRIORS};
pub use recall::{plan_for_recall, RECALL_MIN_TOKENS};
pub use step_costs::StepCosts;
pub use workload::{classify, UnknownWorkload, WorkloadClass};
