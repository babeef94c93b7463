//! Who is calling: a tenant's API key or the admin token, from the `Authorization` header.

use actix_web::http::header;
use std::sync::Arc;

use actix_web::{web, HttpRequest};
use subtle::ConstantTimeEq;

use super::state::AppState;
use crate::gateway::error::ApiError;
use crate::store::limits::LimitOverrides;
use crate::store::tenants::TenantError;

pub fn bearer(req: &HttpRequest) -> Option<&str> {
    // The scheme is case-insensitive (RFC 9110 §11.1): some clients send `bearer`.
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

pub fn store_error(e: TenantError) -> ApiError {
    match e {
        TenantError::BadName(_) => ApiError::invalid(Some("name"), e.to_string()),
        TenantError::Exists(_) => ApiError::conflict(e.to_string()),
        TenantError::NoTenant(_) | TenantError::NoKey { .. } => ApiError::not_found(e.to_string()),
        TenantError::Store(e) => e.into(),
    }
}

pub fn authenticate(state: &AppState, req: &HttpRequest) -> Result<String, ApiError> {
    let key = bearer(req).ok_or_else(|| {
        ApiError::unauthorized("missing API key: send `Authorization: Bearer <key>`")
    })?;
    state
        .tenants
        .authenticate(key)
        .map_err(store_error)?
        .ok_or_else(|| ApiError::unauthorized("invalid API key"))
}

/// [`authenticate`] on a blocking thread (a store may make a round trip; the HTTP threads
/// must not wait on it). The generation endpoints use it.
pub async fn authenticate_off_thread(
    state: &AppState,
    req: &HttpRequest,
) -> Result<String, ApiError> {
    let key = bearer(req)
        .ok_or_else(|| {
            ApiError::unauthorized("missing API key: send `Authorization: Bearer <key>`")
        })?
        .to_string();
    let tenants = Arc::clone(&state.tenants);
    web::block(move || {
        tenants
            .authenticate(&key)
            .map_err(store_error)?
            .ok_or_else(|| ApiError::unauthorized("invalid API key"))
    })
    .await
    .map_err(|e| ApiError::internal(format!("tenant lookup: {e}")))?
}

/// A tenant's limit overrides, read on a blocking thread.
pub async fn limits_off_thread(state: &AppState, tenant: &str) -> Result<LimitOverrides, ApiError> {
    let (tenants, tenant) = (Arc::clone(&state.tenants), tenant.to_string());
    web::block(move || tenants.limits(&tenant).map_err(store_error))
        .await
        .map_err(|e| ApiError::internal(format!("tenant limits: {e}")))?
}

/// The admin token: 401 without one or with a wrong one, 403 with a tenant's key.
pub fn authorize_admin(state: &AppState, req: &HttpRequest) -> Result<(), ApiError> {
    let Some(token) = state.admin_token.as_deref() else {
        return Err(ApiError::forbidden(
            "the admin API is disabled: no admin token is set",
        ));
    };
    let presented = bearer(req).ok_or_else(|| ApiError::unauthorized("missing admin token"))?;
    if bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
        return Ok(());
    }
    match state.tenants.authenticate(presented) {
        Ok(Some(_)) => Err(ApiError::forbidden("a tenant key cannot use the admin API")),
        _ => Err(ApiError::unauthorized("invalid admin token")),
    }
}
