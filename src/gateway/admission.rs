//! The shell around [`QuotaBook`]: one book behind a lock for the whole gateway, and a ticket
//! per admitted request that gives its place back when it is dropped — when the answer is
//! complete, the stream ends or the client goes away — so no path can leak a slot.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::gateway::http::error::ApiError;
use crate::store::limits::{LimitOverrides, Limits, QuotaBook, QuotaError};

pub struct Quotas {
    book: Mutex<QuotaBook>,
    epoch: Instant,
    /// The configured defaults a tenant's overrides apply to.
    pub defaults: Limits,
}

impl Quotas {
    pub fn new(defaults: Limits) -> Arc<Self> {
        Arc::new(Self {
            book: Mutex::new(QuotaBook::default()),
            epoch: Instant::now(),
            defaults,
        })
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn book(&self) -> std::sync::MutexGuard<'_, QuotaBook> {
        // The book holds counters only; a panic elsewhere cannot leave it half-written.
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admit a request of `tokens` (prompt + max_tokens) for `tenant`.
    pub fn admit(
        self: &Arc<Self>,
        tenant: &str,
        overrides: &LimitOverrides,
        tokens: u64,
    ) -> Result<Ticket, ApiError> {
        let limits = self.defaults.with(overrides);
        let now = self.now();
        self.book()
            .admit(tenant, limits, tokens, now)
            .map_err(|e| refusal(tenant, e))?;
        Ok(Ticket {
            quotas: Arc::clone(self),
            tenant: tenant.to_string(),
            reserved: tokens,
            used: None,
        })
    }

    pub fn active(&self, tenant: &str) -> u32 {
        self.book().active(tenant)
    }
}

fn refusal(tenant: &str, e: QuotaError) -> ApiError {
    let reason = match e {
        QuotaError::Concurrency { .. } => "concurrency",
        QuotaError::TokensPerMinute { .. } => "tokens_per_minute",
        QuotaError::TooLarge { .. } => "too_large",
    };
    metrics::counter!(
        "specgate_quota_refusals_total",
        &[
            ("tenant", tenant.to_string()),
            ("reason", reason.to_string())
        ]
    )
    .increment(1);
    match e {
        QuotaError::Concurrency { .. } => ApiError::rate_limited(e.to_string(), 1),
        QuotaError::TokensPerMinute {
            retry_after_secs, ..
        } => ApiError::rate_limited(e.to_string(), retry_after_secs),
        // Waiting never helps a request larger than the whole limit.
        QuotaError::TooLarge { .. } => {
            ApiError::invalid(Some("max_tokens"), e.to_string()).with_code("request_too_large")
        }
    }
}

/// An admitted request's place. Without [`Ticket::used`] the whole reservation is charged
/// (a request cut short by its client pays for what it reserved); a request refused or
/// failed by the server is marked `used(0)` and costs nothing.
pub struct Ticket {
    quotas: Arc<Quotas>,
    tenant: String,
    reserved: u64,
    used: Option<u64>,
}

impl Ticket {
    pub fn used(&mut self, tokens: u64) {
        self.used = Some(tokens);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let used = self.used.unwrap_or(self.reserved);
        let now = self.quotas.now();
        self.quotas
            .book()
            .release(&self.tenant, self.reserved, used, now);
    }
}
