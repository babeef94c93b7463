//! Choosing a draft strategy by name and building its drafter.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use specgate_strategies::{Drafter, NgramDrafter, PlainDrafter, SharedSuffixCache, SuffixDrafter};

use crate::model_drafter::{DraftModelError, ModelDrafter};
use crate::tokenizer::Tokenizer;

/// The draft strategies specgate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    Plain,
    Ngram,
    Suffix,
    Draft,
    EarlyExit,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 5] = [
        StrategyKind::Plain,
        StrategyKind::Ngram,
        StrategyKind::Suffix,
        StrategyKind::Draft,
        StrategyKind::EarlyExit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Ngram => "ngram",
            Self::Suffix => "suffix",
            Self::Draft => "draft",
            Self::EarlyExit => "early-exit",
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    #[error("unknown strategy {0:?} (known: plain, ngram, suffix, draft, early-exit)")]
    Unknown(String),
    #[error("strategy draft needs --draft-model PATH")]
    NoDraftModel,
    #[error(transparent)]
    DraftModel(#[from] DraftModelError),
}

impl FromStr for StrategyKind {
    type Err = StrategyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| StrategyError::Unknown(s.to_string()))
    }
}

/// What building a drafter may need beyond its kind.
#[derive(Debug, Clone)]
pub struct DrafterConfig {
    /// The target's GGUF (early exit loads its first layers from it).
    pub target_path: PathBuf,
    pub draft_model: Option<PathBuf>,
    pub exit_layer: usize,
    /// Earlier requests' text for suffix drafting (one scope: a process, later a tenant).
    pub suffix_cache: Option<SharedSuffixCache>,
    pub seed: u64,
}

/// Suffix drafting: contexts up to 8 tokens, stop when the score falls under 0.3.
pub const SUFFIX_MAX_DEPTH: usize = 8;
pub const SUFFIX_MIN_SCORE: f32 = 0.3;
/// The built-in early-exit draft: the target's first 8 of 30 layers.
pub const DEFAULT_EXIT_LAYER: usize = 8;

impl StrategyKind {
    /// A drafter for this strategy. Model drafters load their weights here: build once and
    /// reuse across sequences (they resynchronise to whatever sequence they are given).
    pub fn build(
        self,
        cfg: &DrafterConfig,
        target: &Tokenizer,
    ) -> Result<Box<dyn Drafter>, StrategyError> {
        Ok(match self {
            Self::Plain => Box::new(PlainDrafter),
            Self::Ngram => Box::new(NgramDrafter::default()),
            Self::Suffix => Box::new(SuffixDrafter::new(
                SUFFIX_MAX_DEPTH,
                SUFFIX_MIN_SCORE,
                cfg.suffix_cache.clone(),
            )),
            Self::Draft => {
                let path = cfg
                    .draft_model
                    .as_ref()
                    .ok_or(StrategyError::NoDraftModel)?;
                Box::new(ModelDrafter::separate(path, target, cfg.seed)?)
            }
            Self::EarlyExit => Box::new(ModelDrafter::early_exit(
                &cfg.target_path,
                cfg.exit_layer,
                cfg.seed,
            )?),
        })
    }
}
