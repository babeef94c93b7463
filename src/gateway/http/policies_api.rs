//! The admin API for routing policies: read, replace, delete and list the versions of the
//! policy of a route (tenant × class; tenant `*` is the default for every tenant). Every
//! write is validated (400 with the reason), versioned with who and when, and flushed before
//! the answer; the next request of the route runs under it.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;
use specgate_policies::{RoutePolicy, WorkloadClass, ANY_TENANT};

use crate::gateway::error::ApiError;
use crate::gateway::http::{auth::authorize_admin, body::read_body, state::State, store_calls};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/v1/policies", web::get().to(list))
        .route("/admin/v1/policies/{tenant}/{class}", web::get().to(get))
        .route("/admin/v1/policies/{tenant}/{class}", web::put().to(put))
        .route(
            "/admin/v1/policies/{tenant}/{class}",
            web::delete().to(delete),
        )
        .route(
            "/admin/v1/policies/{tenant}/{class}/history",
            web::get().to(history),
        );
}

/// The route named in the path: `*` or an existing tenant, and a known class.
async fn route(
    state: &State,
    path: &(String, String),
) -> Result<(String, WorkloadClass), ApiError> {
    let (tenant, class) = path;
    let class: WorkloadClass = class
        .parse()
        .map_err(|e: specgate_policies::UnknownWorkload| {
            ApiError::invalid(Some("class"), e.to_string())
        })?;
    let named = tenant.clone();
    if tenant != ANY_TENANT && !store_calls::tenants(state, move |s| s.exists(&named)).await? {
        return Err(ApiError::not_found(format!("no tenant {tenant:?}")));
    }
    Ok((tenant.clone(), class))
}

fn who(req: &HttpRequest) -> String {
    req.headers()
        .get("x-admin-user")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .unwrap_or("admin")
        .to_string()
}

/// Every stored routing policy.
#[utoipa::path(get, path = "/admin/v1/policies", tag = "policies",
    responses((status = 200, description = "Policies", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn list(req: HttpRequest, state: State) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let all = store_calls::policies(&state, |s| s.all()).await?;
    Ok(HttpResponse::Ok().json(json!({ "object": "list", "data": all })))
}

/// The policy in force for a route, and where it comes from.
#[utoipa::path(get, path = "/admin/v1/policies/{tenant}/{class}", tag = "policies", params(("tenant" = String, Path, description = "a tenant, or * for every tenant's default"), ("class" = String, Path, description = "code_edit, rag, creative, chat or structured")),
    responses((status = 200, description = "The effective policy", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn get(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let (tenant, class) = route(&state, &path).await?;
    let t = tenant.clone();
    let (stored, (policy, source)) = store_calls::policies(&state, move |s| {
        Ok((s.get(&t, class)?, s.effective(&t, class)))
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({
        "tenant": tenant,
        "class": class.name(),
        "source": source,
        "version": stored.as_ref().map(|s| s.version),
        "updated_by": stored.as_ref().map(|s| s.updated_by.clone()),
        "updated_at": stored.as_ref().map(|s| s.updated_at),
        "policy": policy,
    })))
}

/// Store a new version of a route's policy (flushed before the answer).
#[utoipa::path(put, path = "/admin/v1/policies/{tenant}/{class}", tag = "policies", params(("tenant" = String, Path, description = "a tenant, or * for every tenant's default"), ("class" = String, Path, description = "code_edit, rag, creative, chat or structured")),
    request_body(content = Object, description = "speculation, allowed, k_min, k_max, explore, shadow_rate"),
    responses((status = 200, description = "The stored version", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn put(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    payload: web::Payload,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let (tenant, class) = route(&state, &path).await?;
    let body = read_body(payload, state.body_limit).await?;
    let policy: RoutePolicy = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(None, format!("invalid policy: {e}")))?;
    let by = who(&req);
    let stored = store_calls::policies(&state, move |s| s.put(&tenant, class, policy, &by)).await?;
    Ok(HttpResponse::Ok().json(stored))
}

/// Drop a route's own policy; the default applies again.
#[utoipa::path(delete, path = "/admin/v1/policies/{tenant}/{class}", tag = "policies", params(("tenant" = String, Path, description = "a tenant, or * for every tenant's default"), ("class" = String, Path, description = "code_edit, rag, creative, chat or structured")),
    responses((status = 200, description = "Deleted", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn delete(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let (tenant, class) = route(&state, &path).await?;
    let (t, by) = (tenant.clone(), who(&req));
    if !store_calls::policies(&state, move |s| s.delete(&t, class, &by)).await? {
        return Err(ApiError::not_found(format!(
            "no policy of its own for {tenant}/{}",
            class.name()
        )));
    }
    Ok(
        HttpResponse::Ok()
            .json(json!({ "tenant": tenant, "class": class.name(), "deleted": true })),
    )
}

/// Every version of a route's policy.
#[utoipa::path(get, path = "/admin/v1/policies/{tenant}/{class}/history", tag = "policies", params(("tenant" = String, Path, description = "a tenant, or * for every tenant's default"), ("class" = String, Path, description = "code_edit, rag, creative, chat or structured")),
    responses((status = 200, description = "Versions, oldest first", body = Object)), security(("admin_token" = [])))]
pub(crate) async fn history(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    let (tenant, class) = route(&state, &path).await?;
    let versions = store_calls::policies(&state, move |s| s.history(&tenant, class)).await?;
    Ok(HttpResponse::Ok().json(json!({ "object": "list", "data": versions })))
}
