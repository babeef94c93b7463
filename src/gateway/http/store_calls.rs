//! Store calls from handlers, made on actix's blocking threads: a store may make round trips
//! (a remote database), and the HTTP threads must not wait on them. Each turns the store's
//! error into OpenAI's format with the right status (an unreachable store: 503).

use std::sync::Arc;

use actix_web::web;

use super::state::AppState;
use crate::gateway::error::ApiError;
use crate::store::policies::PolicyStoreError;
use crate::store::tenants::TenantError;
use crate::store::{PolicyStore, ResponseStore, StoreError, TenantStore};

/// A tenant error as the API answers it.
pub fn tenant_error(e: TenantError) -> ApiError {
    match e {
        TenantError::BadName(_) => ApiError::invalid(Some("name"), e.to_string()),
        TenantError::Exists(_) => ApiError::conflict(e.to_string()),
        TenantError::NoTenant(_) | TenantError::NoKey { .. } => ApiError::not_found(e.to_string()),
        TenantError::Store(e) => e.into(),
    }
}

/// A policy-store error as the API answers it.
pub fn policy_error(e: PolicyStoreError) -> ApiError {
    match e {
        PolicyStoreError::Invalid(why) => ApiError::invalid(None, why.to_string()),
        PolicyStoreError::RouteExists { .. } => ApiError::conflict(e.to_string()),
        PolicyStoreError::Store(e) => e.into(),
    }
}

async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    web::block(call)
        .await
        .map_err(|e| ApiError::internal(format!("store call: {e}")))?
}

/// Run `call` on the tenant store, off the HTTP threads.
pub async fn tenants<T: Send + 'static>(
    state: &AppState,
    call: impl FnOnce(&dyn TenantStore) -> Result<T, TenantError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&state.tenants);
    blocking(move || call(store.as_ref()).map_err(tenant_error)).await
}

/// Run `call` on the response store, off the HTTP threads.
pub async fn responses<T: Send + 'static>(
    state: &AppState,
    call: impl FnOnce(&dyn ResponseStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&state.responses);
    blocking(move || call(store.as_ref()).map_err(ApiError::from)).await
}

/// Run `call` on the policy store, off the HTTP threads.
pub async fn policies<T: Send + 'static>(
    state: &AppState,
    call: impl FnOnce(&dyn PolicyStore) -> Result<T, PolicyStoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = Arc::clone(&state.policies);
    blocking(move || call(store.as_ref()).map_err(policy_error)).await
}
