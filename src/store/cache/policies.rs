//! A [`PolicyStore`] with each route's policy cached: the planner reads it for every
//! request. Writes go to the store, then drop the local copy and announce the change.

use std::sync::Arc;

use specgate_policies::{RoutePolicy, WorkloadClass};

use super::{transient, CacheConfig, TtlCache};
use crate::store::changes::{Change, Notifier};
use crate::store::policies::{PolicyStoreError, PolicyVersion, StoredPolicy};
use crate::store::PolicyStore;

type Route = (String, String);

pub struct CachedPolicies {
    inner: Arc<dyn PolicyStore>,
    current: Arc<TtlCache<Route, Option<StoredPolicy>>>,
    notifier: Arc<dyn Notifier>,
}

fn outage(e: &PolicyStoreError) -> bool {
    matches!(e, PolicyStoreError::Store(e) if transient(e))
}

fn route(tenant: &str, class: WorkloadClass) -> Route {
    (tenant.to_string(), class.name().to_string())
}

impl CachedPolicies {
    pub fn new(
        inner: Arc<dyn PolicyStore>,
        config: CacheConfig,
        notifier: Arc<dyn Notifier>,
    ) -> Self {
        Self {
            inner,
            current: Arc::new(TtlCache::new("policies", config)),
            notifier,
        }
    }

    /// Drop what `change` makes stale.
    pub fn on_change(&self) -> impl Fn(&Change) + Send + Sync + 'static {
        let current = Arc::clone(&self.current);
        move |change| match change {
            Change::Policy { tenant, class } => {
                current.invalidate(&(tenant.clone(), class.clone()))
            }
            Change::All => current.clear(),
            Change::Key { .. } | Change::Tenant { .. } => {}
        }
    }

    fn changed(&self, tenant: &str, class: WorkloadClass) {
        self.current.invalidate(&route(tenant, class));
        self.notifier.publish(&Change::Policy {
            tenant: tenant.to_string(),
            class: class.name().to_string(),
        });
    }
}

impl PolicyStore for CachedPolicies {
    fn get(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Option<StoredPolicy>, PolicyStoreError> {
        self.current.get(
            &route(tenant, class),
            || self.inner.get(tenant, class),
            outage,
        )
    }

    fn put(
        &self,
        tenant: &str,
        class: WorkloadClass,
        policy: RoutePolicy,
        by: &str,
    ) -> Result<StoredPolicy, PolicyStoreError> {
        let stored = self.inner.put(tenant, class, policy, by)?;
        self.changed(tenant, class);
        Ok(stored)
    }

    fn delete(
        &self,
        tenant: &str,
        class: WorkloadClass,
        by: &str,
    ) -> Result<bool, PolicyStoreError> {
        let removed = self.inner.delete(tenant, class, by)?;
        self.changed(tenant, class);
        Ok(removed)
    }

    fn history(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Vec<PolicyVersion>, PolicyStoreError> {
        self.inner.history(tenant, class)
    }

    fn all(&self) -> Result<Vec<StoredPolicy>, PolicyStoreError> {
        self.inner.all()
    }

    fn routes(&self) -> Result<Vec<(String, WorkloadClass)>, PolicyStoreError> {
        self.inner.routes()
    }

    fn import(
        &self,
        tenant: &str,
        class: WorkloadClass,
        current: Option<&StoredPolicy>,
        history: &[PolicyVersion],
    ) -> Result<(), PolicyStoreError> {
        self.inner.import(tenant, class, current, history)?;
        self.changed(tenant, class);
        Ok(())
    }
}
