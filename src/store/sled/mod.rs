//! The embedded store: one sled database file holds tenants and keys, policies and their
//! versions, and history; its schema is versioned by `specgate-migrations`. No sled type
//! leaves this folder.

mod history;
mod policies;
mod responses;
mod tenants;

use std::path::Path;
use std::sync::Arc;

pub use history::SledHistory;
pub use policies::SledPolicies;
pub use responses::SledResponses;
pub use tenants::SledTenants;

use super::{LocalLimiter, StoreError, Stores};

/// An I/O failure may pass (a full disk, a slow device): retry later. Anything else sled
/// reports is about the data or sled itself, and retrying would not help.
impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        match e {
            sled::Error::Io(_) => StoreError::Unavailable(e.to_string()),
            _ => StoreError::Corrupt(e.to_string()),
        }
    }
}

/// Open (creating if needed) and migrate the database at `path`.
pub fn open(path: &Path) -> Result<Stores, StoreError> {
    let db = sled::open(path).map_err(|e| StoreError::Open(format!("{}: {e}", path.display())))?;
    open_db(&db)
}

/// A store that lives only as long as the process (tests).
pub fn temporary() -> Result<Stores, StoreError> {
    let db = sled::Config::new().temporary(true).open()?;
    open_db(&db)
}

fn open_db(db: &sled::Db) -> Result<Stores, StoreError> {
    specgate_migrations::migrate(db).map_err(|e| StoreError::Schema(e.to_string()))?;
    Ok(Stores {
        tenants: Arc::new(SledTenants::open(db).map_err(|e| StoreError::Open(e.to_string()))?),
        policies: Arc::new(SledPolicies::open(db).map_err(|e| StoreError::Open(e.to_string()))?),
        history: Arc::new(SledHistory::open(db)?),
        responses: Arc::new(SledResponses::open(db)?),
        // One process holds a sled file, so its counters are this process's.
        limiter: Arc::new(LocalLimiter::default()),
    })
}

#[cfg(test)]
mod tests {
    // The suite every store passes, on a fresh temporary sled store per test.
    crate::store::contract::store_contract_tests!(Some(
        crate::store::test_services::TestStores::new(super::temporary().unwrap())
    ));
}
