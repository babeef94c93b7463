//! Numbered store migrations and the runners that record the schema version: sled's here,
//! PostgreSQL's SQL files and runner in [`postgres`].
//!
//! The embedded store is one sled database. Its `meta` tree holds `schema_version` (a big-endian u32).
//! At start-up [`migrate`] applies every migration newer than the store's version, in order,
//! each in one transaction together with the version bump, so a crash leaves the store at
//! one version or the next, never between. A store written by a newer specgate is refused.
//!
//! The trees, by the version that introduced them:
//! - 1 (`m0001_init`): `tenants` (name → JSON {name, created}), `api_keys` (key id → JSON
//!   {id, tenant, sha256, created, revoked}). Stores from before versioning have exactly
//!   this layout and no version: they are taken as version 0 and gain version 1.
//! - 2 (`m0002_keys_by_tenant`): `tenant_keys` (tenant ␀ key id → empty), an index that lets
//!   a tenant's keys be listed and revoked without scanning every key; built from
//!   `api_keys`. `history` (per route, strategy, k and time bucket), `policies` (tenant ␀
//!   class → current policy) and `policy_history` (tenant ␀ class ␀ version → change) start
//!   empty at this version.

pub mod postgres;

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

/// The version this build writes.
pub const SCHEMA_VERSION: u32 = 2;

const META: &str = "meta";
const VERSION_KEY: &[u8] = b"schema_version";

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("store: {0}")]
    Store(#[from] sled::Error),
    #[error(
        "the store has schema version {found}, newer than this build's {supported}: \
         run a newer specgate, or point --db at another store"
    )]
    NewerStore { found: u32, supported: u32 },
    #[error("migration {version} ({name}) failed: {why}")]
    Failed {
        version: u32,
        name: &'static str,
        why: String,
    },
}

/// One numbered migration.
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    apply: fn(&sled::Db) -> Result<(), MigrationError>,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "m0001_init",
        apply: m0001_init,
    },
    Migration {
        version: 2,
        name: "m0002_keys_by_tenant",
        apply: m0002_keys_by_tenant,
    },
];

/// The store's schema version; 0 for a new or pre-versioning store.
pub fn schema_version(db: &sled::Db) -> Result<u32, MigrationError> {
    let meta = db.open_tree(META)?;
    Ok(meta
        .get(VERSION_KEY)?
        .and_then(|v| <[u8; 4]>::try_from(v.as_ref()).ok())
        .map_or(0, u32::from_be_bytes))
}

/// Bring the store to [`SCHEMA_VERSION`]; returns the versions applied.
pub fn migrate(db: &sled::Db) -> Result<Vec<u32>, MigrationError> {
    let found = schema_version(db)?;
    if found > SCHEMA_VERSION {
        return Err(MigrationError::NewerStore {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        (m.apply)(db)?;
        applied.push(m.version);
    }
    db.flush()?;
    Ok(applied)
}

fn failed(version: u32, name: &'static str) -> impl Fn(TransactionError<String>) -> MigrationError {
    move |e| MigrationError::Failed {
        version,
        name,
        why: match e {
            TransactionError::Abort(why) => why,
            TransactionError::Storage(e) => e.to_string(),
        },
    }
}

/// Version 1: the tenant and key trees (created on open); only the version is written.
fn m0001_init(db: &sled::Db) -> Result<(), MigrationError> {
    let meta = db.open_tree(META)?;
    db.open_tree("tenants")?;
    db.open_tree("api_keys")?;
    meta.transaction(|m| {
        m.insert(VERSION_KEY, &1u32.to_be_bytes())?;
        Ok::<_, ConflictableTransactionError<String>>(())
    })
    .map_err(failed(1, "m0001_init"))
}

/// Version 2: index every key by its tenant.
fn m0002_keys_by_tenant(db: &sled::Db) -> Result<(), MigrationError> {
    let meta = db.open_tree(META)?;
    let keys = db.open_tree("api_keys")?;
    let index = db.open_tree("tenant_keys")?;
    db.open_tree("history")?;
    db.open_tree("policies")?;
    db.open_tree("policy_history")?;
    let mut entries = Vec::new();
    for item in keys.iter() {
        let (id, record) = item?;
        let v: serde_json::Value =
            serde_json::from_slice(&record).map_err(|e| MigrationError::Failed {
                version: 2,
                name: "m0002_keys_by_tenant",
                why: format!("key {:?}: {e}", String::from_utf8_lossy(&id)),
            })?;
        let tenant = v["tenant"].as_str().unwrap_or_default().to_string();
        entries.push(tenant_key(&tenant, &String::from_utf8_lossy(&id)));
    }
    (&meta, &index)
        .transaction(|(m, ix)| {
            for e in &entries {
                ix.insert(e.as_slice(), &[] as &[u8])?;
            }
            m.insert(VERSION_KEY, &2u32.to_be_bytes())?;
            Ok::<_, ConflictableTransactionError<String>>(())
        })
        .map_err(failed(2, "m0002_keys_by_tenant"))
}

/// The `tenant_keys` index key: tenant, a NUL, the key id.
pub fn tenant_key(tenant: &str, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(tenant.len() + 1 + id.len());
    k.extend_from_slice(tenant.as_bytes());
    k.push(0);
    k.extend_from_slice(id.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_gets_every_migration_once() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        assert_eq!(schema_version(&db).unwrap(), 0);
        assert_eq!(migrate(&db).unwrap(), vec![1, 2]);
        assert_eq!(schema_version(&db).unwrap(), SCHEMA_VERSION);
        assert_eq!(
            migrate(&db).unwrap(),
            Vec::<u32>::new(),
            "nothing left to apply"
        );
    }

    #[test]
    fn a_store_from_a_newer_build_is_refused() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        db.open_tree(META)
            .unwrap()
            .insert(VERSION_KEY, &(SCHEMA_VERSION + 1).to_be_bytes())
            .unwrap();
        let err = migrate(&db).unwrap_err();
        assert!(matches!(
            err,
            MigrationError::NewerStore {
                found: 3,
                supported: 2
            }
        ));
        assert!(err.to_string().contains("newer"), "{err}");
    }
}
