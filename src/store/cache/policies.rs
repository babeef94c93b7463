//! A [`PolicyStore`] with each route's policy cached: the planner reads it for every
//! request. Writes go to the store, then drop the local copy and announce the change.

use std::sync::Arc;

use specgate_policies::{RoutePolicy, WorkloadClass};

use super::{transient, CacheConfig, TtlCache};
use crate::store::changes::{Change, Notifier};
use crate::store::policies::{PolicyStoreError, PolicyVersion, StoredPolicy};
use crate::store::runtime;
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

    /// Read `key` again off the caller's thread (a failure leaves the stale entry, claimed
    /// again after another TTL).
    fn refresh(&self, key: Route, class: WorkloadClass) {
        let (inner, cache) = (Arc::clone(&self.inner), Arc::clone(&self.current));
        let generation = cache.generation();
        let read = move || {
            if let Ok(fresh) = inner.get(&key.0, class) {
                cache.keep(key, fresh, generation);
            }
        };
        match runtime::runtime() {
            Ok(rt) => drop(rt.spawn_blocking(read)),
            Err(_) => read(),
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
    /// An expired entry answers at once and is refreshed in the background, so the planner
    /// (which reads a route's policy for every request on its own thread) waits for a round
    /// trip only on a route's first request or after a change dropped the entry.
    fn get(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Option<StoredPolicy>, PolicyStoreError> {
        let key = route(tenant, class);
        if let Some(stale) = self.current.claim_stale(&key) {
            self.refresh(key, class);
            return Ok(stale);
        }
        self.current
            .get(&key, || self.inner.get(tenant, class), outage)
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
