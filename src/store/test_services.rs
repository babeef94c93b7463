//! The servers store tests run against: PostgreSQL at `SPECGATE_TEST_POSTGRES` and Redis at
//! `SPECGATE_TEST_REDIS` (defaults: the development machines' services). Each test gets a
//! database (dropped after) or a key prefix of its own, so tests run in parallel. A server
//! that is not there skips the test with `skipped: no PostgreSQL at …` — unless
//! `SPECGATE_REQUIRE_SERVICES=1` (CI), where it fails instead.

use std::any::Any;
use std::ops::Deref;
use std::time::Duration;

use super::runtime::{self, CALL_TIMEOUT};
use super::{StoreError, Stores};

pub const DEFAULT_POSTGRES: &str = "postgres://root@127.0.0.1:5432/test";
pub const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379/";

/// Stores for one test, with whatever must outlive them (a database to drop).
pub struct TestStores {
    pub stores: Stores,
    _guard: Option<Box<dyn Any>>,
}

impl TestStores {
    pub fn new(stores: Stores) -> Self {
        Self {
            stores,
            _guard: None,
        }
    }
}

impl Deref for TestStores {
    type Target = Stores;
    fn deref(&self) -> &Stores {
        &self.stores
    }
}

pub fn postgres_url() -> String {
    std::env::var("SPECGATE_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_POSTGRES.to_string())
}

pub fn redis_url() -> String {
    std::env::var("SPECGATE_TEST_REDIS").unwrap_or_else(|_| DEFAULT_REDIS.to_string())
}

/// Say why a test cannot run; fail when the services are required.
pub fn skip(why: &str) {
    if std::env::var("SPECGATE_REQUIRE_SERVICES").as_deref() == Ok("1") {
        panic!("{why} (SPECGATE_REQUIRE_SERVICES=1)");
    }
    eprintln!("skipped: {why}");
}

/// A database of its own on the test server, dropped when the guard goes.
pub struct TestDatabase {
    admin: String,
    pub name: String,
    pub url: String,
}

impl TestDatabase {
    /// None (and a skip message) when no server answers.
    pub fn create() -> Option<TestDatabase> {
        let admin = postgres_url();
        let name = format!("specgate_test_{:016x}", rand::random::<u64>());
        match admin_sql(&admin, format!("CREATE DATABASE {name}")) {
            Ok(()) => {}
            Err(e) => {
                skip(&format!("no PostgreSQL at {admin}: {e}"));
                return None;
            }
        }
        let url = match admin.rfind('/') {
            Some(slash) if admin[..slash].contains("://") && slash > admin.find("://")? + 2 => {
                format!("{}/{name}", &admin[..slash])
            }
            _ => format!("{admin}/{name}"),
        };
        Some(TestDatabase { admin, name, url })
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = admin_sql(
            &self.admin,
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

fn admin_sql(url: &str, sql: String) -> Result<(), StoreError> {
    let url = url.to_string();
    runtime::call(CALL_TIMEOUT, async move {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| StoreError::Open(format!("{e}")))?;
        config.connect_timeout(Duration::from_secs(2));
        let (client, conn) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        tokio::spawn(conn);
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))
    })
}

/// Fresh PostgreSQL stores on a database of their own (None: skipped).
pub fn postgres_stores() -> Option<TestStores> {
    let db = TestDatabase::create()?;
    let stores = Stores::connect(&super::StoreUrl::Postgres(db.url.clone()), None)
        .expect("opening the test database");
    Some(TestStores {
        stores,
        _guard: Some(Box::new(db)),
    })
}
