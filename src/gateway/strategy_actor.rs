//! Strategy actors, one per strategy kind: each owns its drafters' shared state (suffix
//! caches kept per tenant, so one tenant's text never drafts for another's; shared
//! draft-model weights) and hands every request a drafter of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use specgate_strategies::{
    NgramDrafter, PlainDrafter, SharedSuffixCache, StrategyKind, SuffixCache, SuffixDrafter,
};

use crate::model_drafter::{ModelDrafter, SharedModel};
use crate::strategy::{BoxedDrafter, SUFFIX_MAX_DEPTH, SUFFIX_MIN_SCORE};

/// Tokens of earlier requests each tenant's suffix cache keeps.
pub const SUFFIX_CACHE_TOKENS: usize = 1 << 18;

/// Owns one strategy's shared state and builds drafters from it.
pub struct StrategyActor {
    pub kind: StrategyKind,
    pub draft_model: Option<SharedModel>,
    suffix_caches: HashMap<String, SharedSuffixCache>,
}

impl StrategyActor {
    pub fn new(kind: StrategyKind, draft_model: Option<SharedModel>) -> Self {
        Self {
            kind,
            draft_model,
            suffix_caches: HashMap::new(),
        }
    }
}

impl Actor for StrategyActor {
    type Context = Context<Self>;
}

/// A drafter for one request of `tenant`.
#[derive(Message)]
#[rtype(result = "Result<BoxedDrafter, String>")]
pub struct Checkout {
    pub tenant: String,
    pub seed: u64,
}

impl Handler<Checkout> for StrategyActor {
    type Result = Result<BoxedDrafter, String>;

    fn handle(&mut self, msg: Checkout, _: &mut Context<Self>) -> Self::Result {
        Ok(match self.kind {
            StrategyKind::Plain => Box::new(PlainDrafter),
            StrategyKind::Ngram => Box::new(NgramDrafter::default()),
            StrategyKind::Suffix => {
                let cache = self
                    .suffix_caches
                    .entry(msg.tenant)
                    .or_insert_with(|| {
                        Arc::new(Mutex::new(SuffixCache::new(
                            SUFFIX_MAX_DEPTH,
                            SUFFIX_CACHE_TOKENS,
                        )))
                    })
                    .clone();
                Box::new(SuffixDrafter::new(
                    SUFFIX_MAX_DEPTH,
                    SUFFIX_MIN_SCORE,
                    Some(cache),
                ))
            }
            StrategyKind::Draft | StrategyKind::EarlyExit => {
                let model = self
                    .draft_model
                    .clone()
                    .ok_or_else(|| format!("no model loaded for strategy {}", self.kind))?;
                let name = self.kind.name();
                Box::new(
                    ModelDrafter::for_sequence(name, model, msg.seed).map_err(|e| e.to_string())?,
                )
            }
        })
    }
}

/// The strategy actors by kind.
pub type Strategies = Arc<HashMap<StrategyKind, Addr<StrategyActor>>>;
