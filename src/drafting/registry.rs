//! Choosing a draft strategy by name and building its drafter.

use std::path::PathBuf;
use std::sync::Arc;

pub use specgate_strategies::StrategyKind;
use specgate_strategies::{
    eagle::EagleDrafter, FallbackBudget, FallbackDrafter, MedusaDrafter, NgramDrafter,
    PlainDrafter, SharedCorpus, SharedSuffixCache, SuffixDrafter, UnknownStrategy,
};

use crate::drafting::model_drafter::{DraftModelError, ModelDrafter, SharedModel};
use crate::heads::bundle::MedusaBundle;
use crate::heads::eagle_bundle::EagleBundle;
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
    #[error("EAGLE layer: {0}")]
    Eagle(#[from] crate::heads::eagle_bundle::EagleError),
    #[error("strategy {0} cannot draft here: {needs} not loaded", needs = registration(*.0).needs.what())]
    NotLoaded(StrategyKind),
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
    /// The EAGLE layer's directory (default: the shipped layer for the target).
    pub eagle_layer: Option<PathBuf>,
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

/// Wraps every drafter a strategy actor hands out (fault injection installs one).
pub type DrafterHook = Arc<dyn Fn(BoxedDrafter) -> BoxedDrafter + Send + Sync>;

/// What a strategy's drafters need loaded beyond the target (a server without it does not
/// offer the strategy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// A separate draft GGUF (`--draft-model`).
    DraftModel,
    /// The target's first layers as a draft model (`--exit-layer`).
    EarlyExitLayers,
    /// Medusa heads for the target.
    MedusaHeads,
    /// The EAGLE draft layer for the target.
    EagleLayer,
}

/// What drafters are built from, loaded once (a server's strategy actors, a command).
#[derive(Clone, Default)]
pub struct DraftResources {
    pub draft_model: Option<SharedModel>,
    pub early_exit: Option<SharedModel>,
    pub medusa: Option<MedusaBundle>,
    pub eagle: Option<EagleBundle>,
    /// The answer corpus the suffix strategies consult after a tenant's own text.
    pub corpus: Option<SharedCorpus>,
}

impl Needs {
    /// What is needed, in words.
    pub fn what(self) -> &'static str {
        match self {
            Needs::Nothing => "nothing",
            Needs::DraftModel => "a draft model (--draft-model)",
            Needs::EarlyExitLayers => "the target's early-exit layers",
            Needs::MedusaHeads => "Medusa heads",
            Needs::EagleLayer => "an EAGLE layer",
        }
    }
}

impl DraftResources {
    /// Whether a strategy with these needs can be built.
    pub fn has(&self, needs: Needs) -> bool {
        match needs {
            Needs::Nothing => true,
            Needs::DraftModel => self.draft_model.is_some(),
            Needs::EarlyExitLayers => self.early_exit.is_some(),
            Needs::MedusaHeads => self.medusa.is_some(),
            Needs::EagleLayer => self.eagle.is_some(),
        }
    }
}

/// One sequence's share of a drafter: its seed, and the cache of earlier text (one scope: a
/// tenant, a process) the suffix strategies draft from.
#[derive(Clone, Default)]
pub struct DraftRequest {
    pub seed: u64,
    pub suffix_cache: Option<SharedSuffixCache>,
}

type Build = fn(StrategyKind, &DraftResources, DraftRequest) -> Result<BoxedDrafter, StrategyError>;

/// A strategy as the server offers it: what it needs and how one sequence's drafter is built.
pub struct Registration {
    pub kind: StrategyKind,
    pub needs: Needs,
    pub build: Build,
}

/// Every strategy's drafter, in one place. Adding a strategy: its drafter in `strategies/`,
/// its variant and row in `strategies/src/kind.rs`, and one row here.
pub const REGISTRY: [Registration; 9] = [
    Registration {
        kind: StrategyKind::Plain,
        needs: Needs::Nothing,
        build: |_, _, _| Ok(Box::new(PlainDrafter)),
    },
    Registration {
        kind: StrategyKind::Ngram,
        needs: Needs::Nothing,
        build: |_, _, _| Ok(Box::new(NgramDrafter::default())),
    },
    Registration {
        kind: StrategyKind::Suffix,
        needs: Needs::Nothing,
        build: |_, res, req| {
            Ok(Box::new(suffix_drafter(
                req.suffix_cache,
                res.corpus.clone(),
            )))
        },
    },
    Registration {
        kind: StrategyKind::Draft,
        needs: Needs::DraftModel,
        build: |kind, res, req| model_drafter(kind, res.draft_model.as_ref(), req.seed),
    },
    Registration {
        kind: StrategyKind::EarlyExit,
        needs: Needs::EarlyExitLayers,
        build: |kind, res, req| model_drafter(kind, res.early_exit.as_ref(), req.seed),
    },
    Registration {
        kind: StrategyKind::Medusa,
        needs: Needs::MedusaHeads,
        build: heads_drafter,
    },
    Registration {
        kind: StrategyKind::MedusaTree,
        needs: Needs::MedusaHeads,
        build: heads_drafter,
    },
    Registration {
        kind: StrategyKind::SuffixMedusa,
        needs: Needs::MedusaHeads,
        build: heads_drafter,
    },
    Registration {
        kind: StrategyKind::Eagle,
        needs: Needs::EagleLayer,
        build: eagle_drafter,
    },
];

/// The registration of `kind`.
pub fn registration(kind: StrategyKind) -> &'static Registration {
    REGISTRY
        .iter()
        .find(|r| r.kind == kind)
        .unwrap_or(&REGISTRY[0]) // unreachable: a test checks every kind has its row
}

/// The strategies `resources` can build, in registry order.
pub fn available(resources: &DraftResources) -> Vec<StrategyKind> {
    REGISTRY
        .iter()
        .filter(|r| resources.has(r.needs))
        .map(|r| r.kind)
        .collect()
}

/// A drafter for one sequence of a `kind` these resources can build.
pub fn build(
    kind: StrategyKind,
    resources: &DraftResources,
    request: DraftRequest,
) -> Result<BoxedDrafter, StrategyError> {
    (registration(kind).build)(kind, resources, request)
}

fn model_drafter(
    kind: StrategyKind,
    model: Option<&SharedModel>,
    seed: u64,
) -> Result<BoxedDrafter, StrategyError> {
    let model = model.ok_or(StrategyError::NotLoaded(kind))?;
    Ok(Box::new(ModelDrafter::for_sequence(
        kind.name(),
        Arc::clone(model),
        seed,
    )))
}

fn heads_drafter(
    kind: StrategyKind,
    res: &DraftResources,
    req: DraftRequest,
) -> Result<BoxedDrafter, StrategyError> {
    let b = res.medusa.as_ref().ok_or(StrategyError::NotLoaded(kind))?;
    Ok(medusa_drafter(
        kind,
        b,
        req.seed,
        req.suffix_cache,
        res.corpus.clone(),
    ))
}

fn eagle_drafter(
    kind: StrategyKind,
    res: &DraftResources,
    req: DraftRequest,
) -> Result<BoxedDrafter, StrategyError> {
    let b = res.eagle.as_ref().ok_or(StrategyError::NotLoaded(kind))?;
    let d = EagleDrafter::new(b.head.clone(), b.lm_head.clone(), req.seed)
        .with_min_chance(MEDUSA_MIN_CHANCE)
        .with_tree(EAGLE_TREE_NODES);
    Ok(Box::new(d))
}

impl DrafterConfig {
    /// Load what `kind` needs from the paths given (a command builds one strategy's drafter).
    pub fn resources(
        &self,
        kind: StrategyKind,
        target: &Tokenizer,
    ) -> Result<DraftResources, StrategyError> {
        let mut res = DraftResources {
            corpus: self.corpus.clone(),
            ..DraftResources::default()
        };
        match registration(kind).needs {
            Needs::Nothing => {}
            Needs::DraftModel => {
                let path = self
                    .draft_model
                    .as_ref()
                    .ok_or(StrategyError::NoDraftModel)?;
                res.draft_model = Some(ModelDrafter::load_separate(path, target)?);
            }
            Needs::EarlyExitLayers => {
                let layers = ModelDrafter::load_early_exit(&self.target_path, self.exit_layer)?;
                res.early_exit = Some(layers);
            }
            Needs::MedusaHeads => {
                let dir = self
                    .medusa_heads
                    .clone()
                    .unwrap_or_else(|| crate::heads::bundle::default_dir(&self.target_path));
                res.medusa = Some(crate::heads::bundle::load(&dir, &self.target_path)?);
            }
            Needs::EagleLayer => {
                let dir = self
                    .eagle_layer
                    .clone()
                    .unwrap_or_else(|| crate::heads::eagle_bundle::default_dir(&self.target_path));
                res.eagle = Some(crate::heads::eagle_bundle::load(&dir, &self.target_path)?);
            }
        }
        Ok(res)
    }
}

/// Building a drafter for a [`StrategyKind`] from a [`DrafterConfig`] (commands and tests).
pub trait BuildDrafter {
    /// A drafter for this strategy. Model drafters load their weights here: build once and
    /// reuse across sequences (they resynchronise to whatever sequence they are given).
    fn build(self, cfg: &DrafterConfig, target: &Tokenizer) -> Result<BoxedDrafter, StrategyError>;
}

impl BuildDrafter for StrategyKind {
    fn build(self, cfg: &DrafterConfig, target: &Tokenizer) -> Result<BoxedDrafter, StrategyError> {
        let res = cfg.resources(self, target)?;
        let request = DraftRequest {
            seed: cfg.seed,
            suffix_cache: cfg.suffix_cache.clone(),
        };
        build(self, &res, request)
    }
}

/// Most nodes of a Medusa candidate tree; a round's k bounds it too (its verify pass has one
/// row more).
pub const MEDUSA_TREE_NODES: usize = 16;

/// Most nodes of an EAGLE tree (a round's k bounds it too; EAGLE-2 verifies about 60); the
/// row price prunes it on a CPU. With rows free, chat's tokens per pass on the evaluation
/// prompts: 1.821 at 16 nodes, 1.858 at 32, 1.903 at 64 (expanding 16 nodes of 12 children
/// per level instead of 8 of 8 added 0.006 more at a third more draft time).
pub const EAGLE_TREE_NODES: usize = 64;

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
    b: &MedusaBundle,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_has_exactly_one_registration() {
        for kind in StrategyKind::ALL {
            let rows = REGISTRY.iter().filter(|r| r.kind == kind).count();
            assert_eq!(rows, 1, "{kind}");
        }
    }

    #[test]
    fn a_server_offers_what_it_loaded_and_a_missing_model_is_an_error_not_a_panic() {
        let none = DraftResources::default();
        let offered = available(&none);
        assert_eq!(
            offered,
            vec![
                StrategyKind::Plain,
                StrategyKind::Ngram,
                StrategyKind::Suffix
            ]
        );
        for kind in [
            StrategyKind::Draft,
            StrategyKind::EarlyExit,
            StrategyKind::Medusa,
        ] {
            let built = build(kind, &none, DraftRequest::default());
            assert!(matches!(built, Err(StrategyError::NotLoaded(k)) if k == kind));
        }
    }
}
