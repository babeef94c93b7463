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
//! call on a blocking thread (`gateway/http/store_calls.rs`). One direct call is left: the
//! planner actor reads a route's policy for each request (sled answers in microseconds; a
//! remote store should serve it from a cache it keeps fresh).
//!
//! Adding a store: implement the traits, and open it in [`Stores::open`].

#[cfg(test)]
pub(crate) mod contract;
pub mod history;
pub mod limiter;
pub mod limits;
pub mod policies;
pub mod sled;
pub mod tenants;

use std::path::Path;
use std::sync::Arc;

pub use history::HistoryStore;
pub use limiter::{Limiter, LocalLimiter};
pub use policies::PolicyStore;
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
}

impl Stores {
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
