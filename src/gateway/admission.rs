//! Admission at the door: a tenant's limits (the configured defaults with its overrides)
//! checked against the [`Limiter`], and a ticket per admitted request that gives its place
//! back when it is dropped — when the answer is complete, the stream ends or the client goes
//! away — so no path can leak a slot.

use std::sync::Arc;

use crate::gateway::error::ApiError;
use crate::store::limiter::{Lease, Limiter};
use crate::store::limits::{LimitOverrides, Limits, QuotaError};

pub struct Quotas {
    limiter: Arc<dyn Limiter>,
    /// The configured defaults a tenant's overrides apply to.
    pub defaults: Limits,
}

impl Quotas {
    pub fn new(defaults: Limits, limiter: Arc<dyn Limiter>) -> Arc<Self> {
        Arc::new(Self { limiter, defaults })
    }

    /// Admit a request of `tokens` (prompt + max_tokens) for `tenant`.
    pub fn admit(
        self: &Arc<Self>,
        tenant: &str,
        overrides: &LimitOverrides,
        tokens: u64,
    ) -> Result<Ticket, ApiError> {
        let limits = self.defaults.with(overrides);
        let lease = self
            .limiter
            .admit(tenant, limits, tokens)
            .map_err(|e| refusal(tenant, e))?;
        Ok(Ticket {
            quotas: Arc::clone(self),
            tenant: tenant.to_string(),
            lease,
            reserved: tokens,
            used: None,
        })
    }

    pub fn active(&self, tenant: &str) -> u32 {
        self.limiter.active(tenant)
    }

    /// [`Quotas::admit`] off the async thread when the limiter makes a round trip.
    pub async fn admit_async(
        self: &Arc<Self>,
        tenant: &str,
        overrides: &LimitOverrides,
        tokens: u64,
    ) -> Result<Ticket, ApiError> {
        if !self.limiter.remote() {
            return self.admit(tenant, overrides, tokens);
        }
        let (quotas, tenant, overrides) = (Arc::clone(self), tenant.to_string(), overrides.clone());
        actix_web::web::block(move || quotas.admit(&tenant, &overrides, tokens))
            .await
            .map_err(|e| ApiError::internal(format!("admission: {e}")))?
    }
}

fn refusal(tenant: &str, e: QuotaError) -> ApiError {
    let reason = match e {
        QuotaError::Concurrency { .. } => "concurrency",
        QuotaError::TokensPerMinute { .. } => "tokens_per_minute",
        QuotaError::TooLarge { .. } => "too_large",
        QuotaError::Unavailable(_) => "unavailable",
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
        QuotaError::Unavailable(_) => ApiError::unavailable(e.to_string()),
    }
}

/// An admitted request's place. Without [`Ticket::used`] the whole reservation is charged
/// (a request cut short by its client pays for what it reserved); a request refused or
/// failed by the server is marked `used(0)` and costs nothing.
pub struct Ticket {
    quotas: Arc<Quotas>,
    tenant: String,
    lease: Lease,
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
        let limiter = Arc::clone(&self.quotas.limiter);
        let (tenant, lease, reserved) = (
            std::mem::take(&mut self.tenant),
            std::mem::take(&mut self.lease),
            self.reserved,
        );
        let release = move || limiter.release(&tenant, &lease, reserved, used);
        // A shared limiter makes a round trip: not on an HTTP worker's thread.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if self.quotas.limiter.remote() => drop(rt.spawn_blocking(release)),
            _ => release(),
        }
    }
}
