//! Per-replica caches in front of a remote store, so the hot path (authenticating a key,
//! reading a tenant's limits, a route's policy) does not cost a round trip per request.
//! An entry lives [`CacheConfig::ttl`]; a change another replica announces drops it at once;
//! a store that cannot be reached is answered from the stale entry (for at most
//! [`CacheConfig::max_stale`]), so requests keep being served through a database restart.

mod policies;
mod tenants;

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

pub use policies::CachedPolicies;
pub use tenants::CachedTenants;

use super::StoreError;

#[derive(Debug, Clone, Copy)]
pub struct CacheConfig {
    /// How long an entry is served before it is read again (covers a missed notification).
    pub ttl: Duration,
    /// How long a stale entry may answer while the store is unreachable.
    pub max_stale: Duration,
    /// The most entries per cache; past it, the expired go, then everything.
    pub capacity: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(5),
            max_stale: Duration::from_secs(600),
            capacity: 100_000,
        }
    }
}

struct Entry<V> {
    value: V,
    fetched: Instant,
    /// Not before this is the store asked again (a failed refresh backs off).
    refresh_at: Instant,
}

/// A bounded map of values read from a store, each with its age.
pub struct TtlCache<K, V> {
    map: DashMap<K, Entry<V>>,
    config: CacheConfig,
    name: &'static str,
    /// Bumped by every invalidation: a value read before one is not kept after it (it may
    /// predate the change the invalidation announced).
    generation: AtomicU64,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(name: &'static str, config: CacheConfig) -> Self {
        Self {
            map: DashMap::new(),
            config,
            name,
            generation: AtomicU64::new(0),
        }
    }

    /// The generation a fetch starts under; pass it to [`TtlCache::keep`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Keep `value` read under `generation`, unless an invalidation came since. The check and
    /// the insert happen under the entry's lock, and an invalidation bumps the generation
    /// before it removes: whichever comes second wins, never the older value.
    pub fn keep(&self, key: K, value: V, generation: u64) {
        self.make_room();
        let now = Instant::now();
        let entry = self.map.entry(key);
        if self.generation() == generation {
            entry.insert(Entry {
                value,
                fetched: now,
                refresh_at: now + self.config.ttl,
            });
        }
    }

    /// An expired entry's value, claimed for refreshing: the caller answers with it and
    /// refreshes it in the background; others keep getting it until then (one refresh per
    /// entry per TTL). None when the entry is fresh or absent.
    pub fn claim_stale(&self, key: &K) -> Option<V> {
        let now = Instant::now();
        let mut e = self.map.get_mut(key)?;
        if now < e.refresh_at || now.duration_since(e.fetched) >= self.config.max_stale {
            return None;
        }
        e.refresh_at = now + self.config.ttl;
        Some(e.value.clone())
    }

    /// The cached value of `key`, or `fetch`'s (kept). A fetch that fails as
    /// [`StoreError::Unavailable`] is answered from a stale entry when there is one.
    pub fn get<E>(
        &self,
        key: &K,
        fetch: impl FnOnce() -> Result<V, E>,
        unavailable: impl Fn(&E) -> bool,
    ) -> Result<V, E> {
        let now = Instant::now();
        if let Some(e) = self.map.get(key) {
            if now < e.refresh_at {
                metrics::counter!("specgate_cache_hits_total", "cache" => self.name).increment(1);
                return Ok(e.value.clone());
            }
        }
        metrics::counter!("specgate_cache_misses_total", "cache" => self.name).increment(1);
        // An expired entry answers the others for a second while this caller reads it again,
        // so a store that hangs holds up one request per entry, not all of them.
        if let Some(mut e) = self.map.get_mut(key) {
            if now.duration_since(e.fetched) < self.config.max_stale {
                e.refresh_at = now + Duration::from_secs(1).min(self.config.ttl);
            }
        }
        let generation = self.generation();
        match fetch() {
            Ok(value) => {
                self.keep(key.clone(), value.clone(), generation);
                Ok(value)
            }
            Err(err) if unavailable(&err) => match self.map.get_mut(key) {
                Some(mut e) if now.duration_since(e.fetched) < self.config.max_stale => {
                    metrics::counter!("specgate_cache_stale_answers_total", "cache" => self.name)
                        .increment(1);
                    e.refresh_at = now + Duration::from_secs(1);
                    Ok(e.value.clone())
                }
                _ => Err(err),
            },
            Err(err) => Err(err),
        }
    }

    /// Past capacity: the expired go, then everything.
    fn make_room(&self) {
        if self.map.len() >= self.config.capacity {
            let now = Instant::now();
            self.map.retain(|_, e| now < e.refresh_at);
            if self.map.len() >= self.config.capacity {
                self.map.clear();
            }
        }
    }

    pub fn invalidate(&self, key: &K) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.map.remove(key);
    }

    pub fn clear(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.map.clear();
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Whether a store error may pass (serve stale meanwhile).
pub fn transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(ttl_ms: u64, capacity: usize) -> TtlCache<u32, u32> {
        TtlCache::new(
            "test",
            CacheConfig {
                ttl: Duration::from_millis(ttl_ms),
                max_stale: Duration::from_secs(60),
                capacity,
            },
        )
    }

    fn down() -> Result<u32, StoreError> {
        Err(StoreError::Unavailable("down".into()))
    }

    #[test]
    fn hits_until_the_ttl_then_reads_again_and_answers_stale_while_the_store_is_down() {
        let c = cache(30, 10);
        assert_eq!(
            c.get(&1, || Ok::<_, StoreError>(10), transient).unwrap(),
            10
        );
        assert_eq!(c.get(&1, down, transient).unwrap(), 10, "fresh: no fetch");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get(&1, down, transient).unwrap(), 10, "stale while down");
        assert!(c.get(&2, down, transient).is_err(), "nothing to serve");
        let corrupt = || Err::<u32, _>(StoreError::Corrupt("bad".into()));
        std::thread::sleep(Duration::from_millis(1100));
        assert!(
            c.get(&1, corrupt, transient).is_err(),
            "only outages serve stale"
        );
        c.invalidate(&1);
        assert_eq!(
            c.get(&1, || Ok::<_, StoreError>(11), transient).unwrap(),
            11
        );
    }

    #[test]
    fn a_value_read_before_an_invalidation_is_not_kept_after_it() {
        let c = cache(10_000, 10);
        // The fetch races a change another replica announces while it is on the wire.
        let v = c
            .get(
                &1,
                || {
                    c.invalidate(&1);
                    Ok::<_, StoreError>(10)
                },
                transient,
            )
            .unwrap();
        assert_eq!(v, 10, "the caller still gets its answer");
        assert!(c.is_empty(), "but the cache does not keep it");
    }

    #[test]
    fn an_expired_entry_is_claimed_for_refresh_once_and_still_answers() {
        let c = cache(20, 10);
        c.get(&1, || Ok::<_, StoreError>(10), transient).unwrap();
        assert_eq!(c.claim_stale(&1), None, "fresh");
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(c.claim_stale(&1), Some(10));
        assert_eq!(c.claim_stale(&1), None, "claimed: one refresh at a time");
        assert_eq!(c.get(&1, down, transient).unwrap(), 10, "answers meanwhile");
        assert_eq!(c.claim_stale(&2), None, "absent");
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let c = cache(10_000, 4);
        for k in 0..20 {
            c.get(&k, || Ok::<_, StoreError>(k), transient).unwrap();
            assert!(c.len() <= 4);
        }
    }
}
