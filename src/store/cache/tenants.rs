//! A [`TenantStore`] with the hot reads cached: key records (authentication) and limits.
//! Writes go to the store, then drop the local copy and announce the change.

use std::sync::Arc;

use super::{transient, CacheConfig, TtlCache};
use crate::store::changes::{Change, Notifier};
use crate::store::limits::LimitOverrides;
use crate::store::tenants::{IssuedKey, KeyRecord, TenantError, TenantInfo, TenantRecord};
use crate::store::TenantStore;

pub struct CachedTenants {
    inner: Arc<dyn TenantStore>,
    keys: Arc<TtlCache<String, Option<KeyRecord>>>,
    limits: Arc<TtlCache<String, LimitOverrides>>,
    notifier: Arc<dyn Notifier>,
}

fn outage(e: &TenantError) -> bool {
    matches!(e, TenantError::Store(e) if transient(e))
}

impl CachedTenants {
    pub fn new(
        inner: Arc<dyn TenantStore>,
        config: CacheConfig,
        notifier: Arc<dyn Notifier>,
    ) -> Self {
        Self {
            inner,
            keys: Arc::new(TtlCache::new("keys", config)),
            limits: Arc::new(TtlCache::new("limits", config)),
            notifier,
        }
    }

    /// Drop what `change` makes stale.
    pub fn on_change(&self) -> impl Fn(&Change) + Send + Sync + 'static {
        let (keys, limits) = (Arc::clone(&self.keys), Arc::clone(&self.limits));
        move |change| match change {
            Change::Key { id } => keys.invalidate(id),
            Change::Tenant { name } => limits.invalidate(name),
            Change::Policy { .. } => {}
            Change::All => {
                keys.clear();
                limits.clear();
            }
        }
    }
}

impl TenantStore for CachedTenants {
    fn create(&self, name: &str) -> Result<IssuedKey, TenantError> {
        self.inner.create(name)
    }

    fn exists(&self, name: &str) -> Result<bool, TenantError> {
        self.inner.exists(name)
    }

    fn limits(&self, name: &str) -> Result<LimitOverrides, TenantError> {
        self.limits
            .get(&name.to_string(), || self.inner.limits(name), outage)
    }

    fn set_limits(&self, name: &str, limits: LimitOverrides) -> Result<(), TenantError> {
        self.inner.set_limits(name, limits)?;
        self.limits.invalidate(&name.to_string());
        self.notifier.publish(&Change::Tenant {
            name: name.to_string(),
        });
        Ok(())
    }

    fn add_key(&self, name: &str) -> Result<IssuedKey, TenantError> {
        self.inner.add_key(name)
    }

    fn key(&self, id: &str) -> Result<Option<KeyRecord>, TenantError> {
        self.keys
            .get(&id.to_string(), || self.inner.key(id), outage)
    }

    fn revoke(&self, tenant: &str, id: &str) -> Result<(), TenantError> {
        self.inner.revoke(tenant, id)?;
        self.keys.invalidate(&id.to_string());
        self.notifier.publish(&Change::Key { id: id.to_string() });
        Ok(())
    }

    fn list(&self) -> Result<Vec<TenantInfo>, TenantError> {
        self.inner.list()
    }

    fn export(&self) -> Result<Vec<(TenantRecord, Vec<KeyRecord>)>, TenantError> {
        self.inner.export()
    }

    fn import(&self, tenant: &TenantRecord, keys: &[KeyRecord]) -> Result<(), TenantError> {
        self.inner.import(tenant, keys)?;
        self.notifier.publish(&Change::All);
        Ok(())
    }
}
