//! The admin API for tenants and their keys (admin token): create a tenant (its first key is
//! shown once), list tenants and key ids, add a key, revoke one, read and set the tenant's
//! request limits.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;

use crate::gateway::error::ApiError;
use crate::gateway::http::{auth::authorize_admin, body::read_body, state::State, store_calls};
use crate::store::limits::LimitOverrides;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/v1/tenants", web::post().to(create_tenant))
        .route("/admin/v1/tenants", web::get().to(list_tenants))
        .route("/admin/v1/tenants/{name}/keys", web::post().to(add_key))
        .route(
            "/admin/v1/tenants/{name}/keys/{id}",
            web::delete().to(revoke_key),
        )
        .route("/admin/v1/tenants/{name}/limits", web::get().to(get_limits))
        .route("/admin/v1/tenants/{name}/limits", web::put().to(put_limits));
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTenant {
    name: String,
}

/// Create a tenant; its first key is in the answer (the only time it is shown).
#[utoipa::path(post, path = "/admin/v1/tenants", tag = "admin", request_body = NewTenant,
    responses((status = 201, description = "The tenant and its first key", body = Object)),
    security(("admin_token" = [])))]
pub(crate) async fn create_tenant(
    req: HttpRequest,
    payload: web::Payload,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let body = read_body(payload, state.body_limit).await?;
    let t: NewTenant = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(None, format!("invalid request body: {e}")))?;
    let issued = store_calls::tenants(&state, move |s| s.create(&t.name)).await?;
    Ok(HttpResponse::Created().json(issued))
}

/// Every tenant, its limits and its key ids (never a secret).
#[utoipa::path(get, path = "/admin/v1/tenants", tag = "admin",
    responses((status = 200, description = "Tenants", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn list_tenants(req: HttpRequest, state: State) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let tenants = store_calls::tenants(&state, |s| s.list()).await?;
    Ok(HttpResponse::Ok().json(json!({ "object": "list", "data": tenants })))
}

/// Issue another key for a tenant.
#[utoipa::path(post, path = "/admin/v1/tenants/{name}/keys", tag = "admin",
    params(("name" = String, Path)),
    responses((status = 201, description = "The new key", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn add_key(
    req: HttpRequest,
    path: web::Path<String>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let name = path.into_inner();
    let issued = store_calls::tenants(&state, move |s| s.add_key(&name)).await?;
    Ok(HttpResponse::Created().json(issued))
}

/// Revoke a key: refused from the next request on.
#[utoipa::path(delete, path = "/admin/v1/tenants/{name}/keys/{id}", tag = "admin",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 200, description = "Revoked", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn revoke_key(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let (name, id) = path.into_inner();
    let (n, i) = (name.clone(), id.clone());
    store_calls::tenants(&state, move |s| s.revoke(&n, &i)).await?;
    Ok(HttpResponse::Ok().json(json!({ "tenant": name, "key_id": id, "revoked": true })))
}

/// The tenant's overrides and the limits in force (defaults filled in; 0 = unlimited).
fn limits_body(state: &State, name: &str, o: &LimitOverrides) -> serde_json::Value {
    let share = o.share(name);
    let mut effective = json!(state.quotas.defaults.with(o));
    effective["weight"] = json!(share.weight);
    effective["priority"] = json!(share.priority);
    json!({ "tenant": name, "overrides": o, "effective": effective })
}

/// A tenant's limit overrides and the limits in force.
#[utoipa::path(get, path = "/admin/v1/tenants/{name}/limits", tag = "admin",
    params(("name" = String, Path)),
    responses((status = 200, description = "Overrides and effective limits", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn get_limits(
    req: HttpRequest,
    path: web::Path<String>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let name = path.into_inner();
    let o = crate::gateway::http::auth::limits(&state, &name).await?;
    Ok(HttpResponse::Ok().json(limits_body(&state, &name, &o)))
}

/// Replace a tenant's limit overrides: `{"max_concurrent_requests": 4, "tokens_per_minute":
/// 20000, "cache_scope": "acme-apps", "weight": 3, "priority": "interactive"}`; a field left
/// out falls back to the configured default (no `cache_scope`: the tenant's own prefix-cache
/// scope; weight 1; priority `standard`).
#[utoipa::path(put, path = "/admin/v1/tenants/{name}/limits", tag = "admin",
    params(("name" = String, Path)), request_body = crate::store::limits::LimitOverrides,
    responses((status = 200, description = "Overrides and effective limits", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn put_limits(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let body = read_body(payload, state.body_limit).await?;
    let raw: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(None, format!("invalid request body: {e}")))?;
    // The tier is named in the error, with the tiers there are.
    if let Some(p) = raw.get("priority").filter(|p| !p.is_null()) {
        if serde_json::from_value::<crate::scheduler::Priority>(p.clone()).is_err() {
            return Err(ApiError::invalid(
                Some("priority"),
                format!("priority is one of \"interactive\", \"standard\", \"batch\"; got {p}"),
            ));
        }
    }
    let o: LimitOverrides = serde_json::from_value(raw)
        .map_err(|e| ApiError::invalid(None, format!("invalid request body: {e}")))?;
    if let Some(scope) = &o.cache_scope {
        if scope.is_empty() || scope.len() > 128 {
            return Err(ApiError::invalid(
                Some("cache_scope"),
                "a cache scope is a name of 1 to 128 bytes",
            ));
        }
    }
    if let Some(w) = o.weight {
        if !(1..=crate::scheduler::MAX_WEIGHT).contains(&w) {
            return Err(ApiError::invalid(
                Some("weight"),
                format!(
                    "a weight is a whole number from 1 to {}; got {w}",
                    crate::scheduler::MAX_WEIGHT
                ),
            ));
        }
    }
    let name = path.into_inner();
    let (n, stored) = (name.clone(), o.clone());
    store_calls::tenants(&state, move |s| s.set_limits(&n, stored)).await?;
    Ok(HttpResponse::Ok().json(limits_body(&state, &name, &o)))
}
