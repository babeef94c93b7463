//! Routing policies in sled: the current policy per (tenant, class) in `policies`, and every
//! change, versioned with who and when, in `policy_history`. A write is flushed before it
//! returns: an acknowledged edit survives a crash.

use std::sync::{Arc, Mutex};

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use specgate_policies::{RoutePolicy, WorkloadClass};

use crate::clock::unix_now;
use crate::store::policies::{PolicyStore, PolicyStoreError, PolicyVersion, StoredPolicy};
use crate::store::StoreError;

#[derive(Clone)]
pub struct SledPolicies {
    db: sled::Db,
    current: sled::Tree,
    history: sled::Tree,
    /// Serialises writers: the next version number is read, then written.
    writing: Arc<Mutex<()>>,
}

fn route_key(tenant: &str, class: WorkloadClass) -> Vec<u8> {
    let mut k = tenant.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(class.name().as_bytes());
    k
}

fn version_key(tenant: &str, class: WorkloadClass, version: u32) -> Vec<u8> {
    let mut k = route_key(tenant, class);
    k.push(0);
    k.extend_from_slice(&version.to_be_bytes());
    k
}

fn corrupt(e: impl std::fmt::Display) -> PolicyStoreError {
    StoreError::Corrupt(e.to_string()).into()
}

impl From<sled::Error> for PolicyStoreError {
    fn from(e: sled::Error) -> Self {
        PolicyStoreError::Store(e.into())
    }
}

impl SledPolicies {
    pub(super) fn open(db: &sled::Db) -> Result<Self, PolicyStoreError> {
        Ok(Self {
            db: db.clone(),
            current: db.open_tree("policies")?,
            history: db.open_tree("policy_history")?,
            writing: Arc::new(Mutex::new(())),
        })
    }

    fn next_version(&self, tenant: &str, class: WorkloadClass) -> Result<u32, PolicyStoreError> {
        let mut prefix = route_key(tenant, class);
        prefix.push(0);
        Ok(match self.history.scan_prefix(&prefix).next_back() {
            Some(item) => {
                let (_, v) = item?;
                let last: PolicyVersion = serde_json::from_slice(&v).map_err(corrupt)?;
                last.version + 1
            }
            None => 1,
        })
    }

    /// The current record and the history entry in one transaction, then a flush.
    fn write(
        &self,
        tenant: &str,
        class: WorkloadClass,
        current: Option<Vec<u8>>,
        change: &PolicyVersion,
    ) -> Result<(), PolicyStoreError> {
        let key = route_key(tenant, class);
        let vkey = version_key(tenant, class, change.version);
        let entry = serde_json::to_vec(change).map_err(corrupt)?;
        (&self.current, &self.history)
            .transaction(|(cur, hist)| {
                match &current {
                    Some(v) => cur.insert(key.as_slice(), v.as_slice())?,
                    None => cur.remove(key.as_slice())?,
                };
                hist.insert(vkey.as_slice(), entry.as_slice())?;
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => PolicyStoreError::from(e),
                TransactionError::Abort(()) => corrupt("transaction aborted"),
            })?;
        self.db.flush()?;
        Ok(())
    }
}

impl PolicyStore for SledPolicies {
    fn get(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Option<StoredPolicy>, PolicyStoreError> {
        self.current
            .get(route_key(tenant, class))?
            .map(|b| serde_json::from_slice(&b).map_err(corrupt))
            .transpose()
    }

    /// Validate and store a policy as the route's next version.
    fn put(
        &self,
        tenant: &str,
        class: WorkloadClass,
        policy: RoutePolicy,
        by: &str,
    ) -> Result<StoredPolicy, PolicyStoreError> {
        policy.validate()?;
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let version = self.next_version(tenant, class)?;
        let at = unix_now();
        let stored = StoredPolicy {
            tenant: tenant.to_string(),
            class: class.name().to_string(),
            version,
            policy: policy.clone(),
            updated_by: by.to_string(),
            updated_at: at,
        };
        let change = PolicyVersion {
            version,
            action: "put".into(),
            policy: Some(policy),
            by: by.to_string(),
            at,
        };
        let current = serde_json::to_vec(&stored).map_err(corrupt)?;
        self.write(tenant, class, Some(current), &change)?;
        Ok(stored)
    }

    /// Remove a route's own policy (it falls back); false when there was none.
    fn delete(
        &self,
        tenant: &str,
        class: WorkloadClass,
        by: &str,
    ) -> Result<bool, PolicyStoreError> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        if self.get(tenant, class)?.is_none() {
            return Ok(false);
        }
        let change = PolicyVersion {
            version: self.next_version(tenant, class)?,
            action: "delete".into(),
            policy: None,
            by: by.to_string(),
            at: unix_now(),
        };
        self.write(tenant, class, None, &change)?;
        Ok(true)
    }

    fn history(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Vec<PolicyVersion>, PolicyStoreError> {
        let mut prefix = route_key(tenant, class);
        prefix.push(0);
        self.history
            .scan_prefix(&prefix)
            .map(|item| {
                let (_, v) = item?;
                serde_json::from_slice(&v).map_err(corrupt)
            })
            .collect()
    }

    /// Every stored current policy (export).
    fn all(&self) -> Result<Vec<StoredPolicy>, PolicyStoreError> {
        self.current
            .iter()
            .map(|item| {
                let (_, v) = item?;
                serde_json::from_slice(&v).map_err(corrupt)
            })
            .collect()
    }

    fn routes(&self) -> Result<Vec<(String, WorkloadClass)>, PolicyStoreError> {
        let mut out: Vec<(String, WorkloadClass)> = Vec::new();
        for item in self.history.iter() {
            let (k, _) = item?;
            // tenant ␀ class ␀ version: the version's bytes may hold NULs, the names never.
            let mut parts = k.splitn(3, |&b| b == 0);
            let (Some(tenant), Some(class)) = (parts.next(), parts.next()) else {
                return Err(corrupt("a policy history key without its route"));
            };
            let tenant = String::from_utf8_lossy(tenant).into_owned();
            let class: WorkloadClass = String::from_utf8_lossy(class).parse().map_err(corrupt)?;
            if out.last() != Some(&(tenant.clone(), class)) {
                out.push((tenant, class));
            }
        }
        Ok(out)
    }

    fn import(
        &self,
        tenant: &str,
        class: WorkloadClass,
        current: Option<&StoredPolicy>,
        history: &[PolicyVersion],
    ) -> Result<(), PolicyStoreError> {
        let _serial = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        if self.next_version(tenant, class)? != 1 {
            return Err(PolicyStoreError::RouteExists {
                tenant: tenant.to_string(),
                class: class.name().to_string(),
            });
        }
        let current = current
            .map(serde_json::to_vec)
            .transpose()
            .map_err(corrupt)?;
        let mut entries = Vec::new();
        for change in history {
            let key = version_key(tenant, class, change.version);
            entries.push((key, serde_json::to_vec(change).map_err(corrupt)?));
        }
        let key = route_key(tenant, class);
        (&self.current, &self.history)
            .transaction(|(cur, hist)| {
                if let Some(v) = &current {
                    cur.insert(key.as_slice(), v.as_slice())?;
                }
                for (k, v) in &entries {
                    hist.insert(k.as_slice(), v.as_slice())?;
                }
                Ok::<_, ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                TransactionError::Storage(e) => PolicyStoreError::from(e),
                TransactionError::Abort(()) => corrupt("transaction aborted"),
            })?;
        self.db.flush()?;
        Ok(())
    }
}
