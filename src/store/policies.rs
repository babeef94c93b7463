//! Routing policies: the current policy per route (tenant, class) and every change,
//! versioned with who and when, behind the [`PolicyStore`] seam. Resolution: the tenant's own
//! policy, else the `*` (every tenant) policy, else the shipped default of the class.

use serde::{Deserialize, Serialize};
use specgate_policies::{default_policy, PolicyError, RoutePolicy, WorkloadClass, ANY_TENANT};

use super::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum PolicyStoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid policy: {0}")]
    Invalid(#[from] PolicyError),
    #[error("route {tenant}/{class} already has a policy history here")]
    RouteExists { tenant: String, class: String },
}

/// The current policy of a route with its version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPolicy {
    pub tenant: String,
    pub class: String,
    pub version: u32,
    pub policy: RoutePolicy,
    pub updated_by: String,
    pub updated_at: u64,
}

/// Who wrote the shipped defaults, in the store and its history.
pub const SHIPPED_BY: &str = "specgate (shipped default)";

/// One change in a route's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyVersion {
    pub version: u32,
    /// "put" or "delete".
    pub action: String,
    pub policy: Option<RoutePolicy>,
    pub by: String,
    pub at: u64,
}

/// Where an effective policy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicySource {
    Tenant,
    AllTenants,
    Shipped,
}

/// The routes' policies and their versions. A write is durable when the call returns (an
/// acknowledged edit survives a crash); versions of a route are numbered 1, 2, … with no
/// gap, whichever replica writes them.
pub trait PolicyStore: Send + Sync {
    /// The route's own stored policy.
    fn get(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Option<StoredPolicy>, PolicyStoreError>;

    /// Validate and store a policy as the route's next version.
    fn put(
        &self,
        tenant: &str,
        class: WorkloadClass,
        policy: RoutePolicy,
        by: &str,
    ) -> Result<StoredPolicy, PolicyStoreError>;

    /// Remove a route's own policy (it falls back), as a new version; false when it had none.
    fn delete(
        &self,
        tenant: &str,
        class: WorkloadClass,
        by: &str,
    ) -> Result<bool, PolicyStoreError>;

    /// Every change of a route, oldest first.
    fn history(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Vec<PolicyVersion>, PolicyStoreError>;

    /// Every stored current policy (export).
    fn all(&self) -> Result<Vec<StoredPolicy>, PolicyStoreError>;

    /// Every route with at least one change (`store copy`).
    fn routes(&self) -> Result<Vec<(String, WorkloadClass)>, PolicyStoreError>;

    /// Store a route's current policy and its whole history exactly as another store
    /// exported them; refused when the route already has a history here.
    fn import(
        &self,
        tenant: &str,
        class: WorkloadClass,
        current: Option<&StoredPolicy>,
        history: &[PolicyVersion],
    ) -> Result<(), PolicyStoreError>;

    /// The policy a request of (tenant, class) runs under. A store that cannot be read
    /// falls back to the shipped default: planning never fails for the store's sake.
    fn effective(&self, tenant: &str, class: WorkloadClass) -> (RoutePolicy, PolicySource) {
        if let Ok(Some(p)) = self.get(tenant, class) {
            return (p.policy, PolicySource::Tenant);
        }
        if let Ok(Some(p)) = self.get(ANY_TENANT, class) {
            return (p.policy, PolicySource::AllTenants);
        }
        (default_policy(class), PolicySource::Shipped)
    }

    /// Write the shipped defaults as the `*` policies where none is stored yet, and where
    /// the stored one is an earlier release's shipped default that no admin has edited since
    /// (a new version, so the history shows the upgrade). An admin's edit is never replaced.
    fn seed_defaults(&self) -> Result<(), PolicyStoreError> {
        for class in WorkloadClass::ALL {
            let shipped = default_policy(class);
            let stale = match self.get(ANY_TENANT, class)? {
                None => true,
                Some(stored) => stored.updated_by == SHIPPED_BY && stored.policy != shipped,
            };
            if stale {
                self.put(ANY_TENANT, class, shipped, SHIPPED_BY)?;
            }
        }
        Ok(())
    }
}
