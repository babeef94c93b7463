//! The gateway: an OpenAI-compatible HTTP API over one shared engine, for many tenants.

pub mod actors;
pub mod analytics;
pub mod api;
pub mod error;
pub mod handlers;
pub mod history_writer;
pub mod logprobs_json;
pub mod openapi;
pub mod ops;
pub mod policies_api;
pub mod prepare;
pub mod quotas;
pub mod responses;
pub mod router;
pub mod server;
pub mod shadow_check;
pub mod strategy_actor;
pub mod tenant_caches;
pub mod tenants;
pub mod tenants_api;
pub mod validate;

pub use server::{serve, ServeConfig, ServeError};
