//! The HTTP surface: OpenAI's endpoints, the admin and analyst APIs, operations endpoints.
//! Handlers authenticate, validate and hand work to the actors; they compute nothing else.

pub mod analytics;
pub mod auth;
pub mod body;
pub mod call_responses;
pub mod choices;
pub mod completions;
pub mod logprobs_json;
pub mod openapi;
pub mod ops;
pub mod penalties;
pub mod policies_api;
pub mod prepare;
mod replay;
pub mod requests;
pub mod responses;
pub mod responses_api;
pub mod routes;
pub mod state;
pub mod store_calls;
pub mod structured;
pub mod tenants_api;
pub mod validate;
