//! PostgreSQL migrations: the SQL files under `migrations/postgres/`, applied in order, each
//! in one transaction together with its row in `specgate_schema`, so a crash leaves the
//! database at one version or the next. Replicas starting together take turns (an advisory
//! lock); a database written by a newer specgate is refused.

use tokio_postgres::Client;

/// One numbered SQL migration.
pub struct SqlMigration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order.
pub const SQL_MIGRATIONS: &[SqlMigration] = &[
    SqlMigration {
        version: 1,
        name: "0001_init",
        sql: include_str!("../postgres/0001_init.sql"),
    },
    SqlMigration {
        version: 2,
        name: "0002_cached_tokens",
        sql: include_str!("../postgres/0002_cached_tokens.sql"),
    },
    SqlMigration {
        version: 3,
        name: "0003_queue",
        sql: include_str!("../postgres/0003_queue.sql"),
    },
    SqlMigration {
        version: 4,
        name: "0004_responses",
        sql: include_str!("../postgres/0004_responses.sql"),
    },
    SqlMigration {
        version: 5,
        name: "0005_shadow_plain",
        sql: include_str!("../postgres/0005_shadow_plain.sql"),
    },
];

/// The version this build writes.
pub const PG_SCHEMA_VERSION: i32 = 5;

/// The advisory lock migrations hold (any constant no other code takes).
const MIGRATION_LOCK: i64 = 0x5eca_7e00_0001;

#[derive(Debug, thiserror::Error)]
pub enum PgMigrationError {
    #[error("PostgreSQL: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error(
        "the database has schema version {found}, newer than this build's {supported}: \
         run a newer specgate, or point --store at another database"
    )]
    NewerStore { found: i32, supported: i32 },
    #[error("migration {version} ({name}) failed: {why}")]
    Failed {
        version: i32,
        name: &'static str,
        why: tokio_postgres::Error,
    },
}

/// The database's schema version; 0 for a database specgate has never written.
pub async fn pg_schema_version(client: &Client) -> Result<i32, PgMigrationError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS specgate_schema (
                 version integer PRIMARY KEY,
                 name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await?;
    let row = client
        .query_one("SELECT coalesce(max(version), 0) FROM specgate_schema", &[])
        .await?;
    Ok(row.get(0))
}

/// Bring the database to [`PG_SCHEMA_VERSION`]; returns the versions applied.
pub async fn migrate_postgres(client: &mut Client) -> Result<Vec<i32>, PgMigrationError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply_pending(client).await;
    // Released on every path; a connection that died has released it already.
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let applied = result?;
    unlocked?;
    Ok(applied)
}

async fn apply_pending(client: &mut Client) -> Result<Vec<i32>, PgMigrationError> {
    let found = pg_schema_version(client).await?;
    if found > PG_SCHEMA_VERSION {
        return Err(PgMigrationError::NewerStore {
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    let mut applied = Vec::new();
    for m in SQL_MIGRATIONS.iter().filter(|m| m.version > found) {
        let failed = |why| PgMigrationError::Failed {
            version: m.version,
            name: m.name,
            why,
        };
        let tx = client.transaction().await?;
        tx.batch_execute(m.sql).await.map_err(failed)?;
        tx.execute(
            "INSERT INTO specgate_schema (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        applied.push(m.version);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_from_one_without_gaps() {
        for (i, m) in SQL_MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "{}", m.name);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
        assert_eq!(
            SQL_MIGRATIONS.last().map(|m| m.version),
            Some(PG_SCHEMA_VERSION)
        );
    }
}
