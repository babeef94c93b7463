//! `specgate store copy`: move a deployment's state from one store to another (sled to
//! PostgreSQL when it grows past one replica, or back): tenants with their keys' hashes and
//! limits, every route's policy with its whole history, and the request history. The target
//! must be empty; afterwards both are read back and compared.

use super::history::{FlushId, HistoryKey, HistoryRecord};
use super::policies::PolicyStoreError;
use super::tenants::TenantError;
use super::{StoreError, Stores};

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Tenants(#[from] TenantError),
    #[error(transparent)]
    Policies(#[from] PolicyStoreError),
    #[error("the target store is not empty ({0}); copy into a new store")]
    NotEmpty(&'static str),
    #[error("read back, the copy differs from the source: {0}")]
    Differs(&'static str),
}

/// What was copied.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub tenants: usize,
    pub keys: usize,
    pub routes: usize,
    pub policy_versions: usize,
    pub history_buckets: usize,
}

/// History goes over in batches of this many buckets (one transaction each).
const BATCH: usize = 1000;

fn all_history(s: &Stores) -> Result<Vec<(HistoryKey, HistoryRecord)>, StoreError> {
    let mut rows = s.history.read(None, 0, u64::MAX)?;
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(rows)
}

/// Copy everything in `from` into the empty `to`, then check both read back the same.
pub fn copy(from: &Stores, to: &Stores) -> Result<CopyReport, CopyError> {
    if !to.tenants.export()?.is_empty() {
        return Err(CopyError::NotEmpty("it has tenants"));
    }
    if !to.policies.routes()?.is_empty() {
        return Err(CopyError::NotEmpty("it has policies"));
    }
    if !to.history.read(None, 0, u64::MAX)?.is_empty() {
        return Err(CopyError::NotEmpty("it has history"));
    }
    let mut report = CopyReport::default();
    let tenants = from.tenants.export()?;
    for (tenant, keys) in &tenants {
        to.tenants.import(tenant, keys)?;
        report.tenants += 1;
        report.keys += keys.len();
    }
    for (tenant, class) in from.policies.routes()? {
        let current = from.policies.get(&tenant, class)?;
        let history = from.policies.history(&tenant, class)?;
        to.policies
            .import(&tenant, class, current.as_ref(), &history)?;
        report.routes += 1;
        report.policy_versions += history.len();
    }
    let history = all_history(from)?;
    for batch in history.chunks(BATCH) {
        to.history.add(FlushId::new(), batch)?;
    }
    report.history_buckets = history.len();
    verify(from, to)?;
    Ok(report)
}

/// Both stores hold the same tenants, keys, policies with histories, and history.
pub fn verify(a: &Stores, b: &Stores) -> Result<(), CopyError> {
    if a.tenants.export()? != b.tenants.export()? {
        return Err(CopyError::Differs("tenants or keys"));
    }
    let routes = a.policies.routes()?;
    if routes != b.policies.routes()? {
        return Err(CopyError::Differs("the routes with policies"));
    }
    for (tenant, class) in routes {
        if a.policies.get(&tenant, class)? != b.policies.get(&tenant, class)?
            || a.policies.history(&tenant, class)? != b.policies.history(&tenant, class)?
        {
            return Err(CopyError::Differs("a route's policy or its history"));
        }
    }
    if all_history(a)? != all_history(b)? {
        return Err(CopyError::Differs("the request history"));
    }
    Ok(())
}
