//! Per-tenant admission limits: concurrent requests and tokens per minute.
//!
//! Tokens per minute is a token bucket (capacity = the limit, refilled at limit/60 per
//! second). A request reserves its prompt plus its `max_tokens` at admission, so a burst
//! cannot overshoot, and gets back what it did not use when it ends. Time is passed in
//! (seconds on any monotonic clock) so the book is a plain value, tested alone.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The limits a tenant runs under; 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub max_concurrent_requests: u32,
    pub tokens_per_minute: u64,
}

/// A tenant's overrides of the configured defaults (absent: the default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_requests: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    /// A prefix-cache scope shared with the other tenants an admin puts in it (their
    /// requests hit each other's cached prompts). Absent: the tenant's own scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<String>,
    /// The tenant's share of the engine against the other tenants of its tier (1 to 1000;
    /// absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// The tenant's tier: `interactive`, `standard` (absent) or `batch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::scheduler::Priority>,
}

impl LimitOverrides {
    /// The tenant's share of the engine (weight and tier) under these overrides.
    pub fn share(&self, tenant: &str) -> crate::scheduler::Share {
        crate::scheduler::Share {
            tenant: tenant.to_string(),
            weight: self.weight.unwrap_or(1),
            priority: self.priority.unwrap_or_default(),
        }
    }
}

impl Limits {
    pub fn with(self, o: &LimitOverrides) -> Limits {
        Limits {
            max_concurrent_requests: o
                .max_concurrent_requests
                .unwrap_or(self.max_concurrent_requests),
            tokens_per_minute: o.tokens_per_minute.unwrap_or(self.tokens_per_minute),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuotaError {
    #[error("this tenant already has {limit} requests in flight (its limit); retry when one ends")]
    Concurrency { limit: u32 },
    #[error(
        "this tenant's limit of {limit} tokens per minute is used up; \
         retry in {retry_after_secs} s"
    )]
    TokensPerMinute { limit: u64, retry_after_secs: u64 },
    #[error(
        "this request needs {requested} tokens (prompt + max_tokens) but the tenant's limit \
         is {limit} tokens per minute; lower max_tokens or shorten the prompt"
    )]
    TooLarge { limit: u64, requested: u64 },
    /// The counters could not be reached (a shared limiter); the request is refused, not
    /// let through uncounted.
    #[error("the rate limiter is unavailable: {0}")]
    Unavailable(String),
}

#[derive(Debug, Clone)]
struct Usage {
    active: u32,
    /// Tokens left in the bucket as of `at`.
    available: f64,
    at: f64,
    /// The limit the bucket was last filled for (a changed limit resizes it).
    limit: u64,
}

impl Usage {
    fn refill(&mut self, limit: u64, now: f64) {
        if limit != self.limit {
            self.available = self.available.min(limit as f64);
            if self.limit == 0 {
                self.available = limit as f64;
            }
            self.limit = limit;
        }
        let rate = limit as f64 / 60.0;
        let elapsed = (now - self.at).max(0.0);
        self.available = (self.available + elapsed * rate).min(limit as f64);
        self.at = now;
    }
}

/// Every tenant's live requests and token bucket.
#[derive(Debug, Default)]
pub struct QuotaBook {
    tenants: HashMap<String, Usage>,
}

impl QuotaBook {
    /// Admit a request that may use `tokens`, or say why not. On success the caller must
    /// [`release`](Self::release) it exactly once.
    pub fn admit(
        &mut self,
        tenant: &str,
        limits: Limits,
        tokens: u64,
        now: f64,
    ) -> Result<(), QuotaError> {
        let tpm = limits.tokens_per_minute;
        let u = self.tenants.entry(tenant.to_string()).or_insert(Usage {
            active: 0,
            available: tpm as f64,
            at: now,
            limit: tpm,
        });
        let cap = limits.max_concurrent_requests;
        if cap > 0 && u.active >= cap {
            return Err(QuotaError::Concurrency { limit: cap });
        }
        if tpm > 0 {
            if tokens > tpm {
                return Err(QuotaError::TooLarge {
                    limit: tpm,
                    requested: tokens,
                });
            }
            u.refill(tpm, now);
            let missing = tokens as f64 - u.available;
            if missing > 0.0 {
                let secs = (missing / (tpm as f64 / 60.0)).ceil().max(1.0);
                return Err(QuotaError::TokensPerMinute {
                    limit: tpm,
                    retry_after_secs: secs as u64,
                });
            }
            u.available -= tokens as f64;
        }
        u.active += 1;
        Ok(())
    }

    /// A request admitted with `reserved` tokens ended having used `used`: the difference
    /// goes back to the bucket.
    pub fn release(&mut self, tenant: &str, reserved: u64, used: u64, now: f64) {
        let Some(u) = self.tenants.get_mut(tenant) else {
            return;
        };
        u.active = u.active.saturating_sub(1);
        if u.limit > 0 {
            let limit = u.limit;
            u.refill(limit, now);
            let refund = reserved.saturating_sub(used) as f64;
            u.available = (u.available + refund).min(limit as f64);
        }
        if u.active == 0 && (u.limit == 0 || u.available >= u.limit as f64) {
            // Nothing to remember: keep the map as small as the set of busy tenants.
            self.tenants.remove(tenant);
        }
    }

    pub fn active(&self, tenant: &str) -> u32 {
        self.tenants.get(tenant).map_or(0, |u| u.active)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        max_concurrent_requests: 2,
        tokens_per_minute: 600,
    };

    #[test]
    fn concurrency_is_per_tenant_and_freed_on_release() {
        let mut b = QuotaBook::default();
        b.admit("a", L, 10, 0.0).unwrap();
        b.admit("a", L, 10, 0.0).unwrap();
        assert_eq!(
            b.admit("a", L, 10, 0.0),
            Err(QuotaError::Concurrency { limit: 2 })
        );
        b.admit("b", L, 10, 0.0).unwrap();
        b.release("a", 10, 10, 0.0);
        assert_eq!(b.active("a"), 1);
        b.admit("a", L, 10, 0.0).unwrap();
    }

    #[test]
    fn tokens_per_minute_refill_and_refunds() {
        let mut b = QuotaBook::default();
        let unlimited_streams = Limits {
            max_concurrent_requests: 0,
            ..L
        };
        b.admit("a", unlimited_streams, 500, 0.0).unwrap();
        // 100 left; 300 more needs 200 at 10 tokens/s: 20 s.
        assert_eq!(
            b.admit("a", unlimited_streams, 300, 0.0),
            Err(QuotaError::TokensPerMinute {
                limit: 600,
                retry_after_secs: 20
            })
        );
        // The first request used only 100 of its 500: 400 come back.
        b.release("a", 500, 100, 1.0);
        b.admit("a", unlimited_streams, 300, 1.0).unwrap();
        // The bucket never holds more than a minute's worth.
        b.release("a", 300, 0, 1000.0);
        assert!(b.admit("a", unlimited_streams, 601, 1000.0).is_err());
        assert_eq!(
            b.admit("a", unlimited_streams, 700, 1000.0),
            Err(QuotaError::TooLarge {
                limit: 600,
                requested: 700
            })
        );
    }

    #[test]
    fn zero_means_unlimited_and_overrides_apply() {
        let mut b = QuotaBook::default();
        let open = Limits {
            max_concurrent_requests: 0,
            tokens_per_minute: 0,
        };
        for _ in 0..1000 {
            b.admit("a", open, 1_000_000, 0.0).unwrap();
        }
        let o = LimitOverrides {
            max_concurrent_requests: Some(1),
            tokens_per_minute: None,
            ..LimitOverrides::default()
        };
        assert_eq!(
            L.with(&o),
            Limits {
                max_concurrent_requests: 1,
                tokens_per_minute: 600
            }
        );
    }

    #[test]
    fn a_lowered_limit_shrinks_the_bucket() {
        let mut b = QuotaBook::default();
        b.admit("a", L, 10, 0.0).unwrap();
        let low = Limits {
            max_concurrent_requests: 0,
            tokens_per_minute: 60,
        };
        // 590 were left; the new limit caps them at 60.
        assert!(matches!(
            b.admit("a", low, 61, 0.0),
            Err(QuotaError::TooLarge { .. })
        ));
        b.admit("a", low, 60, 0.0).unwrap();
        assert!(matches!(
            b.admit("a", low, 1, 0.0),
            Err(QuotaError::TokensPerMinute { .. })
        ));
    }
}
