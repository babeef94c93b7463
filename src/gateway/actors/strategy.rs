//! Strategy actors, one per strategy kind: each owns its drafters' shared state (suffix
//! caches kept per tenant, so one tenant's text never drafts for another's; shared
//! draft-model weights) and hands every request a drafter of its own.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use specgate_strategies::{PlainDrafter, SharedSuffixCache, StrategyKind, SuffixRecorder, TokenId};

use crate::drafting::registry::{self, BoxedDrafter, DraftRequest, DraftResources, DrafterHook};

pub use crate::gateway::actors::tenant_caches::TenantSuffixCaches;

/// Owns one strategy's shared state and builds drafters from it.
pub struct StrategyActor {
    pub kind: StrategyKind,
    /// What the server loaded for drafting (models, heads, the answer corpus).
    resources: DraftResources,
    suffix_caches: TenantSuffixCaches,
    /// Wraps each drafter handed out (fault injection in tests; none in service).
    hook: Option<DrafterHook>,
}

impl StrategyActor {
    pub fn new(kind: StrategyKind, resources: DraftResources) -> Self {
        Self {
            kind,
            resources,
            suffix_caches: TenantSuffixCaches::default(),
            hook: None,
        }
    }

    /// Wrap every drafter handed out with `hook`.
    pub fn with_drafter_hook(mut self, hook: Option<DrafterHook>) -> Self {
        self.hook = hook;
        self
    }

    fn hooked(&self, drafter: BoxedDrafter) -> BoxedDrafter {
        match &self.hook {
            Some(hook) => hook(drafter),
            None => drafter,
        }
    }

    /// Share the tenants' suffix caches with other strategy actors.
    pub fn with_suffix_caches(mut self, caches: TenantSuffixCaches) -> Self {
        self.suffix_caches = caches;
        self
    }

    /// The tenant's cache of earlier requests' text (created on first use).
    fn suffix_cache(&mut self, tenant: &str) -> SharedSuffixCache {
        self.suffix_caches.get_or_create(tenant)
    }

    /// A drafter for one request of `tenant`: the suffix strategies draft from that tenant's
    /// cache only, and every strategy's request leaves its text there for later ones, a
    /// request whose drafter could not be built (it runs plain) included.
    pub fn checkout(&mut self, tenant: String, seed: u64) -> Result<BoxedDrafter, Unavailable> {
        let cache = self.suffix_cache(&tenant);
        match self.build(tenant, seed) {
            Ok(drafter) if self.kind.uses_suffix_cache() => Ok(self.hooked(drafter)),
            Ok(drafter) => Ok(self.hooked(Box::new(SuffixRecorder::new(drafter, cache)))),
            Err(why) => Err(Unavailable {
                why,
                plain: Box::new(SuffixRecorder::new(Box::new(PlainDrafter), cache)),
            }),
        }
    }

    /// Tokens (up to `limit`) of an earlier answer to `prompt` in `tenant`'s cache (0 for a
    /// tenant with none yet: a lookup creates no cache). Best effort: a cache the engine
    /// thread holds at that moment (drafting, indexing) recalls nothing rather than stall
    /// the thread every actor's and the planner's messages run on.
    pub fn recall(&self, tenant: &str, prompt: &[TokenId], limit: usize) -> usize {
        self.suffix_caches.get(tenant).map_or(0, |c| {
            let cache = match c.try_lock() {
                Ok(cache) => cache,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    metrics::counter!("specgate_recall_busy_total").increment(1);
                    return 0;
                }
            };
            cache.recall(prompt, limit)
        })
    }

    fn build(&mut self, tenant: String, seed: u64) -> Result<BoxedDrafter, String> {
        let suffix_cache = self
            .kind
            .uses_suffix_cache()
            .then(|| self.suffix_cache(&tenant));
        let request = DraftRequest { seed, suffix_cache };
        registry::build(self.kind, &self.resources, request).map_err(|e| e.to_string())
    }
}

/// A strategy whose drafter could not be built for a request: why, and the plain decoding
/// the request runs instead, which still leaves its text in the tenant's suffix cache.
pub struct Unavailable {
    pub why: String,
    pub plain: BoxedDrafter,
}

impl std::fmt::Debug for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "drafter unavailable: {}", self.why)
    }
}

impl Actor for StrategyActor {
    type Context = Context<Self>;
}

/// A drafter for one request of `tenant`.
#[derive(Message)]
#[rtype(result = "Result<BoxedDrafter, Unavailable>")]
pub struct Checkout {
    pub tenant: String,
    pub seed: u64,
}

impl Handler<Checkout> for StrategyActor {
    type Result = Result<BoxedDrafter, Unavailable>;

    fn handle(&mut self, msg: Checkout, _: &mut Context<Self>) -> Self::Result {
        self.checkout(msg.tenant, msg.seed)
    }
}

/// How much of an earlier answer to a prompt the tenant's cache holds (see
/// `SuffixCache::recall`).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Recall {
    pub tenant: String,
    pub prompt: Vec<TokenId>,
    pub limit: usize,
}

impl Handler<Recall> for StrategyActor {
    type Result = usize;

    fn handle(&mut self, msg: Recall, _: &mut Context<Self>) -> Self::Result {
        self.recall(&msg.tenant, &msg.prompt, msg.limit)
    }
}

/// The strategy actors by kind.
pub type Strategies = Arc<HashMap<StrategyKind, Addr<StrategyActor>>>;

#[cfg(test)]
mod tests {
    use super::*;
    use specgate_strategies::{DraftContext, SamplingParams, TokenId};

    /// `f` with a greedy context whose sequence is `tokens`.
    fn with_ctx<R>(tokens: &[TokenId], f: impl FnOnce(&DraftContext<'_>) -> R) -> R {
        let sp = SamplingParams::greedy();
        f(&DraftContext {
            tokens,
            prompt_len: tokens.len(),
            sampling: &sp,
            hidden: None,
            fresh_hidden: &[],
            row_cost: None,
        })
    }

    /// One actor per kind, all over one set of tenant caches (as the gateway builds them).
    fn sharing_caches<const N: usize>(kinds: [StrategyKind; N]) -> [StrategyActor; N] {
        let caches = TenantSuffixCaches::default();
        kinds.map(|kind| {
            StrategyActor::new(kind, DraftResources::default()).with_suffix_caches(caches.clone())
        })
    }

    /// A request of `tokens` run through `d` to its end (its text reaches the cache).
    fn run_to_end(mut d: BoxedDrafter, tokens: &[TokenId]) {
        with_ctx(tokens, |ctx| d.on_commit(ctx, 0));
        d.finish();
    }

    fn draft(d: &mut BoxedDrafter, tokens: &[TokenId]) -> Vec<TokenId> {
        with_ctx(tokens, |ctx| {
            d.propose(ctx, 8).map(|d| d.tokens).unwrap_or_default()
        })
    }

    /// What one tenant's requests taught the suffix cache drafts for that tenant only, also
    /// through another actor sharing the caches (as suffix and suffix-medusa do).
    #[test]
    fn a_tenants_suffix_cache_never_drafts_for_another() {
        let [mut teacher, mut actor] = sharing_caches([StrategyKind::Suffix, StrategyKind::Suffix]);
        let lead: Vec<TokenId> = vec![11, 12, 13, 14];
        let secret: Vec<TokenId> = vec![901, 902, 903, 904, 905];
        let mut a = teacher.checkout("tenant-a".into(), 0).unwrap();
        let full: Vec<TokenId> = lead.iter().chain(&secret).copied().collect();
        draft(&mut a, &full);
        a.finish();
        let contains_secret =
            |d: &[TokenId]| d.windows(2).any(|w| secret.windows(2).any(|s| s == w));
        let mut a_again = actor.checkout("tenant-a".into(), 0).unwrap();
        assert!(
            contains_secret(&draft(&mut a_again, &lead)),
            "the test must be able to fail"
        );
        let mut b = actor.checkout("tenant-b".into(), 0).unwrap();
        let proposed = draft(&mut b, &lead);
        assert!(
            !contains_secret(&proposed),
            "tenant B drafted A's text: {proposed:?}"
        );
        assert!(proposed.iter().all(|t| !secret.contains(t)));
    }

    /// A request that ran plain (or with a drafter that keeps no cache) still leaves its text
    /// for the tenant's later suffix drafting, and only the tenant's.
    #[test]
    fn every_strategys_requests_feed_their_tenants_suffix_cache() {
        let [mut plain, mut suffix] = sharing_caches([StrategyKind::Plain, StrategyKind::Suffix]);
        let full: Vec<TokenId> = vec![11, 12, 13, 14, 901, 902, 903, 904, 905];
        run_to_end(plain.checkout("tenant-a".into(), 0).unwrap(), &full);
        let mut a = suffix.checkout("tenant-a".into(), 0).unwrap();
        assert_eq!(draft(&mut a, &full[..5]), full[5..].to_vec());
        let mut b = suffix.checkout("tenant-b".into(), 0).unwrap();
        assert!(draft(&mut b, &full[..5]).is_empty());
    }

    /// A strategy that cannot build its drafter (no Medusa heads loaded) says why, and the
    /// plain decoding its request runs instead still feeds the tenant's cache.
    #[test]
    fn a_request_whose_drafter_cannot_be_built_still_feeds_its_tenants_cache() {
        let [mut medusa, mut suffix] = sharing_caches([StrategyKind::Medusa, StrategyKind::Suffix]);
        let full: Vec<TokenId> = vec![11, 12, 13, 14, 901, 902, 903, 904, 905];
        let Err(unavailable) = medusa.checkout("tenant-a".into(), 0) else {
            panic!("Medusa drafted without heads");
        };
        assert!(unavailable.why.contains("Medusa"), "{}", unavailable.why);
        let mut p = unavailable.plain;
        assert!(
            draft(&mut p, &full).is_empty(),
            "the fallback drafts nothing"
        );
        run_to_end(p, &full);
        let mut a = suffix.checkout("tenant-a".into(), 0).unwrap();
        assert_eq!(draft(&mut a, &full[..5]), full[5..].to_vec());
    }

    /// A prompt a tenant sent before is recalled from its own cache only, and asking does
    /// not create a cache for a tenant that has none.
    #[test]
    fn a_prompt_is_recalled_from_its_own_tenants_cache_only() {
        let caches = TenantSuffixCaches::default();
        let mut plain = StrategyActor::new(StrategyKind::Plain, DraftResources::default())
            .with_suffix_caches(caches.clone());
        let prompt: Vec<TokenId> = (100..160).collect();
        let full: Vec<TokenId> = prompt.iter().copied().chain(500..540).collect();
        run_to_end(plain.checkout("tenant-a".into(), 0).unwrap(), &full);
        assert_eq!(plain.recall("tenant-a", &prompt, 16), 16);
        assert_eq!(plain.recall("tenant-b", &prompt, 16), 0);
        assert!(caches.get("tenant-b").is_none());
    }
}
