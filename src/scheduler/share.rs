//! Who a request is served for: its tenant, the tenant's weight and its priority tier, set by
//! admins in the tenant's limits (never by a request field).

use serde::{Deserialize, Serialize};

/// A tenant's priority tier. Tiers are strict: a waiting request of a higher tier runs before
/// any of a lower tier, and while it waits for its first token the lower tiers pause.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Throughput work (evaluations, backfills): runs on what the others leave.
    Batch,
    #[default]
    Standard,
    /// A person is waiting on every token.
    Interactive,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Standard, Priority::Batch];

    pub fn name(self) -> &'static str {
        match self {
            Priority::Batch => "batch",
            Priority::Standard => "standard",
            Priority::Interactive => "interactive",
        }
    }
}

/// The most weight an admin may give a tenant: shares are ratios, and a bound keeps one
/// tenant's counter from standing still against everyone else's.
pub const MAX_WEIGHT: u32 = 1000;

/// Whose share of the engine a request draws on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub tenant: String,
    /// Relative share against the other tenants of its tier (1..=MAX_WEIGHT).
    pub weight: u32,
    pub priority: Priority,
}

impl Share {
    /// A tenant's share with the defaults: weight 1, standard tier.
    pub fn standard(tenant: impl Into<String>) -> Share {
        Share {
            tenant: tenant.into(),
            weight: 1,
            priority: Priority::Standard,
        }
    }
}
