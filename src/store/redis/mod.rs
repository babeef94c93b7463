//! Redis: what replicas must share the instant it changes — the admission counters (one
//! atomic script per admission and per release; in-flight places are leases a live replica
//! renews) and change notifications (pub/sub), so a revoked key or an edited limit or policy
//! reaches every replica's cache at once. No Redis type leaves this folder.

mod limiter;
mod notifier;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

pub use limiter::RedisLimiter;
pub use notifier::RedisNotifier;

use super::StoreError;

/// How long one Redis command may take before the caller treats Redis as down.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);

/// One Redis server, a key prefix, and a connection made on first use (so a replica starts
/// while Redis is down, and the connection manager reconnects after it returns).
pub struct Redis {
    client: redis::Client,
    pub prefix: String,
    conn: OnceCell<ConnectionManager>,
}

impl Redis {
    pub fn new(url: &str, prefix: &str) -> Result<Redis, StoreError> {
        let client = redis::Client::open(url).map_err(|e| {
            StoreError::Open(format!("Redis at {}: {e}", super::postgres::redact(url)))
        })?;
        Ok(Redis {
            client,
            prefix: prefix.to_string(),
            conn: OnceCell::new(),
        })
    }

    /// A handle on the shared connection (cheap to clone).
    async fn conn(&self) -> Result<ConnectionManager, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(COMMAND_TIMEOUT)
            .set_response_timeout(COMMAND_TIMEOUT)
            .set_number_of_retries(1)
            .set_max_delay(1000);
        let conn = self
            .conn
            .get_or_try_init(|| ConnectionManager::new_with_config(self.client.clone(), config))
            .await
            .map_err(unavailable)?;
        Ok(conn.clone())
    }

    /// A key under this deployment's prefix.
    fn key(&self, parts: &[&str]) -> String {
        let mut key = self.prefix.clone();
        for p in parts {
            key.push(':');
            key.push_str(p);
        }
        key
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("Redis: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::store::changes::{Change, Notifier};
    use crate::store::limiter::Limiter;
    use crate::store::limits::{Limits, QuotaError};
    use crate::store::test_services::{redis_url, skip};

    /// A Redis under a prefix of its own (None: no server, skipped).
    fn redis() -> Option<Arc<Redis>> {
        let url = redis_url();
        let r = Arc::new(Redis::new(&url, &format!("sgtest-{:016x}", rand::random::<u64>())).ok()?);
        let probe = Arc::clone(&r);
        let up = crate::store::runtime::call(Duration::from_secs(2), async move {
            let mut conn = probe.conn().await?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .map_err(unavailable)
        });
        match up {
            Ok(_) => Some(r),
            Err(e) => {
                skip(&format!("no Redis at {url}: {e}"));
                None
            }
        }
    }

    #[test]
    fn the_shared_limiter_keeps_the_limiter_contract() {
        let Some(r) = redis() else { return };
        let l = RedisLimiter::start(r, Duration::from_secs(10)).unwrap();
        crate::store::contract::the_limiter_counts_requests_in_flight_and_tokens_per_tenant(&*l);
    }

    #[test]
    fn two_replicas_share_one_tenants_places_and_a_dead_replicas_lease_expires() {
        let Some(r) = redis() else { return };
        let ttl = Duration::from_millis(1500);
        let a = RedisLimiter::start(Arc::clone(&r), ttl).unwrap();
        let b = RedisLimiter::start(Arc::clone(&r), ttl).unwrap();
        let limits = Limits {
            max_concurrent_requests: 2,
            tokens_per_minute: 0,
        };
        let held = a.admit("t", limits, 1).unwrap();
        let _on_b = b.admit("t", limits, 1).unwrap();
        assert!(matches!(
            a.admit("t", limits, 1),
            Err(QuotaError::Concurrency { limit: 2 })
        ));
        assert!(matches!(
            b.admit("t", limits, 1),
            Err(QuotaError::Concurrency { limit: 2 })
        ));
        // Renewed while its replica lives: still held after twice the TTL.
        std::thread::sleep(ttl * 2);
        assert_eq!(b.active("t"), 2, "live replicas renew their leases");
        // Replica A dies (its renewal stops); its place frees within the TTL.
        drop(a);
        let died = Instant::now();
        while b.admit("t", limits, 1).is_err() {
            assert!(
                died.elapsed() < ttl * 2 + Duration::from_secs(1),
                "A's lease never expired"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(held);
    }

    #[test]
    fn a_change_published_by_one_replica_reaches_another() {
        let Some(r) = redis() else { return };
        let (a, b) = (RedisNotifier::new(Arc::clone(&r)), RedisNotifier::new(r));
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        b.subscribe(Box::new(move |c| {
            let _ = tx.lock().map(|t| t.send(c.clone()));
        }));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            Change::All,
            "subscribed"
        );
        let change = Change::Key { id: "k1".into() };
        a.publish(&change);
        assert_eq!(rx.recv_timeout(Duration::from_secs(1)).unwrap(), change);
    }
}
