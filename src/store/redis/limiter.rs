//! The cross-replica limiter: a tenant's tokens-per-minute bucket and its in-flight leases in
//! Redis, admitted and released by one Lua script each (atomic, timed by Redis's clock). A
//! replica renews the leases of its requests in flight every third of the lease's time to
//! live, so a replica that dies frees its tenants' places within that time.
//!
//! Redis unreachable: admission falls back to this replica's own counters (limits per
//! replica, as a single replica has them), with a warning when it starts and ends and
//! `specgate_limiter_fallback_total` counting admissions made so. Serving on is what an
//! operator of a gateway expects from a counter store; a shared limit briefly multiplied by
//! the number of replicas is the price, and the metric shows when it was paid.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Script;

use super::{unavailable, Redis, COMMAND_TIMEOUT};
use crate::store::limiter::{Lease, Limiter, LocalLimiter};
use crate::store::limits::{Limits, QuotaError};
use crate::store::runtime;
use crate::store::StoreError;

/// Leases admitted by the fallback carry this prefix.
const LOCAL: &str = "local:";

pub struct RedisLimiter {
    redis: Arc<Redis>,
    replica: String,
    lease_ttl: Duration,
    next: AtomicU64,
    /// This replica's live shared leases: member → tenant (what the renewal extends).
    live: Arc<Mutex<HashMap<String, String>>>,
    fallback: LocalLimiter,
    down: AtomicBool,
    admit: Script,
    release: Script,
}

impl RedisLimiter {
    /// A limiter on `redis`, renewing this replica's leases from now on.
    pub fn start(redis: Arc<Redis>, lease_ttl: Duration) -> Result<Arc<Self>, StoreError> {
        let limiter = Arc::new(RedisLimiter {
            redis,
            replica: format!("{:016x}", rand::random::<u64>()),
            lease_ttl,
            next: AtomicU64::new(0),
            live: Arc::new(Mutex::new(HashMap::new())),
            fallback: LocalLimiter::default(),
            down: AtomicBool::new(false),
            admit: Script::new(include_str!("limiter.lua")),
            release: Script::new(include_str!("release.lua")),
        });
        let weak = Arc::downgrade(&limiter);
        let every = (lease_ttl / 3).max(Duration::from_millis(100));
        runtime::runtime()?.spawn(async move {
            let renew = Script::new(include_str!("renew.lua"));
            loop {
                tokio::time::sleep(every).await;
                let Some(limiter) = weak.upgrade() else {
                    return;
                };
                if let Err(e) = limiter.renew(&renew).await {
                    eprintln!("specgate: renewing in-flight leases in Redis failed: {e}");
                }
            }
        });
        Ok(limiter)
    }

    fn keys(&self, tenant: &str) -> [String; 2] {
        [
            self.redis.key(&["inflight", tenant]),
            self.redis.key(&["tpm", tenant]),
        ]
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn renew(&self, script: &Script) -> Result<(), StoreError> {
        let mut by_tenant: HashMap<String, Vec<String>> = HashMap::new();
        for (member, tenant) in self.live().iter() {
            by_tenant
                .entry(tenant.clone())
                .or_default()
                .push(member.clone());
        }
        let mut conn = self.redis.conn().await?;
        for (tenant, members) in by_tenant {
            let mut call = script.prepare_invoke();
            call.key(&self.keys(&tenant)[0])
                .arg(self.lease_ttl.as_secs_f64());
            for m in &members {
                call.arg(m);
            }
            let _: i64 = call.invoke_async(&mut conn).await.map_err(unavailable)?;
        }
        Ok(())
    }

    /// Note whether Redis answered, warning once per change.
    fn answered(&self, ok: bool, why: &str) {
        let was_down = self.down.swap(!ok, Ordering::Relaxed);
        if was_down && ok {
            eprintln!("specgate: Redis is back; tenant limits are shared across replicas again");
        } else if !was_down && !ok {
            eprintln!(
                "specgate: Redis unreachable ({why}); tenant limits are enforced per replica \
                 until it returns"
            );
        }
        metrics::gauge!("specgate_limiter_shared").set(if ok { 1.0 } else { 0.0 });
    }

    fn shared_admit(
        &self,
        tenant: &str,
        limits: Limits,
        tokens: u64,
        member: &str,
    ) -> Result<(i64, i64), StoreError> {
        let redis = Arc::clone(&self.redis);
        let script = self.admit.clone();
        let keys = self.keys(tenant);
        let ttl = self.lease_ttl.as_secs_f64();
        let member = member.to_string();
        runtime::call(COMMAND_TIMEOUT * 2, async move {
            let mut conn = redis.conn().await?;
            script
                .key(&keys[0])
                .key(&keys[1])
                .arg(limits.max_concurrent_requests)
                .arg(limits.tokens_per_minute)
                .arg(tokens)
                .arg(member)
                .arg(ttl)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)
        })
    }
}

impl Limiter for RedisLimiter {
    fn admit(&self, tenant: &str, limits: Limits, tokens: u64) -> Result<Lease, QuotaError> {
        let member = format!(
            "{}:{}",
            self.replica,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        // Registered before the call, so a renewal racing the admission keeps it alive.
        self.live().insert(member.clone(), tenant.to_string());
        match self.shared_admit(tenant, limits, tokens, &member) {
            Ok((code, value)) => {
                self.answered(true, "");
                let refusal = match code {
                    0 => return Ok(Lease(member)),
                    1 => QuotaError::Concurrency {
                        limit: value as u32,
                    },
                    2 => QuotaError::TokensPerMinute {
                        limit: limits.tokens_per_minute,
                        retry_after_secs: value.max(1) as u64,
                    },
                    _ => QuotaError::TooLarge {
                        limit: limits.tokens_per_minute,
                        requested: tokens,
                    },
                };
                self.live().remove(&member);
                Err(refusal)
            }
            Err(e) => {
                self.live().remove(&member);
                self.answered(false, &e.to_string());
                metrics::counter!("specgate_limiter_fallback_total").increment(1);
                self.fallback.admit(tenant, limits, tokens)?;
                Ok(Lease(format!("{LOCAL}{member}")))
            }
        }
    }

    fn release(&self, tenant: &str, lease: &Lease, reserved: u64, used: u64) {
        if lease.0.starts_with(LOCAL) {
            return self.fallback.release(tenant, lease, reserved, used);
        }
        self.live().remove(&lease.0);
        let redis = Arc::clone(&self.redis);
        let script = self.release.clone();
        let keys = self.keys(tenant);
        let member = lease.0.clone();
        let refund = reserved.saturating_sub(used);
        let done = runtime::call(COMMAND_TIMEOUT * 2, async move {
            let mut conn = redis.conn().await?;
            script
                .key(&keys[0])
                .key(&keys[1])
                .arg(member)
                .arg(refund)
                .invoke_async::<i64>(&mut conn)
                .await
                .map_err(unavailable)
        });
        // The lease is no longer renewed: if Redis missed this, it expires on its own.
        if let Err(e) = done {
            metrics::counter!("specgate_limiter_release_failures_total").increment(1);
            eprintln!("specgate: releasing a lease in Redis failed (it will expire): {e}");
        }
    }

    fn remote(&self) -> bool {
        true
    }

    fn active(&self, tenant: &str) -> u32 {
        let redis = Arc::clone(&self.redis);
        let key = self.keys(tenant)[0].clone();
        let shared = runtime::call(COMMAND_TIMEOUT * 2, async move {
            let mut conn = redis.conn().await?;
            let now: (u64, u64) = redis::cmd("TIME")
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            let now = now.0 as f64 + now.1 as f64 / 1e6;
            redis::cmd("ZCOUNT")
                .arg(&key)
                .arg(now)
                .arg("+inf")
                .query_async::<u32>(&mut conn)
                .await
                .map_err(unavailable)
        });
        shared.unwrap_or(0) + self.fallback.active(tenant)
    }
}
