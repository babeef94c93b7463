//! Stored responses (the Responses API's `store`): each kept per tenant until it expires, so
//! a client continues a conversation by `previous_response_id` on any replica without
//! resending it. The record and the [`ResponseStore`] seam; the backends are in `sled/` and
//! `postgres/`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;

/// How long a stored response is kept: 30 days, as OpenAI keeps them.
pub const RESPONSE_TTL_SECS: u64 = 30 * 24 * 3600;

/// Most expired responses a write removes on its way (bounded work per write).
pub const SWEEP_PER_WRITE: usize = 32;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredResponse {
    pub id: String,
    pub tenant: String,
    pub created_at: u64,
    pub expires_at: u64,
    /// The conversation through this response's output, as chat messages. Instructions
    /// are not carried: a continuation gives its own, as OpenAI's does.
    pub messages: Vec<Value>,
    /// The response object as it was answered.
    pub response: Value,
}

/// Responses kept per tenant. A tenant reads only its own: every call names the tenant,
/// and another tenant's id reads as absent.
pub trait ResponseStore: Send + Sync {
    /// Keep (or replace) a response; expired ones may be removed on the way.
    fn put(&self, r: &StoredResponse) -> Result<(), StoreError>;
    /// The tenant's response `id`, unless it has expired by `now`.
    fn get(&self, tenant: &str, id: &str, now: u64) -> Result<Option<StoredResponse>, StoreError>;
    /// Remove the tenant's response `id`; whether there was one.
    fn delete(&self, tenant: &str, id: &str) -> Result<bool, StoreError>;
}
