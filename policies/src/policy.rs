//! Routing policies: what an admin allows a route (tenant × class) — speculation on or off,
//! the strategies the learner may pick, bounds on k, exploration, the shadow-check rate.
//! Defaults per class ship as TOML files in `policies/defaults/`; admins override them per
//! tenant (or for every tenant with `*`). Pure: parsing, validation, resolution.

use serde::{Deserialize, Serialize};
use specgate_strategies::StrategyKind;

use crate::learner::Constraints;
use crate::workload::WorkloadClass;

/// Largest k a policy may allow.
pub const K_LIMIT: usize = 16;
/// The tenant name that stands for every tenant.
pub const ANY_TENANT: &str = "*";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutePolicy {
    pub speculation: bool,
    /// Strategy names: ngram, suffix, draft, early-exit (plain is always possible).
    pub allowed: Vec<String>,
    pub k_min: usize,
    pub k_max: usize,
    pub explore: bool,
    pub shadow_rate: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown strategy {0:?} in `allowed` (known: ngram, suffix, draft, early-exit, medusa, medusa-tree, suffix-medusa)")]
    UnknownStrategy(String),
    #[error("k_min ({k_min}) is greater than k_max ({k_max})")]
    KOrder { k_min: usize, k_max: usize },
    #[error("k_max must be at most {K_LIMIT}, got {0}")]
    KTooLarge(usize),
    #[error("k_min must be at least 1 when speculation is on")]
    KZero,
    #[error("speculation is on but `allowed` names no drafting strategy")]
    NothingAllowed,
    #[error("shadow_rate must be between 0 and 1, got {0}")]
    ShadowRate(f64),
    #[error("{0}")]
    Toml(String),
}

impl RoutePolicy {
    /// The strategies, checked.
    pub fn strategies(&self) -> Result<Vec<StrategyKind>, PolicyError> {
        self.allowed
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|_| PolicyError::UnknownStrategy(s.clone()))
            })
            .collect()
    }

    /// Every rule a policy must keep; the first broken one is the reason.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let strategies = self.strategies()?;
        if !(0.0..=1.0).contains(&self.shadow_rate) || self.shadow_rate.is_nan() {
            return Err(PolicyError::ShadowRate(self.shadow_rate));
        }
        if self.k_max > K_LIMIT {
            return Err(PolicyError::KTooLarge(self.k_max));
        }
        if self.k_min > self.k_max {
            return Err(PolicyError::KOrder {
                k_min: self.k_min,
                k_max: self.k_max,
            });
        }
        if self.speculation {
            if self.k_min == 0 {
                return Err(PolicyError::KZero);
            }
            if !strategies.iter().any(|s| *s != StrategyKind::Plain) {
                return Err(PolicyError::NothingAllowed);
            }
        }
        Ok(())
    }

    /// The learner's constraints, limited to the strategies this server can run.
    pub fn constraints(&self, available: &[StrategyKind]) -> Constraints {
        let allowed: Vec<StrategyKind> = self
            .strategies()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| available.contains(s))
            .collect();
        Constraints {
            speculation: self.speculation && !allowed.is_empty(),
            allowed,
            k_min: self.k_min,
            k_max: self.k_max,
            explore: self.explore,
        }
    }

    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        let p: RoutePolicy = toml::from_str(text).map_err(|e| PolicyError::Toml(e.to_string()))?;
        p.validate()?;
        Ok(p)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

/// The shipped default policy of a class (`policies/defaults/<class>.toml`).
pub fn default_policy(class: WorkloadClass) -> RoutePolicy {
    let text = match class {
        WorkloadClass::CodeEdit => include_str!("../defaults/code_edit.toml"),
        WorkloadClass::Rag => include_str!("../defaults/rag.toml"),
        WorkloadClass::Creative => include_str!("../defaults/creative.toml"),
        WorkloadClass::Chat => include_str!("../defaults/chat.toml"),
        WorkloadClass::Structured => include_str!("../defaults/structured.toml"),
    };
    // The shipped files are checked by a test; a broken one must not take the server down.
    RoutePolicy::from_toml(text).unwrap_or(RoutePolicy {
        speculation: false,
        allowed: Vec::new(),
        k_min: 0,
        k_max: 0,
        explore: false,
        shadow_rate: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_defaults_parse_validate_and_round_trip() {
        for class in WorkloadClass::ALL {
            let p = default_policy(class);
            assert!(p.speculation, "{class}");
            p.validate().unwrap();
            assert_eq!(RoutePolicy::from_toml(&p.to_toml()).unwrap(), p);
        }
    }

    #[test]
    fn contradictions_are_refused_with_the_reason() {
        let ok = default_policy(WorkloadClass::Chat);
        let cases = [
            (
                RoutePolicy {
                    allowed: vec!["magic".into()],
                    ..ok.clone()
                },
                "unknown strategy",
            ),
            (
                RoutePolicy {
                    k_min: 5,
                    k_max: 2,
                    ..ok.clone()
                },
                "greater than",
            ),
            (
                RoutePolicy {
                    k_max: 40,
                    ..ok.clone()
                },
                "at most 16",
            ),
            (
                RoutePolicy {
                    k_min: 0,
                    ..ok.clone()
                },
                "at least 1",
            ),
            (
                RoutePolicy {
                    allowed: vec!["plain".into()],
                    ..ok.clone()
                },
                "no drafting",
            ),
            (
                RoutePolicy {
                    shadow_rate: 1.5,
                    ..ok.clone()
                },
                "shadow_rate",
            ),
        ];
        for (p, why) in cases {
            let err = p.validate().unwrap_err().to_string();
            assert!(err.contains(why), "{err:?} should say {why:?}");
        }
        // Speculation off needs no strategy.
        let off = RoutePolicy {
            speculation: false,
            allowed: vec![],
            k_min: 0,
            k_max: 0,
            ..ok
        };
        off.validate().unwrap();
        assert!(!off.constraints(&StrategyKind::ALL).speculation);
        assert!(RoutePolicy::from_toml("speculation = true\nbogus = 1").is_err());
    }

    #[test]
    fn constraints_keep_only_what_the_server_runs() {
        let p = default_policy(WorkloadClass::CodeEdit);
        let c = p.constraints(&[
            StrategyKind::Plain,
            StrategyKind::Ngram,
            StrategyKind::Suffix,
        ]);
        assert_eq!(c.allowed, vec![StrategyKind::Ngram, StrategyKind::Suffix]);
        assert_eq!((c.k_min, c.k_max), (1, 8));
    }
}
