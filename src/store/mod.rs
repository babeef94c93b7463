//! The store seam: what the gateway keeps beyond one request, behind traits —
//! [`TenantStore`] (tenants, keys and their limit overrides), [`PolicyStore`] (routing
//! policies and their versions), [`HistoryStore`] (per-route history buckets) and
//! [`Limiter`] (the admission counters: requests in flight, tokens per minute). The gateway
//! holds them as [`Stores`] and never names an implementation's types; [`sled`] is the
//! embedded one (the default, no server needed). The pure parts — records, key formats,
//! history keys and rows, the limits book — sit beside the traits and are tested alone.
//!
//! Every trait is written for a store that may be remote: calls are fallible
//! ([`StoreError::Unavailable`] becomes a 503), may block on a round trip, and history is
//! written in batches from the history writer's own thread. HTTP handlers make every store
//! call on a blocking thread (`gateway/http/store_calls.rs`); the planner reads a route's
//! policy on its own thread, which a remote store answers from [`cache`].
//!
//! Stores by URL ([`StoreUrl`]): `sled:PATH` (the default, one replica) or `postgres://…`
//! (shared by replicas: [`postgres`], with per-replica [`cache`]s in front). `--redis`
//! adds [`redis`]: the cross-replica [`Limiter`] and the change notifications that keep the
//! caches fresh. Adding a store: implement the traits, and open it in [`Stores::connect`].

pub mod cache;
pub mod changes;
#[cfg(test)]
pub(crate) mod contract;
pub mod copy;
pub mod history;
pub mod limiter;
pub mod limits;
pub mod policies;
pub mod policy_changes;
pub mod postgres;
pub mod redis;
pub mod responses;
pub mod runtime;
pub mod sled;
pub mod tenants;
#[doc(hidden)]
pub mod test_services;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use history::HistoryStore;
pub use limiter::{Limiter, LocalLimiter};
pub use policies::PolicyStore;
pub use responses::ResponseStore;
pub use tenants::TenantStore;

/// What can go wrong in any store, whatever holds it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or could not complete the call; nothing acknowledged
    /// was lost, and the caller may retry.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// A stored record this build cannot read.
    #[error("a stored record is corrupt: {0}")]
    Corrupt(String),
    /// The store could not be opened.
    #[error("opening the store: {0}")]
    Open(String),
    /// The store's schema is newer than this build, or migrating it failed.
    #[error("the store's schema: {0}")]
    Schema(String),
}

/// The stores a gateway runs on, opened together.
#[derive(Clone)]
pub struct Stores {
    pub tenants: Arc<dyn TenantStore>,
    pub policies: Arc<dyn PolicyStore>,
    pub history: Arc<dyn HistoryStore>,
    pub limiter: Arc<dyn Limiter>,
    pub responses: Arc<dyn ResponseStore>,
}

/// Where a deployment's state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sled:PATH` (or a bare path): the embedded store, one replica.
    Sled(PathBuf),
    /// `postgres://…` or `postgresql://…`: shared by every replica.
    Postgres(String),
}

impl std::str::FromStr for StoreUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("sled:") {
            return Ok(StoreUrl::Sled(PathBuf::from(path)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(s.to_string()));
        }
        if s.is_empty() || s.contains("://") {
            return Err(format!(
                "unknown store {s:?}: expected sled:PATH or postgres://USER@HOST:PORT/DB"
            ));
        }
        Ok(StoreUrl::Sled(PathBuf::from(s)))
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sled(p) => write!(f, "sled:{}", p.display()),
            StoreUrl::Postgres(url) => f.write_str(&postgres::redact(url)),
        }
    }
}

/// The Redis a shared deployment runs with.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub url: String,
    /// Every key and channel starts with it (deployments or tests sharing one Redis).
    pub prefix: String,
    /// How long an in-flight place outlives the replica that stopped renewing it.
    pub lease_ttl: Duration,
}

impl Stores {
    /// Open the store at `store`, with Redis when given: the limiter and change
    /// notifications shared by replicas. Without Redis, limits are this replica's.
    pub fn connect(store: &StoreUrl, redis: Option<&RedisConfig>) -> Result<Stores, StoreError> {
        let shared = redis
            .map(|r| Ok::<_, StoreError>(Arc::new(self::redis::Redis::new(&r.url, &r.prefix)?)))
            .transpose()?;
        let notifier: Arc<dyn changes::Notifier> = match &shared {
            Some(r) => Arc::new(self::redis::RedisNotifier::new(Arc::clone(r))),
            None => Arc::new(changes::Alone),
        };
        let mut stores = match store {
            StoreUrl::Sled(path) => Stores::open(path)?,
            StoreUrl::Postgres(url) => {
                let pg = postgres::Pg::connect(url)?;
                pg.migrate()?;
                let config = cache::CacheConfig::default();
                let tenants = cache::CachedTenants::new(
                    Arc::new(postgres::PgTenants::new(pg.clone())),
                    config,
                    Arc::clone(&notifier),
                );
                let policies = cache::CachedPolicies::new(
                    Arc::new(postgres::PgPolicies::new(pg.clone())),
                    config,
                    Arc::clone(&notifier),
                );
                let (on_key, on_policy) = (tenants.on_change(), policies.on_change());
                notifier.subscribe(Box::new(move |c| {
                    on_key(c);
                    on_policy(c);
                }));
                Stores {
                    tenants: Arc::new(tenants),
                    policies: Arc::new(policies),
                    history: Arc::new(postgres::PgHistory::new(pg.clone())),
                    limiter: Arc::new(LocalLimiter::default()),
                    responses: Arc::new(postgres::PgResponses::new(pg)),
                }
            }
        };
        if let (Some(config), Some(r)) = (redis, shared) {
            stores.limiter = self::redis::RedisLimiter::start(r, config.lease_ttl)?;
        }
        Ok(stores)
    }

    /// Open the store at `path`: the embedded sled database (created and migrated as needed),
    /// with this process's own limiter.
    pub fn open(path: &Path) -> Result<Stores, StoreError> {
        self::sled::open(path)
    }

    /// A store that lives as long as the process (tests and throwaway runs).
    pub fn temporary() -> Result<Stores, StoreError> {
        self::sled::temporary()
    }
}
