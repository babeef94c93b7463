//! Tenants and their keys in sled: `tenants` (name → record), `api_keys` (key id → record,
//! the secret's hash only) and `tenant_keys` (tenant ␀ key id, the index revocation checks).
//! Every write is flushed before the call returns.

use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use specgate_migrations::tenant_key;

use crate::clock::unix_now;
use crate::store::limits::LimitOverrides;
use crate::store::tenants::{
    new_key, new_tenant, IssuedKey, KeyInfo, KeyRecord, TenantError, TenantInfo, TenantRecord,
    TenantStore,
};
use crate::store::StoreError;

#[derive(Clone)]
pub struct SledTenants {
    db: sled::Db,
    tenants: sled::Tree,
    keys: sled::Tree,
    by_tenant: sled::Tree, // tenant ␀ key id → (), schema version 2
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, TenantError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()).into())
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, TenantError> {
    serde_json::to_vec(v).map_err(|e| StoreError::Corrupt(e.to_string()).into())
}

impl From<sled::Error> for TenantError {
    fn from(e: sled::Error) -> Self {
        TenantError::Store(e.into())
    }
}

impl SledTenants {
    pub(super) fn open(db: &sled::Db) -> Result<Self, TenantError> {
        Ok(Self {
            db: db.clone(),
            tenants: db.open_tree("tenants")?,
            keys: db.open_tree("api_keys")?,
            by_tenant: db.open_tree("tenant_keys")?,
        })
    }

    fn issue(&self, tenant: &str) -> Result<IssuedKey, TenantError> {
        let (record, issued) = new_key(tenant);
        let encoded = encode(&record)?;
        let index = tenant_key(tenant, &record.id);
        (&self.keys, &self.by_tenant)
            .transaction(|(keys, by_tenant)| {
                keys.insert(record.id.as_bytes(), encoded.as_slice())?;
                by_tenant.insert(index.as_slice(), &[] as &[u8])?;
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => TenantError::from(e),
                TransactionError::Abort(()) => StoreError::Corrupt("aborted".into()).into(),
            })?;
        self.db.flush()?;
        Ok(issued)
    }

    fn record(&self, name: &str) -> Result<TenantRecord, TenantError> {
        let bytes = self
            .tenants
            .get(name)?
            .ok_or_else(|| TenantError::NoTenant(name.to_string()))?;
        decode(&bytes)
    }
}

impl TenantStore for SledTenants {
    /// Create a tenant with its first key.
    fn create(&self, name: &str) -> Result<IssuedKey, TenantError> {
        let record = encode(&new_tenant(name)?)?;
        self.tenants
            .compare_and_swap(name, None as Option<&[u8]>, Some(record))?
            .map_err(|_| TenantError::Exists(name.to_string()))?;
        self.issue(name)
    }

    fn exists(&self, name: &str) -> Result<bool, TenantError> {
        Ok(self.tenants.contains_key(name)?)
    }

    /// The tenant's overrides of the configured limits.
    fn limits(&self, name: &str) -> Result<LimitOverrides, TenantError> {
        Ok(self.record(name)?.limits)
    }

    /// Replace the tenant's overrides; flushed before it returns, applied from the next
    /// request on.
    fn set_limits(&self, name: &str, limits: LimitOverrides) -> Result<(), TenantError> {
        // sled retries the update until no concurrent edit intervenes: a PUT replaces the
        // whole set, so applying it on top of another edit is the serial order.
        let mut failure = None;
        let old = self.tenants.fetch_and_update(name, |old| {
            failure = None;
            let old = old?;
            match decode::<TenantRecord>(old).and_then(|mut r| {
                r.limits = limits.clone();
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
    fn add_key(&self, name: &str) -> Result<IssuedKey, TenantError> {
        if self.tenants.get(name)?.is_none() {
            return Err(TenantError::NoTenant(name.to_string()));
        }
        self.issue(name)
    }

    fn key(&self, id: &str) -> Result<Option<KeyRecord>, TenantError> {
        self.keys
            .get(id.as_bytes())?
            .map(|bytes| decode(&bytes))
            .transpose()
    }

    /// Revoke a key; it fails from the next request on.
    fn revoke(&self, tenant: &str, id: &str) -> Result<(), TenantError> {
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

    fn list(&self) -> Result<Vec<TenantInfo>, TenantError> {
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

    fn export(&self) -> Result<Vec<(TenantRecord, Vec<KeyRecord>)>, TenantError> {
        let mut out = Vec::new();
        for item in self.tenants.iter() {
            let (_, v) = item?;
            let t: TenantRecord = decode(&v)?;
            let mut keys = Vec::new();
            for entry in self.by_tenant.scan_prefix(tenant_key(&t.name, "")) {
                let (index, _) = entry?;
                let id = String::from_utf8_lossy(&index[t.name.len() + 1..]).into_owned();
                keys.extend(self.key(&id)?);
            }
            out.push((t, keys));
        }
        Ok(out)
    }

    fn import(&self, tenant: &TenantRecord, keys: &[KeyRecord]) -> Result<(), TenantError> {
        self.tenants
            .compare_and_swap(&tenant.name, None as Option<&[u8]>, Some(encode(tenant)?))?
            .map_err(|_| TenantError::Exists(tenant.name.clone()))?;
        for k in keys {
            self.keys.insert(k.id.as_bytes(), encode(k)?)?;
            self.by_tenant
                .insert(tenant_key(&tenant.name, &k.id), &[] as &[u8])?;
        }
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_hash_of_a_secret_is_stored() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        specgate_migrations::migrate(&db).unwrap();
        let s = SledTenants::open(&db).unwrap();
        let a = s.create("acme").unwrap();
        let stored = s.keys.get(a.key_id.as_bytes()).unwrap().unwrap();
        let secret = a.api_key.rsplit('-').next().unwrap();
        assert!(!String::from_utf8_lossy(&stored).contains(secret));
    }
}
