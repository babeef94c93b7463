//! Who is calling: a tenant's API key or the admin token, from the `Authorization` header.

use actix_web::http::header;
use actix_web::HttpRequest;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;
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
        TenantError::Store(_) | TenantError::Corrupt(_) => ApiError::internal(e.to_string()),
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
