//! The limiter seam: per-tenant counters that admission checks and updates — requests in
//! flight and the tokens-per-minute bucket. [`LocalLimiter`] keeps them in this process (one
//! replica's limits); a shared implementation keeps them where every replica sees them, so a
//! tenant's limit is not multiplied by the number of replicas.

use std::sync::Mutex;
use std::time::Instant;

use super::limits::{Limits, QuotaBook, QuotaError};

/// An admitted request's place, as the limiter that admitted it names it (a shared limiter
/// keeps in-flight places as leases that expire unless the replica holding them renews them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lease(pub String);

/// Admission counters. `admit` and `release` pair up exactly once per admitted request.
pub trait Limiter: Send + Sync {
    /// Admit a request that may use `tokens` (prompt + max_tokens) under `limits`, or say
    /// why not.
    fn admit(&self, tenant: &str, limits: Limits, tokens: u64) -> Result<Lease, QuotaError>;

    /// An admitted request ended having used `used` of its `reserved` tokens: its place and
    /// the difference go back.
    fn release(&self, tenant: &str, lease: &Lease, reserved: u64, used: u64);

    /// The tenant's requests in flight.
    fn active(&self, tenant: &str) -> u32;

    /// Whether a call makes a round trip (callers on an async thread then make it on a
    /// blocking one).
    fn remote(&self) -> bool {
        false
    }
}

/// The in-process limiter: one [`QuotaBook`] behind a lock, timed from its creation.
pub struct LocalLimiter {
    book: Mutex<QuotaBook>,
    epoch: Instant,
}

impl Default for LocalLimiter {
    fn default() -> Self {
        Self {
            book: Mutex::new(QuotaBook::default()),
            epoch: Instant::now(),
        }
    }
}

impl LocalLimiter {
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn book(&self) -> std::sync::MutexGuard<'_, QuotaBook> {
        // The book holds counters only; a panic elsewhere cannot leave it half-written.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Limiter for LocalLimiter {
    fn admit(&self, tenant: &str, limits: Limits, tokens: u64) -> Result<Lease, QuotaError> {
        let now = self.now();
        self.book().admit(tenant, limits, tokens, now)?;
        Ok(Lease::default())
    }

    fn release(&self, tenant: &str, _: &Lease, reserved: u64, used: u64) {
        let now = self.now();
        self.book().release(tenant, reserved, used, now);
    }

    fn active(&self, tenant: &str) -> u32 {
        self.book().active(tenant)
    }
}
