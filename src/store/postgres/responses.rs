//! Stored responses in PostgreSQL: `responses`, keyed by (tenant, id), the record as JSON
//! text; every write also removes up to a bounded number of expired rows (by the expiry
//! index).

use super::{big, db_error, Pg};
use crate::store::responses::{ResponseStore, StoredResponse, SWEEP_PER_WRITE};
use crate::store::StoreError;

#[derive(Clone)]
pub struct PgResponses {
    pg: Pg,
}

impl PgResponses {
    pub fn new(pg: Pg) -> Self {
        Self { pg }
    }
}

fn corrupt(e: serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("a stored response: {e}"))
}

impl ResponseStore for PgResponses {
    fn put(&self, r: &StoredResponse) -> Result<(), StoreError> {
        let body = serde_json::to_string(r).map_err(corrupt)?;
        let r = r.clone();
        self.pg.run(move |client| async move {
            client
                .execute(
                    "INSERT INTO responses (tenant, id, created_at, expires_at, body) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, id) DO UPDATE SET \
                     created_at = $3, expires_at = $4, body = $5",
                    &[
                        &r.tenant,
                        &r.id,
                        &big(r.created_at),
                        &big(r.expires_at),
                        &body,
                    ],
                )
                .await
                .map_err(db_error)?;
            let limit = SWEEP_PER_WRITE as i64;
            client
                .execute(
                    "DELETE FROM responses WHERE (tenant, id) IN (SELECT tenant, id FROM \
                     responses WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)",
                    &[&big(r.created_at), &limit],
                )
                .await
                .map_err(db_error)?;
            Ok(())
        })
    }

    fn get(&self, tenant: &str, id: &str, now: u64) -> Result<Option<StoredResponse>, StoreError> {
        let (tenant, id) = (tenant.to_string(), id.to_string());
        let body: Option<String> = self.pg.run(move |client| async move {
            let row = client
                .query_opt(
                    "SELECT body FROM responses WHERE tenant = $1 AND id = $2 AND expires_at > $3",
                    &[&tenant, &id, &big(now)],
                )
                .await
                .map_err(db_error)?;
            Ok::<_, StoreError>(row.map(|r| r.get(0)))
        })?;
        body.map(|b| serde_json::from_str(&b).map_err(corrupt))
            .transpose()
    }

    fn delete(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        let (tenant, id) = (tenant.to_string(), id.to_string());
        self.pg.run(move |client| async move {
            let n = client
                .execute(
                    "DELETE FROM responses WHERE tenant = $1 AND id = $2",
                    &[&tenant, &id],
                )
                .await
                .map_err(db_error)?;
            Ok(n > 0)
        })
    }
}
