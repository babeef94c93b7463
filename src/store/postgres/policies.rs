//! Policies in PostgreSQL: `policies` (the current policy per route) and `policy_history`
//! (every change). Writers of one route take turns on a transaction-scoped advisory lock, so
//! versions stay 1, 2, … without a gap whichever replica writes them.

use deadpool_postgres::GenericClient;
use specgate_policies::{RoutePolicy, WorkloadClass};
use tokio_postgres::Row;

use super::{big, db_error, unbig, Pg};
use crate::clock::unix_now;
use crate::store::policies::{PolicyStore, PolicyStoreError, PolicyVersion, StoredPolicy};
use crate::store::StoreError;

#[derive(Clone)]
pub struct PgPolicies {
    pg: Pg,
}

impl PgPolicies {
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

fn err(e: tokio_postgres::Error) -> PolicyStoreError {
    PolicyStoreError::Store(db_error(e))
}

fn corrupt(e: impl std::fmt::Display) -> PolicyStoreError {
    StoreError::Corrupt(e.to_string()).into()
}

const CURRENT: &str =
    "SELECT tenant, class, version, policy::text, updated_by, updated_at FROM policies";

fn stored(row: &Row) -> Result<StoredPolicy, PolicyStoreError> {
    Ok(StoredPolicy {
        tenant: row.get(0),
        class: row.get(1),
        version: row.get::<_, i32>(2) as u32,
        policy: serde_json::from_str(row.get::<_, &str>(3)).map_err(corrupt)?,
        updated_by: row.get(4),
        updated_at: unbig(row.get(5)),
    })
}

fn version(row: &Row) -> Result<PolicyVersion, PolicyStoreError> {
    Ok(PolicyVersion {
        version: row.get::<_, i32>(0) as u32,
        action: row.get(1),
        policy: row
            .get::<_, Option<&str>>(2)
            .map(serde_json::from_str)
            .transpose()
            .map_err(corrupt)?,
        by: row.get(3),
        at: unbig(row.get(4)),
    })
}

/// Take the route's write lock for the rest of the transaction; returns its next version.
async fn lock_route(
    tx: &impl GenericClient,
    tenant: &str,
    class: &str,
) -> Result<i32, PolicyStoreError> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(1) || $2, 0))",
        &[&tenant, &class],
    )
    .await
    .map_err(err)?;
    let row = tx
        .query_one(
            "SELECT coalesce(max(version), 0) + 1 FROM policy_history WHERE tenant = $1 AND class = $2",
            &[&tenant, &class],
        )
        .await
        .map_err(err)?;
    Ok(row.get(0))
}

async fn set_current(tx: &impl GenericClient, p: &StoredPolicy) -> Result<(), PolicyStoreError> {
    let policy = serde_json::to_string(&p.policy).map_err(corrupt)?;
    tx.execute(
        "INSERT INTO policies (tenant, class, version, policy, updated_by, updated_at)
         VALUES ($1, $2, $3, $4::text::jsonb, $5, $6)
         ON CONFLICT (tenant, class) DO UPDATE SET version = excluded.version,
             policy = excluded.policy, updated_by = excluded.updated_by,
             updated_at = excluded.updated_at",
        &[
            &p.tenant,
            &p.class,
            &(p.version as i32),
            &policy,
            &p.updated_by,
            &big(p.updated_at),
        ],
    )
    .await
    .map_err(err)?;
    Ok(())
}

async fn add_version(
    tx: &impl GenericClient,
    tenant: &str,
    class: &str,
    v: &PolicyVersion,
) -> Result<(), PolicyStoreError> {
    let policy = v
        .policy
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(corrupt)?;
    tx.execute(
        "INSERT INTO policy_history (tenant, class, version, action, policy, by_whom, at)
         VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7)",
        &[
            &tenant,
            &class,
            &(v.version as i32),
            &v.action,
            &policy,
            &v.by,
            &big(v.at),
        ],
    )
    .await
    .map_err(err)?;
    Ok(())
}

impl PolicyStore for PgPolicies {
    fn get(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Option<StoredPolicy>, PolicyStoreError> {
        let (tenant, class) = (tenant.to_string(), class.name());
        self.pg.run(move |client| async move {
            let sql = format!("{CURRENT} WHERE tenant = $1 AND class = $2");
            let row = client
                .query_opt(&sql, &[&tenant, &class])
                .await
                .map_err(err)?;
            row.as_ref().map(stored).transpose()
        })
    }

    fn put(
        &self,
        tenant: &str,
        class: WorkloadClass,
        policy: RoutePolicy,
        by: &str,
    ) -> Result<StoredPolicy, PolicyStoreError> {
        policy.validate()?;
        let (tenant, by) = (tenant.to_string(), by.to_string());
        self.pg.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(err)?;
            let version = lock_route(&tx, &tenant, class.name()).await?;
            let at = unix_now();
            let current = StoredPolicy {
                tenant: tenant.clone(),
                class: class.name().to_string(),
                version: version as u32,
                policy: policy.clone(),
                updated_by: by.clone(),
                updated_at: at,
            };
            let change = PolicyVersion {
                version: version as u32,
                action: "put".into(),
                policy: Some(policy),
                by,
                at,
            };
            set_current(&tx, &current).await?;
            add_version(&tx, &tenant, class.name(), &change).await?;
            tx.commit().await.map_err(err)?;
            Ok(current)
        })
    }

    fn delete(
        &self,
        tenant: &str,
        class: WorkloadClass,
        by: &str,
    ) -> Result<bool, PolicyStoreError> {
        let (tenant, by) = (tenant.to_string(), by.to_string());
        self.pg.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(err)?;
            let version = lock_route(&tx, &tenant, class.name()).await?;
            let removed = tx
                .execute(
                    "DELETE FROM policies WHERE tenant = $1 AND class = $2",
                    &[&tenant, &class.name()],
                )
                .await
                .map_err(err)?;
            if removed == 0 {
                return Ok(false);
            }
            let change = PolicyVersion {
                version: version as u32,
                action: "delete".into(),
                policy: None,
                by,
                at: unix_now(),
            };
            add_version(&tx, &tenant, class.name(), &change).await?;
            tx.commit().await.map_err(err)?;
            Ok(true)
        })
    }

    fn history(
        &self,
        tenant: &str,
        class: WorkloadClass,
    ) -> Result<Vec<PolicyVersion>, PolicyStoreError> {
        let (tenant, class) = (tenant.to_string(), class.name());
        self.pg.run(move |client| async move {
            let rows = client
                .query(
                    "SELECT version, action, policy::text, by_whom, at FROM policy_history
                     WHERE tenant = $1 AND class = $2 ORDER BY version",
                    &[&tenant, &class],
                )
                .await
                .map_err(err)?;
            rows.iter().map(version).collect()
        })
    }

    fn all(&self) -> Result<Vec<StoredPolicy>, PolicyStoreError> {
        self.pg.run(move |client| async move {
            let sql = format!("{CURRENT} ORDER BY tenant COLLATE \"C\", class");
            let rows = client.query(&sql, &[]).await.map_err(err)?;
            rows.iter().map(stored).collect()
        })
    }

    fn routes(&self) -> Result<Vec<(String, WorkloadClass)>, PolicyStoreError> {
        self.pg.run(move |client| async move {
            let rows = client
                .query(
                    "SELECT tenant, class FROM policy_history GROUP BY tenant, class
                     ORDER BY tenant COLLATE \"C\", class",
                    &[],
                )
                .await
                .map_err(err)?;
            rows.iter()
                .map(|r| {
                    let class = r.get::<_, &str>(1).parse().map_err(corrupt)?;
                    Ok((r.get(0), class))
                })
                .collect()
        })
    }

    fn import(
        &self,
        tenant: &str,
        class: WorkloadClass,
        current: Option<&StoredPolicy>,
        history: &[PolicyVersion],
    ) -> Result<(), PolicyStoreError> {
        let (tenant, current, history) = (tenant.to_string(), current.cloned(), history.to_vec());
        self.pg.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(err)?;
            if lock_route(&tx, &tenant, class.name()).await? != 1 {
                return Err(PolicyStoreError::RouteExists {
                    tenant,
                    class: class.name().to_string(),
                });
            }
            if let Some(p) = &current {
                set_current(&tx, p).await?;
            }
            for v in &history {
                add_version(&tx, &tenant, class.name(), v).await?;
            }
            tx.commit().await.map_err(err)?;
            Ok(())
        })
    }
}
