//! Tenants and their API keys: the records, the key format, and the [`TenantStore`] seam.
//! A key is `sg-<id>-<secret>`: the id finds the record, only the secret's SHA-256 is
//! stored, and it is compared in constant time.

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::StoreError;
use crate::clock::unix_now;
use crate::store::limits::LimitOverrides;

#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error(transparent)]
    Store(#[from] StoreError),
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

fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Tenants, their keys and their limit overrides. Every write is durable when the call
/// returns (an acknowledged key or revocation survives a crash); a store that cannot be
/// reached answers [`StoreError::Unavailable`]. Calls may block on a round trip.
pub trait TenantStore: Send + Sync {
    /// Create a tenant with its first key ([`TenantError::Exists`] if the name is taken).
    fn create(&self, name: &str) -> Result<IssuedKey, TenantError>;
    fn exists(&self, name: &str) -> Result<bool, TenantError>;
    /// The tenant's overrides of the configured limits.
    fn limits(&self, name: &str) -> Result<LimitOverrides, TenantError>;
    /// Replace the tenant's overrides, applied from its next request on.
    fn set_limits(&self, name: &str, limits: LimitOverrides) -> Result<(), TenantError>;
    /// Another key for an existing tenant.
    fn add_key(&self, name: &str) -> Result<IssuedKey, TenantError>;
    /// The stored record of key `id` (its hash, never its secret).
    fn key(&self, id: &str) -> Result<Option<KeyRecord>, TenantError>;
    /// The tenant a presented key belongs to, if it is a live key.
    fn authenticate(&self, presented: &str) -> Result<Option<String>, TenantError> {
        let Some((id, secret)) = split_key(presented) else {
            return Ok(None);
        };
        Ok(self.key(id)?.and_then(|record| key_grants(&record, secret)))
    }
    /// Revoke a key; it fails from the next request on.
    fn revoke(&self, tenant: &str, id: &str) -> Result<(), TenantError>;
    /// Every tenant with its keys (ids and dates, never secrets or hashes).
    fn list(&self) -> Result<Vec<TenantInfo>, TenantError>;
    /// Every tenant with its key records as stored (`store copy`).
    fn export(&self) -> Result<Vec<(TenantRecord, Vec<KeyRecord>)>, TenantError>;
    /// Store a tenant and its key records exactly as another store exported them
    /// ([`TenantError::Exists`] if the name is taken).
    fn import(&self, tenant: &TenantRecord, keys: &[KeyRecord]) -> Result<(), TenantError>;
}

/// A new key's parts: the record to store (only the secret's hash) and the key to show once.
pub fn new_key(tenant: &str) -> (KeyRecord, IssuedKey) {
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
    let issued = IssuedKey {
        tenant: tenant.to_string(),
        api_key: format!("sg-{id}-{secret}"),
        key_id: id,
    };
    (record, issued)
}

/// A presented key's id and secret (None: not of our format).
pub fn split_key(presented: &str) -> Option<(&str, &str)> {
    presented
        .strip_prefix("sg-")
        .and_then(|rest| rest.split_once('-'))
}

/// The tenant `record` grants to `secret`, if the secret matches and the key is live
/// (compared in constant time).
pub fn key_grants(record: &KeyRecord, secret: &str) -> Option<String> {
    let hash = sha256_hex(secret);
    let matches: bool = hash.as_bytes().ct_eq(record.sha256.as_bytes()).into();
    (matches && record.revoked.is_none()).then(|| record.tenant.clone())
}

/// A fresh tenant record.
pub fn new_tenant(name: &str) -> Result<TenantRecord, TenantError> {
    if !valid_name(name) {
        return Err(TenantError::BadName(name.to_string()));
    }
    Ok(TenantRecord {
        name: name.to_string(),
        created: unix_now(),
        limits: LimitOverrides::default(),
    })
}
