//! The gateway's actors: a request actor per request, the planner that picks each request's
//! strategy and k, a strategy actor per strategy kind, the history writer and shadow checks.

pub mod history_writer;
pub mod planner;
pub mod request;
pub mod shadow_check;
pub mod strategy;
pub mod tenant_caches;
