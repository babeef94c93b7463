//! Whom the engine serves next: per-tenant queues, weighted fair shares of the engine's work
//! and strict priority tiers (pure: no clock, no threads; the engine loop only asks).
//!
//! - [`share`]: a request's tenant, weight and tier (from the tenant's limits);
//! - [`fair`]: the tenants' virtual counters and each step's picks;
//! - [`drafts`]: the step's spare rows for drafts, by expected accepted tokens;
//! - [`anticipate`]: a step held a few milliseconds for a tenant expected back.

pub mod anticipate;
pub mod drafts;
pub mod fair;
pub mod share;

pub use fair::{Candidate, FairShare, Picks, Room};
pub use share::{Priority, Share, MAX_WEIGHT};

#[cfg(test)]
mod fair_tests;

/// How the engine chooses whom each step serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduling {
    /// Tenants' weighted fair shares within strict priority tiers.
    #[default]
    Fair,
    /// Arrival order, every tenant alike (what the engine did before; for comparison).
    Fcfs,
}
