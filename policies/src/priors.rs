//! Measured priors: per workload class and strategy, the acceptance and draft cost one model
//! showed on that class's text, so a new server's first request of a class starts where the
//! class accepts instead of from a uniform prior (which sent a cold RAG question to
//! `early-exit`: 128 tokens in 128 target passes, paying a draft model's cost for nothing).
//!
//! A priors file is TOML written by `specgate calibrate-policy`; it names the model it was
//! measured on by sha256, and a server serving another model does not use it. Each entry
//! counts as [`PRIOR_EVIDENCE`] judged positions in the class pool, so a route's own traffic
//! outweighs it within a few requests, as the pool's own evidence does.
//!
//! ```toml
//! model = "SmolLM2-135M-Instruct.Q4_1.gguf"
//! model_sha256 = "…"
//! measured = "specgate calibrate-policy, tests/fixtures/prompts, 10 prompts per class, 64 tokens"
//!
//! [code_edit.suffix]
//! alpha = 0.61           # the learner's α: accepted per judged position (see learner::judged)
//! draft_cost = 0.004     # per round (self-pricing drafters) or per drafted token, of a verify pass
//! drafts_per_round = 3.2 # self-pricing drafters only
//! pass_factor = 0.8      # self-pricing drafters: passes measured over the step-cost line
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use specgate_strategies::StrategyKind;

use crate::learner::Observation;
use crate::workload::WorkloadClass;

/// The judged positions one prior entry counts as: the class pool's cap under a route's own
/// evidence (one long request's worth).
pub const PRIOR_EVIDENCE: f64 = 20.0;

/// The priors shipped for the default model (measured on the bench prompt sets).
pub const DEFAULT_MODEL_PRIORS: &str = include_str!("../defaults/priors.toml");

/// One strategy's measured behaviour on one class's text.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ArmPrior {
    pub alpha: f64,
    pub draft_cost: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drafts_per_round: Option<f64>,
    /// Self-pricing drafters: verify passes measured over the step-cost line's time for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_factor: Option<f64>,
}

/// A model's priors: per class, per strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Priors {
    pub model: String,
    pub model_sha256: String,
    /// How they were measured (free text for whoever reads the file).
    #[serde(default)]
    pub measured: String,
    #[serde(flatten)]
    pub classes: BTreeMap<String, BTreeMap<String, ArmPrior>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PriorsError {
    #[error("priors: {0}")]
    Parse(String),
    #[error("priors: unknown workload class {0:?}")]
    Class(String),
    #[error("priors: unknown strategy {strategy:?} under {class}")]
    Strategy { class: String, strategy: String },
    #[error("priors: {class}.{strategy}: {what}")]
    Value {
        class: String,
        strategy: String,
        what: String,
    },
}

impl ArmPrior {
    /// The prior a strategy's measured runs make (`obs`: their counts and times summed), in
    /// the learner's own units: α per judged position as the learner counts them, the draft
    /// cost per round or per drafted token of a verify pass, the drafts a round made.
    pub fn measured(obs: &Observation) -> Self {
        let judged = crate::evidence::judged(obs);
        let alpha = if judged == 0 {
            0.0
        } else {
            obs.accepted.min(judged) as f64 / judged as f64
        };
        let drafts_per_round = (obs.strategy.prices_own_drafts() && obs.rounds > 0)
            .then(|| obs.drafted as f64 / obs.rounds as f64);
        Self {
            alpha,
            draft_cost: crate::evidence::measured_draft_cost(obs).unwrap_or(0.0),
            drafts_per_round,
            pass_factor: drafts_per_round.and(crate::evidence::measured_pass_factor(obs)),
        }
    }
}

impl Priors {
    /// Parse and check a priors file: known classes and strategies, α in [0, 1], costs ≥ 0.
    pub fn parse(text: &str) -> Result<Self, PriorsError> {
        let priors: Self = toml::from_str(text).map_err(|e| PriorsError::Parse(e.to_string()))?;
        priors.entries()?;
        Ok(priors)
    }

    /// The file's text.
    pub fn to_toml(&self) -> Result<String, PriorsError> {
        toml::to_string(self).map_err(|e| PriorsError::Parse(e.to_string()))
    }

    /// Every entry, typed.
    pub fn entries(&self) -> Result<Vec<(WorkloadClass, StrategyKind, ArmPrior)>, PriorsError> {
        let mut out = Vec::new();
        for (class, arms) in &self.classes {
            let c: WorkloadClass = class
                .parse()
                .map_err(|_| PriorsError::Class(class.clone()))?;
            for (strategy, arm) in arms {
                let s: StrategyKind = strategy.parse().map_err(|_| PriorsError::Strategy {
                    class: class.clone(),
                    strategy: strategy.clone(),
                })?;
                let bad = |what: &str| PriorsError::Value {
                    class: class.clone(),
                    strategy: strategy.clone(),
                    what: what.to_string(),
                };
                if !(0.0..=1.0).contains(&arm.alpha) {
                    return Err(bad("alpha must be in [0, 1]"));
                }
                if !(arm.draft_cost >= 0.0 && arm.draft_cost.is_finite()) {
                    return Err(bad("draft_cost must be a number ≥ 0"));
                }
                if arm
                    .drafts_per_round
                    .is_some_and(|r| !(r >= 0.0 && r.is_finite()))
                {
                    return Err(bad("drafts_per_round must be a number ≥ 0"));
                }
                out.push((c, s, *arm));
            }
        }
        Ok(out)
    }

    /// Record one measurement.
    pub fn insert(&mut self, class: WorkloadClass, strategy: StrategyKind, arm: ArmPrior) {
        self.classes
            .entry(class.name().to_string())
            .or_default()
            .insert(strategy.name().to_string(), arm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_priors_parse_and_name_their_model() {
        let p = Priors::parse(DEFAULT_MODEL_PRIORS).expect("shipped priors parse");
        assert_eq!(p.model_sha256.len(), 64);
        let entries = p.entries().expect("typed");
        for class in [
            WorkloadClass::CodeEdit,
            WorkloadClass::Rag,
            WorkloadClass::Creative,
            WorkloadClass::Chat,
        ] {
            assert!(
                entries.iter().any(|e| e.0 == class),
                "no prior for {}",
                class.name()
            );
        }
    }

    #[test]
    fn a_file_round_trips_and_bad_entries_are_named() {
        let mut p = Priors {
            model: "m.gguf".into(),
            model_sha256: "ab".repeat(32),
            measured: "test".into(),
            classes: BTreeMap::new(),
        };
        let arm = ArmPrior {
            alpha: 0.5,
            draft_cost: 0.01,
            drafts_per_round: Some(2.5),
            pass_factor: Some(0.9),
        };
        p.insert(WorkloadClass::Rag, StrategyKind::Suffix, arm);
        let text = p.to_toml().expect("serialises");
        assert_eq!(Priors::parse(&text).expect("parses"), p);
        let bad = text.replace("alpha = 0.5", "alpha = 1.5");
        let err = Priors::parse(&bad).expect_err("α > 1");
        assert!(err.to_string().contains("rag.suffix"), "{err}");
        let unknown = text.replace("[rag.suffix]", "[rag.telepathy]");
        assert!(matches!(
            Priors::parse(&unknown),
            Err(PriorsError::Strategy { .. })
        ));
    }
}
