//! Shadow checks: a sample of greedy speculative requests is decoded again plainly, off the
//! hot path, and the two token sequences compared. Greedy speculative decoding must equal
//! plain greedy decoding token for token; the one allowed difference is at a numerical tie,
//! where plain decoding's two best logits are closer than [`TIE_GAP`] and either token is
//! the argmax within float noise. Anything else is silent corruption and disables the
//! strategy for the route. Pure: the comparison and the policy change.

use crate::RoutePolicy;
use serde::Serialize;
use specgate_strategies::{StrategyKind, TokenId};

/// Top-2 logit gaps below this are ties (the exactness tests' rule).
pub const TIE_GAP: f32 = 1e-3;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ShadowOutcome {
    /// The same tokens.
    Match,
    /// They part at `position`, where plain decoding's top-2 gap was a tie.
    Tie { position: usize, gap: f32 },
    /// They part at `position` with a clear argmax: the speculative output was wrong.
    Mismatch { position: usize, gap: f32 },
}

impl ShadowOutcome {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Match => "match",
            Self::Tie { .. } => "tie",
            Self::Mismatch { .. } => "mismatch",
        }
    }
}

/// Compare speculative output with plain output (`plain_gaps[i]`: the gap behind plain
/// token i; a sequence that ends early is compared up to where it ends, then on length).
pub fn compare(speculative: &[TokenId], plain: &[TokenId], plain_gaps: &[f32]) -> ShadowOutcome {
    let same = speculative
        .iter()
        .zip(plain)
        .take_while(|(a, b)| a == b)
        .count();
    if same == speculative.len() && same == plain.len() {
        return ShadowOutcome::Match;
    }
    // Where they part (or where one stopped, by EOS, and the other went on).
    let gap = plain_gaps.get(same).copied().unwrap_or(f32::INFINITY);
    if gap < TIE_GAP {
        ShadowOutcome::Tie {
            position: same,
            gap,
        }
    } else {
        ShadowOutcome::Mismatch {
            position: same,
            gap,
        }
    }
}

/// The route's policy with `strategy` taken out (speculation off when nothing is left).
pub fn without_strategy(policy: &RoutePolicy, strategy: StrategyKind) -> RoutePolicy {
    let allowed: Vec<String> = policy
        .allowed
        .iter()
        .filter(|s| s.as_str() != strategy.name())
        .cloned()
        .collect();
    let drafting = allowed.iter().any(|s| s != "plain");
    RoutePolicy {
        speculation: policy.speculation && drafting,
        allowed,
        k_min: if drafting { policy.k_min } else { 0 },
        k_max: if drafting { policy.k_max } else { 0 },
        ..policy.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{default_policy, WorkloadClass};

    #[test]
    fn outcomes() {
        assert_eq!(
            compare(&[1, 2, 3], &[1, 2, 3], &[1.0; 4]),
            ShadowOutcome::Match
        );
        assert_eq!(
            compare(&[1, 2, 9], &[1, 2, 3], &[1.0, 1.0, 0.0004, 1.0]),
            ShadowOutcome::Tie {
                position: 2,
                gap: 0.0004
            }
        );
        assert_eq!(
            compare(&[1, 9, 3], &[1, 2, 3], &[1.0, 0.5, 1.0, 1.0]),
            ShadowOutcome::Mismatch {
                position: 1,
                gap: 0.5
            }
        );
        // Speculative stopped early (EOS) where plain went on with a clear argmax.
        assert!(matches!(
            compare(&[1], &[1, 2], &[1.0, 2.0, 1.0]),
            ShadowOutcome::Mismatch { position: 1, .. }
        ));
    }

    #[test]
    fn a_disabled_strategy_leaves_the_policy_valid() {
        let p = default_policy(WorkloadClass::Chat);
        let q = without_strategy(&p, StrategyKind::Suffix);
        assert!(!q.allowed.contains(&"suffix".to_string()) && q.speculation);
        q.validate().unwrap();
        // Take out every other strategy the policy allows: nothing is left to speculate with.
        let mut last = q;
        for s in StrategyKind::ALL {
            if s != StrategyKind::Suffix {
                assert!(last.speculation, "speculation ended before {s} left");
                last = without_strategy(&last, s);
            }
        }
        assert!(!last.speculation);
        last.validate().unwrap();
    }
}
