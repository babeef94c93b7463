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
    /// The EAGLE draft layer: dynamic trees for greedy requests, chains when sampling.
    Eagle,
}

/// A strategy name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy {0:?} (known: {known})", known = known_names())]
pub struct UnknownStrategy(pub String);

fn known_names() -> String {
    SPECS.map(|s| s.name).join(", ")
}

/// A strategy's name and what the policies need to know of it.
#[derive(Debug, Clone, Copy)]
struct Spec {
    kind: StrategyKind,
    name: &'static str,
    /// Drafting costs next to nothing (a lookup); model drafters cost forwards.
    lookup: bool,
    /// Drafts from a cache of earlier requests' text (kept per tenant).
    suffix_cache: bool,
    /// Prices every token it drafts against the round's verify-row cost (a calibrated chance
    /// that the draft so far is accepted) and stops where it no longer pays: k only caps it,
    /// and a lower cap forgoes drafts that pay.
    prices_own_drafts: bool,
    /// Drafts with Medusa heads (served only where heads are loaded).
    medusa: bool,
}

const fn spec(kind: StrategyKind, name: &'static str) -> Spec {
    Spec {
        kind,
        name,
        lookup: false,
        suffix_cache: false,
        prices_own_drafts: false,
        medusa: false,
    }
}

/// Every strategy, a row each in the order of the variants. Adding a strategy: a variant, a
/// row here, its drafter in a file of its own, and its row in the binary's drafter registry
/// (`src/drafting/registry.rs`).
const SPECS: [Spec; 9] = [
    spec(StrategyKind::Plain, "plain"),
    Spec {
        lookup: true,
        ..spec(StrategyKind::Ngram, "ngram")
    },
    Spec {
        lookup: true,
        suffix_cache: true,
        prices_own_drafts: true,
        ..spec(StrategyKind::Suffix, "suffix")
    },
    spec(StrategyKind::Draft, "draft"),
    spec(StrategyKind::EarlyExit, "early-exit"),
    Spec {
        prices_own_drafts: true,
        medusa: true,
        ..spec(StrategyKind::Medusa, "medusa")
    },
    Spec {
        prices_own_drafts: true,
        medusa: true,
        ..spec(StrategyKind::MedusaTree, "medusa-tree")
    },
    Spec {
        suffix_cache: true,
        prices_own_drafts: true,
        medusa: true,
        ..spec(StrategyKind::SuffixMedusa, "suffix-medusa")
    },
    Spec {
        prices_own_drafts: true,
        ..spec(StrategyKind::Eagle, "eagle")
    },
];

impl StrategyKind {
    /// Every strategy, in the order of [`SPECS`].
    pub const ALL: [StrategyKind; SPECS.len()] = {
        let mut all = [StrategyKind::Plain; SPECS.len()];
        let mut i = 0;
        while i < SPECS.len() {
            all[i] = SPECS[i].kind;
            i += 1;
        }
        all
    };

    fn spec(self) -> &'static Spec {
        &SPECS[self as usize] // rows follow the variants (tested)
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Lookup strategies cost next to nothing to draft; model drafters cost forwards.
    pub fn is_lookup(self) -> bool {
        self.spec().lookup
    }

    /// Strategies that draft from a cache of earlier requests' text (kept per tenant).
    pub fn uses_suffix_cache(self) -> bool {
        self.spec().suffix_cache
    }

    /// Strategies whose drafters price every token they draft against the round's verify-row
    /// cost and stop where it no longer pays: k only caps them.
    pub fn prices_own_drafts(self) -> bool {
        self.spec().prices_own_drafts
    }

    /// Strategies that draft with Medusa heads (served only where heads are loaded).
    pub fn uses_medusa(self) -> bool {
        self.spec().medusa
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
    fn the_table_follows_the_variants_and_keeps_each_property() {
        for (i, s) in SPECS.iter().enumerate() {
            assert_eq!(s.kind as usize, i, "{}", s.name);
        }
        let with = |f: fn(StrategyKind) -> bool| {
            StrategyKind::ALL
                .into_iter()
                .filter(|&k| f(k))
                .map(StrategyKind::name)
                .collect::<Vec<_>>()
        };
        assert_eq!(with(StrategyKind::is_lookup), ["ngram", "suffix"]);
        assert_eq!(
            with(StrategyKind::uses_suffix_cache),
            ["suffix", "suffix-medusa"]
        );
        assert_eq!(
            with(StrategyKind::prices_own_drafts),
            ["suffix", "medusa", "medusa-tree", "suffix-medusa", "eagle"]
        );
        assert_eq!(
            with(StrategyKind::uses_medusa),
            ["medusa", "medusa-tree", "suffix-medusa"]
        );
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for k in StrategyKind::ALL {
            assert_eq!(k.name().parse::<StrategyKind>(), Ok(k));
        }
        let err = "hydra".parse::<StrategyKind>().unwrap_err();
        assert_eq!(err, UnknownStrategy("hydra".into()));
        assert!(err
            .to_string()
            .contains("known: plain, ngram, suffix, draft, early-exit"));
    }
}
