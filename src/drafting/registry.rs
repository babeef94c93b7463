//! Choosing a draft strategy by name and building its drafter.

use std::path::PathBuf;

pub use specgate_strategies::StrategyKind;
use specgate_strategies::{
    FallbackBudget, FallbackDrafter, MedusaDrafter, NgramDrafter, PlainDrafter, SharedCorpus,
    SharedSuffixCache, SuffixDrafter, UnknownStrategy,
};

use crate::drafting::model_drafter::{DraftModelError, ModelDrafter};
use crate::model::tokenizer::Tokenizer;

#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    #[error(transparent)]
    Unknown(#[from] UnknownStrategy),
    #[error("strategy draft needs --draft-model PATH")]
    NoDraftModel,
    #[error(transparent)]
    DraftModel(#[from] DraftModelError),
    #[error("medusa heads: {0}")]
    Medusa(#[from] crate::heads::bundle::MedusaError),
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
    /// The answer corpus suffix drafting also consults (`crate::drafting::answer_corpus`).
    pub corpus: Option<SharedCorpus>,
    pub seed: u64,
    /// Medusa heads' directory (default: the shipped heads for the target).
    pub medusa_heads: Option<PathBuf>,
}

/// Suffix drafting: contexts up to 8 tokens, stop when the draft's estimated chance of being
/// accepted whole falls under what a verify row costs this round (the caller's cost model),
/// or under 0.2 when it measured none (a fixed floor did best between 0.15 and 0.25 on the
/// shipped prompt sets; the cost model gives 0.21 for one sequence on this CPU).
pub const SUFFIX_MAX_DEPTH: usize = 8;
pub const SUFFIX_MIN_SCORE: f32 = 0.2;
/// The built-in early-exit draft: the target's first 8 of 30 layers.
pub const DEFAULT_EXIT_LAYER: usize = 8;

/// A drafter that can move to the engine's thread.
pub type BoxedDrafter = specgate_strategies::SendDrafter;

/// Building a drafter for a [`StrategyKind`].
pub trait BuildDrafter {
    /// A drafter for this strategy. Model drafters load their weights here: build once and
    /// reuse across sequences (they resynchronise to whatever sequence they are given).
    fn build(self, cfg: &DrafterConfig, target: &Tokenizer) -> Result<BoxedDrafter, StrategyError>;
}

impl BuildDrafter for StrategyKind {
    fn build(self, cfg: &DrafterConfig, target: &Tokenizer) -> Result<BoxedDrafter, StrategyError> {
        Ok(match self {
            StrategyKind::Plain => Box::new(PlainDrafter),
            StrategyKind::Ngram => Box::new(NgramDrafter::default()),
            StrategyKind::Suffix => {
                Box::new(suffix_drafter(cfg.suffix_cache.clone(), cfg.corpus.clone()))
            }
            StrategyKind::Draft => {
                let path = cfg
                    .draft_model
                    .as_ref()
                    .ok_or(StrategyError::NoDraftModel)?;
                Box::new(ModelDrafter::separate(path, target, cfg.seed)?)
            }
            StrategyKind::EarlyExit => Box::new(ModelDrafter::early_exit(
                &cfg.target_path,
                cfg.exit_layer,
                cfg.seed,
            )?),
            StrategyKind::Medusa | StrategyKind::MedusaTree | StrategyKind::SuffixMedusa => {
                let dir = cfg
                    .medusa_heads
                    .clone()
                    .unwrap_or_else(|| crate::heads::bundle::default_dir(&cfg.target_path));
                let b = crate::heads::bundle::load(&dir, &cfg.target_path)?;
                let (cache, corpus) = (cfg.suffix_cache.clone(), cfg.corpus.clone());
                medusa_drafter(self, &b, cfg.seed, cache, corpus)
            }
        })
    }
}

/// Most nodes of a Medusa candidate tree; a round's k bounds it too (its verify pass has one
/// row more).
pub const MEDUSA_TREE_NODES: usize = 16;

/// What `suffix-medusa` drafts with the heads when the lookup has nothing. Greedy: a tree of
/// at most 4 nodes (the first head's runner-up is accepted where its favourite is not).
/// Sampled: one token, because only the first head is accepted often enough to pay for its
/// verify row. `bench spec` at k = 8, 128 tokens, 2 repeats, set speed-ups against the old
/// one-token chain (code_edit / rag / creative / chat): greedy 2.00 / 1.59 / 1.40 / 1.18
/// against 1.85 / 1.55 / 1.40 / 1.19, at 256 tokens on code_edit 2.18 and 2.01 against 1.95;
/// sampled at T = 0.8 a 4-token chain did worse on code_edit (1.39 against 1.49).
pub const SUFFIX_MEDUSA_HEADS: FallbackBudget = FallbackBudget {
    greedy: 4,
    sampled: 1,
};

/// Medusa drafts keep a guess only while its calibrated chance of acceptance (joint with the
/// guesses before it) covers what its verify row costs. The engine and `generate` give each
/// round that cost from their measured step times (`LoadView::row_cost`: 0.21 for one
/// sequence on this 2-core CPU, less on a GPU, more under load); this is the floor when a
/// caller measured nothing. A fixed 0.2 took `bench spec` (medusa k = 1 / 2 / 4) on chat from
/// 1.02 / 0.85 / 0.67 to 1.06 / 1.04 / 1.02 and on creative from 1.02 / 0.85 / 0.64 to
/// 1.10 / 1.05 / 1.03; 0.3 did no better.
pub const MEDUSA_MIN_CHANCE: f32 = 0.2;

/// A suffix drafter over `cache` (earlier requests' text of one scope) and `corpus` (text of
/// no scope), or the sequence alone.
pub fn suffix_drafter(
    cache: Option<SharedSuffixCache>,
    corpus: Option<SharedCorpus>,
) -> SuffixDrafter {
    SuffixDrafter::new(SUFFIX_MAX_DEPTH, SUFFIX_MIN_SCORE, cache).with_corpus(corpus)
}

/// A drafter over loaded Medusa heads: `medusa-tree` drafts trees for greedy requests;
/// `suffix-medusa` drafts by suffix lookup over `suffix_cache` and falls back to the heads.
pub fn medusa_drafter(
    kind: StrategyKind,
    b: &crate::heads::bundle::MedusaBundle,
    seed: u64,
    suffix_cache: Option<SharedSuffixCache>,
    corpus: Option<SharedCorpus>,
) -> BoxedDrafter {
    let d = MedusaDrafter::new(b.heads.clone(), b.lm_head.clone(), seed)
        .with_min_chance(MEDUSA_MIN_CHANCE);
    match kind {
        StrategyKind::MedusaTree => Box::new(d.with_tree(MEDUSA_TREE_NODES)),
        StrategyKind::SuffixMedusa => Box::new(FallbackDrafter::new(
            kind.name(),
            Box::new(suffix_drafter(suffix_cache, corpus)),
            Box::new(d.with_tree(MEDUSA_TREE_NODES)),
            SUFFIX_MEDUSA_HEADS,
        )),
        _ => Box::new(d),
    }
}
