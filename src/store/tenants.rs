//! Tenants and their API keys, in sled. A key is `sg-<id>-<secret>`: the id finds the record,
//! only the secret's SHA-256 is stored, and it is compared in constant time. Every write is
//! flushed before the call returns, so an acknowledged key or revocation survives a crash.

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use specgate_migrations::tenant_key;

use crate::clock::unix_now;
use crate::store::limits::LimitOverrides;
use subtle::ConstantTimeEq;

#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("store: {0}")]
    Store(#[from] sled::Error),
    #[error("stored record is corrupt: {0}")]
    Corrupt(String),
    #[error("tenant names are 1–64 characters of a-z, 0-9, '-' and '_'; got {0:?}")]
    BadName(String),
    #[error("tenant {0:?} already exists")]
    Exists(String),
    #[error("no tenant {0:?}")]
    NoTenant(String),
    #[error("tenant {tenant:?} has no key {id:?}")]
    NoKey { tenant: String, id: String },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantRecord {
    pub name: String,
    pub created: u64,
    /// Overrides of the configured request limits (absent in records written before them).
    #[serde(default)]
    pub limits: LimitOverrides,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyRecord {
    pub id: String,
    pub tenant: String,
    pub sha256: String,
    pub created: u64,
    pub revoked: Option<u64>,
}

/// A key as the admin API lists it (never the hash, never the secret).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KeyInfo {
    pub id: String,
    pub created: u64,
    pub revoked: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TenantInfo {
    pub name: String,
    pub created: u64,
    pub limits: LimitOverrides,
    pub keys: Vec<KeyInfo>,
}

/// A freshly issued key: the only time its secret is seen.
#[derive(Debug, Clone, Serialize)]
pub struct IssuedKey {
    pub tenant: String,
    pub key_id: String,
    pub api_key: String,
}

#[derive(Clone)]
pub struct TenantStore {
    db: sled::Db,
    tenants: sled::Tree,
    keys: sled::Tree,
    by_tenant: sled::Tree, // tenant ␀ key id → (), schema version 2
}

fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, TenantError> {
    serde_json::from_slice(bytes).map_err(|e| TenantError::Corrupt(e.to_string()))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, TenantError> {
    serde_json::to_vec(v).map_err(|e| TenantError::Corrupt(e.to_string()))
}

pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl TenantStore {
    pub fn open(db: &sled::Db) -> Result<Self, TenantError> {
        Ok(Self {
            db: db.clone(),
            tenants: db.open_tree("tenants")?,
            keys: db.open_tree("api_keys")?,
            by_tenant: db.open_tree("tenant_keys")?,
        })
    }

    /// Create a tenant with its first key.
    pub fn create(&self, name: &str) -> Result<IssuedKey, TenantError> {
        if !valid_name(name) {
            return Err(TenantError::BadName(name.to_string()));
        }
        let record = encode(&TenantRecord {
            name: name.to_string(),
            created: unix_now(),
            limits: LimitOverrides::default(),
        })?;
        self.tenants
            .compare_and_swap(name, None as Option<&[u8]>, Some(record))?
            .map_err(|_| TenantError::Exists(name.to_string()))?;
        self.issue(name)
    }

    pub fn exists(&self, name: &str) -> Result<bool, TenantError> {
        Ok(self.tenants.contains_key(name)?)
    }

    fn record(&self, name: &str) -> Result<TenantRecord, TenantError> {
        let bytes = self
            .tenants
            .get(name)?
            .ok_or_else(|| TenantError::NoTenant(name.to_string()))?;
        decode(&bytes)
    }

    /// The tenant's overrides of the configured limits.
    pub fn limits(&self, name: &str) -> Result<LimitOverrides, TenantError> {
        Ok(self.record(name)?.limits)
    }

    /// Replace the tenant's overrides; flushed before it returns, applied from the next
    /// request on.
    pub fn set_limits(&self, name: &str, limits: LimitOverrides) -> Result<(), TenantError> {
        // sled retries the update until no concurrent edit intervenes: a PUT replaces the
        // whole set, so applying it on top of another edit is the serial order.
        let mut failure = None;
        let old = self.tenants.fetch_and_update(name, |old| {
            failure = None;
            let old = old?;
            match decode::<TenantRecord>(old).and_then(|mut r| {
                r.limits = limits;
                encode(&r)
            }) {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    failure = Some(e);
                    Some(old.to_vec())
                }
            }
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        if old.is_none() {
            return Err(TenantError::NoTenant(name.to_string()));
        }
        self.db.flush()?;
        Ok(())
    }

    /// Another key for an existing tenant.
    pub fn add_key(&self, name: &str) -> Result<IssuedKey, TenantError> {
        if self.tenants.get(name)?.is_none() {
            return Err(TenantError::NoTenant(name.to_string()));
        }
        self.issue(name)
    }

    fn issue(&self, tenant: &str) -> Result<IssuedKey, TenantError> {
        let mut rng = rand::rng();
        let mut id = [0u8; 8];
        let mut secret = [0u8; 24];
        rng.fill_bytes(&mut id);
        rng.fill_bytes(&mut secret);
        let (id, secret) = (hex::encode(id), hex::encode(secret));
        let record = KeyRecord {
            id: id.clone(),
            tenant: tenant.to_string(),
            sha256: sha256_hex(&secret),
            created: unix_now(),
            revoked: None,
        };
        let encoded = encode(&record)?;
        let index = tenant_key(tenant, &id);
        (&self.keys, &self.by_tenant)
            .transaction(|(keys, by_tenant)| {
                keys.insert(id.as_bytes(), encoded.as_slice())?;
                by_tenant.insert(index.as_slice(), &[] as &[u8])?;
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => TenantError::Store(e),
                TransactionError::Abort(()) => TenantError::Corrupt("aborted".into()),
            })?;
        self.db.flush()?;
        Ok(IssuedKey {
            tenant: tenant.to_string(),
            api_key: format!("sg-{id}-{secret}"),
            key_id: id,
        })
    }

    /// The tenant a presented key belongs to, if it is a live key.
    pub fn authenticate(&self, presented: &str) -> Result<Option<String>, TenantError> {
        let Some((id, secret)) = presented
            .strip_prefix("sg-")
            .and_then(|rest| rest.split_once('-'))
        else {
            return Ok(None);
        };
        let Some(bytes) = self.keys.get(id.as_bytes())? else {
            return Ok(None);
        };
        let record: KeyRecord = decode(&bytes)?;
        let hash = sha256_hex(secret);
        let matches: bool = hash.as_bytes().ct_eq(record.sha256.as_bytes()).into();
        Ok((matches && record.revoked.is_none()).then_some(record.tenant))
    }

    /// Revoke a key; it fails from the next request on.
    pub fn revoke(&self, tenant: &str, id: &str) -> Result<(), TenantError> {
        let missing = || TenantError::NoKey {
            tenant: tenant.to_string(),
            id: id.to_string(),
        };
        let bytes = self.keys.get(id.as_bytes())?.ok_or_else(missing)?;
        if !self.by_tenant.contains_key(tenant_key(tenant, id))? {
            return Err(missing());
        }
        let mut record: KeyRecord = decode(&bytes)?;
        record.revoked.get_or_insert_with(unix_now);
        self.keys.insert(id.as_bytes(), encode(&record)?)?;
        self.db.flush()?;
        Ok(())
    }

    pub fn list(&self) -> Result<Vec<TenantInfo>, TenantError> {
        let mut out = Vec::new();
        for item in self.tenants.iter() {
            let (_, v) = item?;
            let t: TenantRecord = decode(&v)?;
            out.push(TenantInfo {
                name: t.name,
                created: t.created,
                limits: t.limits,
                keys: Vec::new(),
            });
        }
        for item in self.keys.iter() {
            let (_, v) = item?;
            let k: KeyRecord = decode(&v)?;
            if let Some(t) = out.iter_mut().find(|t| t.name == k.tenant) {
                t.keys.push(KeyInfo {
                    id: k.id,
                    created: k.created,
                    revoked: k.revoked,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> TenantStore {
        let db = sled::Config::new().temporary(true).open().unwrap();
        specgate_migrations::migrate(&db).unwrap();
        TenantStore::open(&db).unwrap()
    }

    #[test]
    fn keys_authenticate_until_revoked_and_only_hashes_are_stored() {
        let s = store();
        let a = s.create("acme").unwrap();
        let b = s.add_key("acme").unwrap();
        assert_eq!(s.authenticate(&a.api_key).unwrap().as_deref(), Some("acme"));
        assert_eq!(s.authenticate(&b.api_key).unwrap().as_deref(), Some("acme"));
        let stored = s.keys.get(a.key_id.as_bytes()).unwrap().unwrap();
        let secret = a.api_key.rsplit('-').next().unwrap();
        assert!(!String::from_utf8_lossy(&stored).contains(secret));
        s.revoke("acme", &a.key_id).unwrap();
        assert_eq!(s.authenticate(&a.api_key).unwrap(), None);
        assert_eq!(s.authenticate(&b.api_key).unwrap().as_deref(), Some("acme"));
        let listed = s.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].keys.len(), 2);
    }

    #[test]
    fn bad_keys_names_and_duplicates_are_refused() {
        let s = store();
        let a = s.create("t1").unwrap();
        let forged = format!("{}x", &a.api_key[..a.api_key.len() - 1]);
        for k in ["", "sg-", "nope", "sg-0000-1111", forged.as_str()] {
            assert_eq!(s.authenticate(k).unwrap(), None, "{k:?}");
        }
        assert!(matches!(s.create("t1"), Err(TenantError::Exists(_))));
        assert!(matches!(s.create("Bad Name"), Err(TenantError::BadName(_))));
        assert!(matches!(s.add_key("ghost"), Err(TenantError::NoTenant(_))));
        assert!(matches!(
            s.revoke("other", &a.key_id),
            Err(TenantError::NoKey { .. })
        ));
    }

    #[test]
    fn concurrent_limit_edits_all_succeed_and_one_wins_whole() {
        let s = std::sync::Arc::new(store());
        s.create("busy").unwrap();
        let edits: Vec<_> = (1..=8u64)
            .map(|n| {
                let s = std::sync::Arc::clone(&s);
                std::thread::spawn(move || {
                    let limits = LimitOverrides {
                        max_concurrent_requests: Some(n as u32),
                        tokens_per_minute: Some(100 * n),
                    };
                    (0..20).try_for_each(|_| s.set_limits("busy", limits))
                })
            })
            .collect();
        for e in edits {
            e.join().unwrap().unwrap();
        }
        let l = s.limits("busy").unwrap();
        let n = l.max_concurrent_requests.unwrap() as u64;
        assert_eq!(l.tokens_per_minute, Some(100 * n), "{l:?}");
    }
}
