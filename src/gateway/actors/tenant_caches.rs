//! Each tenant's suffix cache, shared by the strategy actors. At most `max_tenants` caches
//! are kept, the least recently used tenant's dropped first: a full cache holds the counts
//! of `tokens_per_tenant` tokens, so memory is bounded however many tenants the gateway
//! serves. A request still drafting from a dropped cache keeps it until the request ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use specgate_strategies::{SharedSuffixCache, SuffixCache};

use crate::drafting::registry::SUFFIX_MAX_DEPTH;

/// Tokens of earlier requests each tenant's cache keeps by default: a few hundred requests.
/// The counts of model answers take about 361 bytes a token
/// (`examples/suffix_cache_memory.rs`), so about 45 MiB a full cache.
pub const SUFFIX_CACHE_TOKENS: usize = 1 << 17;
/// Tenants whose caches are kept by default: about 1.4 GiB when all are full.
pub const SUFFIX_CACHE_TENANTS: usize = 32;

/// The tenants' caches (cheap to clone: clones share them).
#[derive(Clone)]
pub struct TenantSuffixCaches {
    inner: Arc<Mutex<Caches>>,
    max_tenants: usize,
    tokens_per_tenant: usize,
}

#[derive(Default)]
struct Caches {
    /// Each tenant's cache and when it was last asked for.
    by_tenant: HashMap<String, (SharedSuffixCache, u64)>,
    clock: u64,
}

impl Default for TenantSuffixCaches {
    fn default() -> Self {
        Self::new(SUFFIX_CACHE_TENANTS, SUFFIX_CACHE_TOKENS)
    }
}

impl TenantSuffixCaches {
    pub fn new(max_tenants: usize, tokens_per_tenant: usize) -> Self {
        Self {
            inner: Arc::default(),
            max_tenants: max_tenants.max(1),
            tokens_per_tenant,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Caches> {
        // A poisoned map still holds valid caches: a panic elsewhere must not stop drafting.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tenant's cache, created on first use (dropping the least recently used tenant's
    /// when `max_tenants` are kept).
    pub fn get_or_create(&self, tenant: &str) -> SharedSuffixCache {
        let mut c = self.lock();
        c.clock += 1;
        let now = c.clock;
        if let Some((cache, used)) = c.by_tenant.get_mut(tenant) {
            *used = now;
            return cache.clone();
        }
        if c.by_tenant.len() >= self.max_tenants {
            let oldest = c
                .by_tenant
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(t, _)| t.clone());
            if let Some((cache, _)) = oldest.and_then(|t| c.by_tenant.remove(&t)) {
                release(cache);
                metrics::counter!("specgate_suffix_caches_dropped_total").increment(1);
            }
        }
        let cache = Arc::new(Mutex::new(SuffixCache::new(
            SUFFIX_MAX_DEPTH,
            self.tokens_per_tenant,
        )));
        c.by_tenant.insert(tenant.to_string(), (cache.clone(), now));
        cache
    }

    /// The tenant's cache if it has one (asking creates none and does not count as a use).
    pub fn get(&self, tenant: &str) -> Option<SharedSuffixCache> {
        self.lock().by_tenant.get(tenant).map(|(c, _)| c.clone())
    }

    /// Tenants with a cache.
    pub fn len(&self) -> usize {
        self.lock().by_tenant.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Free a dropped tenant's counts on a thread of their own: freeing a full 2^18-token cache
/// of random tokens took 28 ms, which on the actors' thread would stall every request's
/// planning, and on the
/// engine thread (where a request still drafting from it would drop the last handle) every
/// sequence. A request still holding the cache then finds it empty and unable to grow.
fn release(cache: SharedSuffixCache) {
    let spawned = std::thread::Builder::new()
        .name("specgate-cache-free".into())
        .spawn(move || {
            let mut guard = cache.lock().unwrap_or_else(|p| p.into_inner());
            let counts = std::mem::replace(&mut *guard, SuffixCache::new(SUFFIX_MAX_DEPTH, 0));
            drop(guard);
            drop(counts);
        });
    // Without a thread the handle is dropped here: slow, but memory stays bounded.
    drop(spawned);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_tenants_cache_is_dropped_first() {
        let caches = TenantSuffixCaches::new(2, 100);
        let a = caches.get_or_create("a");
        a.lock().unwrap().insert(vec![1, 2, 3]);
        let b = caches.get_or_create("b");
        b.lock().unwrap().insert(vec![4, 5]);
        // `a` is used again, so `b` is the least recently used when `c` arrives.
        assert!(Arc::ptr_eq(&caches.get_or_create("a"), &a));
        caches.get_or_create("c");
        assert_eq!(caches.len(), 2);
        assert!(caches.get("b").is_none());
        let kept = caches.get("a").expect("a is kept");
        assert_eq!(kept.lock().unwrap().len_tokens(), 3);
        // A request still holding `b`'s cache finds it emptied (off this thread) and shut.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while b.lock().unwrap().len_tokens() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        b.lock().unwrap().insert(vec![6, 7]);
        assert_eq!(b.lock().unwrap().len_tokens(), 0);
        // Asking without creating neither creates nor refreshes.
        assert!(caches.get("d").is_none());
        assert_eq!(caches.len(), 2);
    }
}
