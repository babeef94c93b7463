//! specgate: a multi-tenant LLM gateway with exact speculative decoding.
//!
//! The folders read as the path of a request:
//! - [`gateway`]: HTTP (actix-web) and the actors — request, planner, strategy, history writer;
//! - [`engine`]: the one thread that owns the target and batches every live sequence;
//! - [`drafting`]: building a strategy's drafter (the registry), model drafters, the guard;
//! - [`model`]: the target behind the device seam ([`model::TargetBackend`]), tokenizer, chat;
//! - [`store`]: tenants, keys, policies and history behind the store seam;
//! - [`heads`]: Medusa heads — serving, training, calibration;
//! - [`tools`]: benchmarks, the load generator, the soak, policy files.
//!
//! The pure speculative core lives in `specgate-strategies`, the policy engine in
//! `specgate-policies`, compute kernels in `specgate-kernels`.

pub mod clock;
pub mod constraint;
pub mod drafting;
pub mod engine;
pub mod faults;
pub mod gateway;
pub mod heads;
pub mod model;
pub mod prefix;
pub mod scheduler;
pub mod store;
pub mod telemetry;
pub mod tools;

pub use specgate_strategies::{SamplingParams, TokenId};
