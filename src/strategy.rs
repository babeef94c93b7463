//! Choosing a draft strategy by name and building its drafter.

use std::fmt;
use std::str::FromStr;

use specgate_strategies::{Drafter, NgramDrafter, PlainDrafter};

/// The draft strategies specgate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    Plain,
    Ngram,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 2] = [StrategyKind::Plain, StrategyKind::Ngram];

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Ngram => "ngram",
        }
    }

    /// A fresh drafter for one sequence.
    pub fn drafter(self) -> Box<dyn Drafter> {
        match self {
            Self::Plain => Box::new(PlainDrafter),
            Self::Ngram => Box::new(NgramDrafter::default()),
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown strategy {0:?} (known: plain, ngram)")]
pub struct UnknownStrategy(String);

impl FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownStrategy(s.to_string()))
    }
}
