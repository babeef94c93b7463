//! The draft strategies by name: what a request, a policy or a command line refers to.

use std::fmt;
use std::str::FromStr;

/// The draft strategies specgate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategyKind {
    Plain,
    Ngram,
    Suffix,
    Draft,
    EarlyExit,
    Medusa,
    /// Medusa heads with candidate trees for greedy requests (chains when sampling).
    MedusaTree,
    /// Suffix lookup when it has a draft, else the first Medusa head's token.
    SuffixMedusa,
}

/// A strategy name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown strategy {0:?} (known: plain, ngram, suffix, draft, early-exit, medusa, medusa-tree, \
     suffix-medusa)"
)]
pub struct UnknownStrategy(pub String);

impl StrategyKind {
    pub const ALL: [StrategyKind; 8] = [
        StrategyKind::Plain,
        StrategyKind::Ngram,
        StrategyKind::Suffix,
        StrategyKind::Draft,
        StrategyKind::EarlyExit,
        StrategyKind::Medusa,
        StrategyKind::MedusaTree,
        StrategyKind::SuffixMedusa,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Ngram => "ngram",
            Self::Suffix => "suffix",
            Self::Draft => "draft",
            Self::EarlyExit => "early-exit",
            Self::Medusa => "medusa",
            Self::MedusaTree => "medusa-tree",
            Self::SuffixMedusa => "suffix-medusa",
        }
    }

    /// Lookup strategies cost next to nothing to draft; model drafters cost forwards.
    pub fn is_lookup(self) -> bool {
        matches!(self, Self::Ngram | Self::Suffix)
    }

    /// Strategies that draft from a cache of earlier requests' text (kept per tenant).
    pub fn uses_suffix_cache(self) -> bool {
        matches!(self, Self::Suffix | Self::SuffixMedusa)
    }

    /// Strategies whose drafters price every token they draft against the round's verify-row
    /// cost (a calibrated chance that the draft so far is accepted) and stop where it no
    /// longer pays: k only caps them, and a lower cap forgoes drafts that pay.
    pub fn prices_own_drafts(self) -> bool {
        matches!(
            self,
            Self::Suffix | Self::SuffixMedusa | Self::Medusa | Self::MedusaTree
        )
    }

    /// Strategies that draft with Medusa heads (served only where heads are loaded).
    pub fn uses_medusa(self) -> bool {
        matches!(self, Self::Medusa | Self::MedusaTree | Self::SuffixMedusa)
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownStrategy(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for k in StrategyKind::ALL {
            assert_eq!(k.name().parse::<StrategyKind>(), Ok(k));
        }
        assert_eq!(
            "eagle".parse::<StrategyKind>(),
            Err(UnknownStrategy("eagle".into()))
        );
    }
}
