//! Tenants and keys in PostgreSQL: `tenants` (limits as JSON) and `api_keys` (the secret's
//! hash only). Every write is committed before the call returns.

use deadpool_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use super::{big, db_error, unbig, Pg};
use crate::clock::unix_now;
use crate::store::limits::LimitOverrides;
use crate::store::tenants::{
    new_key, new_tenant, IssuedKey, KeyInfo, KeyRecord, TenantError, TenantInfo, TenantRecord,
    TenantStore,
};
use crate::store::StoreError;

#[derive(Clone)]
pub struct PgTenants {
    pg: Pg,
}

impl PgTenants {
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

fn err(e: tokio_postgres::Error) -> TenantError {
    TenantError::Store(db_error(e))
}

fn corrupt(e: impl std::fmt::Display) -> TenantError {
    StoreError::Corrupt(e.to_string()).into()
}

const KEY_COLUMNS: &str = "id, tenant, sha256, created, revoked";

fn key_record(row: &Row) -> KeyRecord {
    KeyRecord {
        id: row.get(0),
        tenant: row.get(1),
        sha256: row.get(2),
        created: unbig(row.get(3)),
        revoked: row.get::<_, Option<i64>>(4).map(unbig),
    }
}

fn tenant_record(row: &Row) -> Result<TenantRecord, TenantError> {
    Ok(TenantRecord {
        name: row.get(0),
        created: unbig(row.get(1)),
        limits: serde_json::from_str(row.get::<_, &str>(2)).map_err(corrupt)?,
    })
}

async fn insert_key(client: &impl GenericClient, k: &KeyRecord) -> Result<(), TenantError> {
    client
        .execute(
            "INSERT INTO api_keys (id, tenant, sha256, created, revoked) VALUES ($1, $2, $3, $4, $5)",
            &[&k.id, &k.tenant, &k.sha256, &big(k.created), &k.revoked.map(big)],
        )
        .await
        .map_err(|e| match e.code() {
            Some(c) if c == &SqlState::FOREIGN_KEY_VIOLATION => {
                TenantError::NoTenant(k.tenant.clone())
            }
            _ => err(e),
        })?;
    Ok(())
}

/// Insert a tenant record; false when the name is taken.
async fn insert_tenant(client: &impl GenericClient, t: &TenantRecord) -> Result<bool, TenantError> {
    let limits = serde_json::to_string(&t.limits).map_err(corrupt)?;
    let n = client
        .execute(
            "INSERT INTO tenants (name, created, limits) VALUES ($1, $2, $3::text::jsonb)
             ON CONFLICT (name) DO NOTHING",
            &[&t.name, &big(t.created), &limits],
        )
        .await
        .map_err(err)?;
    Ok(n == 1)
}

impl TenantStore for PgTenants {
    fn create(&self, name: &str) -> Result<IssuedKey, TenantError> {
        let tenant = new_tenant(name)?;
        let (key, issued) = new_key(name);
        self.pg.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(err)?;
            if !insert_tenant(&tx, &tenant).await? {
                return Err(TenantError::Exists(tenant.name));
            }
            insert_key(&tx, &key).await?;
            tx.commit().await.map_err(err)?;
            Ok(issued)
        })
    }

    fn exists(&self, name: &str) -> Result<bool, TenantError> {
        let name = name.to_string();
        self.pg.run(move |client| async move {
            let row = client
                .query_opt("SELECT 1 FROM tenants WHERE name = $1", &[&name])
                .await
                .map_err(err)?;
            Ok(row.is_some())
        })
    }

    fn limits(&self, name: &str) -> Result<LimitOverrides, TenantError> {
        let name = name.to_string();
        self.pg.run(move |client| async move {
            let row = client
                .query_opt("SELECT limits::text FROM tenants WHERE name = $1", &[&name])
                .await
                .map_err(err)?
                .ok_or(TenantError::NoTenant(name))?;
            serde_json::from_str(row.get::<_, &str>(0)).map_err(corrupt)
        })
    }

    fn set_limits(&self, name: &str, limits: LimitOverrides) -> Result<(), TenantError> {
        let name = name.to_string();
        let limits = serde_json::to_string(&limits).map_err(corrupt)?;
        self.pg.run(move |client| async move {
            let n = client
                .execute(
                    "UPDATE tenants SET limits = $2::text::jsonb WHERE name = $1",
                    &[&name, &limits],
                )
                .await
                .map_err(err)?;
            if n == 0 {
                return Err(TenantError::NoTenant(name));
            }
            Ok(())
        })
    }

    fn add_key(&self, name: &str) -> Result<IssuedKey, TenantError> {
        let (key, issued) = new_key(name);
        self.pg.run(move |client| async move {
            insert_key(&client, &key).await?;
            Ok(issued)
        })
    }

    fn key(&self, id: &str) -> Result<Option<KeyRecord>, TenantError> {
        let id = id.to_string();
        self.pg.run(move |client| async move {
            let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1");
            let row = client.query_opt(&sql, &[&id]).await.map_err(err)?;
            Ok(row.as_ref().map(key_record))
        })
    }

    fn revoke(&self, tenant: &str, id: &str) -> Result<(), TenantError> {
        let (tenant, id) = (tenant.to_string(), id.to_string());
        self.pg.run(move |client| async move {
            let n = client
                .execute(
                    "UPDATE api_keys SET revoked = coalesce(revoked, $3) WHERE id = $1 AND tenant = $2",
                    &[&id, &tenant, &big(unix_now())],
                )
                .await
                .map_err(err)?;
            if n == 0 {
                return Err(TenantError::NoKey { tenant, id });
            }
            Ok(())
        })
    }

    fn list(&self) -> Result<Vec<TenantInfo>, TenantError> {
        Ok(self
            .export()?
            .into_iter()
            .map(|(t, keys)| TenantInfo {
                name: t.name,
                created: t.created,
                limits: t.limits,
                keys: keys
                    .into_iter()
                    .map(|k| KeyInfo {
                        id: k.id,
                        created: k.created,
                        revoked: k.revoked,
                    })
                    .collect(),
            })
            .collect())
    }

    fn export(&self) -> Result<Vec<(TenantRecord, Vec<KeyRecord>)>, TenantError> {
        self.pg.run(move |client| async move {
            let tenants = client
                .query(
                    "SELECT name, created, limits::text FROM tenants ORDER BY name",
                    &[],
                )
                .await
                .map_err(err)?;
            let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY tenant, created, id");
            let keys = client.query(&sql, &[]).await.map_err(err)?;
            let mut out = Vec::with_capacity(tenants.len());
            for row in &tenants {
                let t = tenant_record(row)?;
                let own = keys
                    .iter()
                    .map(key_record)
                    .filter(|k| k.tenant == t.name)
                    .collect();
                out.push((t, own));
            }
            Ok(out)
        })
    }

    fn import(&self, tenant: &TenantRecord, keys: &[KeyRecord]) -> Result<(), TenantError> {
        let (tenant, keys) = (tenant.clone(), keys.to_vec());
        self.pg.run(move |mut client| async move {
            let tx = client.transaction().await.map_err(err)?;
            if !insert_tenant(&tx, &tenant).await? {
                return Err(TenantError::Exists(tenant.name));
            }
            for k in &keys {
                insert_key(&tx, k).await?;
            }
            tx.commit().await.map_err(err)?;
            Ok(())
        })
    }
}
