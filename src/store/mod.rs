//! The store: tenants and their keys, per-tenant limits, routing policies and their versions,
//! and per-route history.

pub mod history;
pub mod limits;
pub mod policies;
pub mod tenants;
