//! The shared store: tenants, keys, limits, policies with their versions, and history in
//! PostgreSQL, so every replica reads and writes one state. Queries go through a connection
//! pool on the store runtime ([`super::runtime`]), each bounded by a timeout; the schema is
//! the SQL migrations under `migrations/postgres/`, applied at start-up. No PostgreSQL type
//! leaves this folder.

mod history;
mod policies;
mod responses;
mod tenants;

use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

pub use history::PgHistory;
pub use policies::PgPolicies;
pub use responses::PgResponses;
pub use tenants::PgTenants;

use super::runtime::{self, CALL_TIMEOUT};
use super::StoreError;

/// Connections per replica: the HTTP handlers' blocking threads, the history writer and the
/// planner share them.
const POOL_SIZE: usize = 16;

/// A pool of connections to one database.
#[derive(Clone)]
pub struct Pg {
    pool: Pool,
}

impl Pg {
    /// A pool for `url` (`postgres://user@host:port/db`); connects lazily.
    pub fn connect(url: &str) -> Result<Pg, StoreError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Open(format!("{}: {e}", redact(url))))?;
        config.connect_timeout(Duration::from_secs(3));
        config.application_name("specgate");
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(CALL_TIMEOUT))
            .create_timeout(Some(Duration::from_secs(3)))
            .recycle_timeout(Some(Duration::from_secs(3)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Open(e.to_string()))?;
        Ok(Pg { pool })
    }

    /// Apply the pending migrations; returns the versions applied.
    pub fn migrate(&self) -> Result<Vec<i32>, StoreError> {
        self.run(|mut client| async move {
            specgate_migrations::postgres::migrate_postgres(&mut client)
                .await
                .map_err(|e| match e {
                    specgate_migrations::postgres::PgMigrationError::Db(e) => db_error(e),
                    e => StoreError::Schema(e.to_string()),
                })
        })
    }

    /// Run `query` with a pooled connection on the store runtime, within the call timeout.
    pub(crate) fn run<T, E, F, Fut>(&self, query: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send,
    {
        let pool = self.pool.clone();
        runtime::call(CALL_TIMEOUT, async move {
            let client = pool
                .get()
                .await
                .map_err(|e| StoreError::Unavailable(format!("PostgreSQL: {e}")))?;
            query(client).await
        })
    }
}

/// What a PostgreSQL error means to the caller: the server or the connection failing (or a
/// transaction that lost a race) may pass, so retry later (503); anything else is a query
/// this build cannot run against the data there.
pub(crate) fn db_error(e: tokio_postgres::Error) -> StoreError {
    let transient = match e.code() {
        None => true,
        Some(code) => {
            let class = &code.code()[..2];
            matches!(class, "08" | "40" | "53" | "57") || code == &SqlState::LOCK_NOT_AVAILABLE
        }
    };
    // The server's own message says what went wrong; the error's Display only "db error".
    let said = match e.as_db_error() {
        Some(db) => format!("PostgreSQL: {} ({})", db.message(), db.code().code()),
        None => format!("PostgreSQL: {e}"),
    };
    if transient {
        StoreError::Unavailable(said)
    } else {
        StoreError::Corrupt(said)
    }
}

/// A URL with its password (if any, in the user part or as `password=` in the query)
/// hidden, for messages.
pub fn redact(url: &str) -> String {
    let url = match url.split_once('?') {
        Some((base, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{base}?{}", query.join("&"))
        }
        None => url.to_string(),
    };
    let url = url.as_str();
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// u64 counters and times as PostgreSQL's bigint (values past i64 saturate).
pub(crate) fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored bigint back as u64 (a negative value reads as 0).
pub(crate) fn unbig(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_messages_hide_the_password() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/sg"),
            "postgres://app:***@db:5432/sg"
        );
        assert_eq!(
            redact("postgres://root@127.0.0.1/test"),
            "postgres://root@127.0.0.1/test"
        );
        assert_eq!(
            redact("postgres://app@db/sg?sslmode=disable&password=s3cret"),
            "postgres://app@db/sg?sslmode=disable&password=***"
        );
    }

    #[test]
    fn migrations_apply_once_and_a_database_from_a_newer_build_is_refused() {
        let Some(db) = crate::store::test_services::TestDatabase::create() else {
            return;
        };
        let pg = Pg::connect(&db.url).unwrap();
        assert_eq!(pg.migrate().unwrap(), vec![1, 2, 3, 4, 5]);
        assert_eq!(
            pg.migrate().unwrap(),
            Vec::<i32>::new(),
            "nothing left to apply"
        );
        pg.run(|client| async move {
            client
                .execute(
                    "INSERT INTO specgate_schema (version, name) VALUES (99, 'future')",
                    &[],
                )
                .await
                .map_err(db_error)
        })
        .unwrap();
        let url = crate::store::StoreUrl::Postgres(db.url.clone());
        let refused = crate::store::Stores::connect(&url, None).err().unwrap();
        assert!(matches!(refused, StoreError::Schema(_)), "{refused}");
        assert!(refused.to_string().contains("newer"), "{refused}");
    }

    #[test]
    fn a_database_that_is_not_there_is_unavailable_not_a_hang() {
        // Nothing listens on port 9.
        let pg = Pg::connect("postgres://root@127.0.0.1:9/none").unwrap();
        let started = std::time::Instant::now();
        let err = pg.migrate().unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(started.elapsed() < CALL_TIMEOUT + Duration::from_secs(1));
    }

    // The suite every store passes, each test on a database of its own (dropped after).
    crate::store::contract::store_contract_tests!(crate::store::test_services::postgres_stores());
}
