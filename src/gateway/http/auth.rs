//! Who is calling: a tenant's API key or the admin token, from the `Authorization` header.

use actix_web::http::header;
use actix_web::HttpRequest;
use subtle::ConstantTimeEq;

use super::state::AppState;
use super::store_calls;
use crate::gateway::error::ApiError;
use crate::store::limits::LimitOverrides;

pub fn bearer(req: &HttpRequest) -> Option<&str> {
    // The scheme is case-insensitive (RFC 9110 §11.1): some clients send `bearer`.
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// The tenant whose live key the request carries (401 without one).
pub async fn authenticate(state: &AppState, req: &HttpRequest) -> Result<String, ApiError> {
    let key = bearer(req)
        .ok_or_else(|| {
            ApiError::unauthorized("missing API key: send `Authorization: Bearer <key>`")
        })?
        .to_string();
    store_calls::tenants(state, move |t| t.authenticate(&key))
        .await?
        .ok_or_else(|| ApiError::unauthorized("invalid API key"))
}

/// A tenant's limit overrides.
pub async fn limits(state: &AppState, tenant: &str) -> Result<LimitOverrides, ApiError> {
    let tenant = tenant.to_string();
    store_calls::tenants(state, move |t| t.limits(&tenant)).await
}

/// The admin token: 401 without one or with a wrong one, 403 with a tenant's key.
pub async fn authorize_admin(state: &AppState, req: &HttpRequest) -> Result<(), ApiError> {
    let Some(token) = state.admin_token.as_deref() else {
        return Err(ApiError::forbidden(
            "the admin API is disabled: no admin token is set",
        ));
    };
    let presented = bearer(req).ok_or_else(|| ApiError::unauthorized("missing admin token"))?;
    if bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
        return Ok(());
    }
    let presented = presented.to_string();
    match store_calls::tenants(state, move |t| t.authenticate(&presented)).await {
        Ok(Some(_)) => Err(ApiError::forbidden("a tenant key cannot use the admin API")),
        _ => Err(ApiError::unauthorized("invalid admin token")),
    }
}
