//! The gateway: an OpenAI-compatible HTTP API over one shared engine, for many tenants.
//! `http/` turns requests into messages and answers; `actors/` plan, draft and record;
//! neither computes what the pure crates and modules already decide.

pub mod actors;
pub mod admission;
pub mod error;
pub mod http;
pub mod priors;
pub mod server;

pub use server::{serve, ServeConfig, ServeError};
