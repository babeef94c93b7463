//! The operations and discovery endpoints: the served model, liveness, readiness, the
//! Prometheus text and the dashboard page.

use std::sync::atomic::Ordering;

use actix_web::{HttpRequest, HttpResponse};
use serde_json::json;

use crate::gateway::error::ApiError;
use crate::gateway::http::{
    auth::{authenticate, authorize_admin},
    state::State,
};

/// The served model.
#[utoipa::path(get, path = "/v1/models", tag = "generation",
    responses((status = 200, description = "A list holding the served model", body = Object)),
    security(("api_key" = [])))]
pub(crate) async fn models(req: HttpRequest, state: State) -> Result<HttpResponse, ApiError> {
    authenticate(&state, &req).await?;
    Ok(HttpResponse::Ok().json(json!({
        "object": "list",
        "data": [{
            "id": state.limits.model_id,
            "object": "model",
            "created": state.started,
            "owned_by": "specgate",
            "context_length": state.limits.context_length,
        }],
    })))
}

/// The analyst dashboard: one static page that draws /v1/analytics/summary and
/// /v1/analytics/routes with the key the user gives it (in the page, or as `#key=…`, which
/// browsers never send to a server).
#[utoipa::path(get, path = "/dashboard", tag = "analytics",
    responses((status = 200, description = "HTML", content_type = "text/html", body = String)))]
pub(crate) async fn dashboard() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(include_str!("assets/dashboard.html"))
}

/// The dashboard's scripts: plain SVG charts and the page's logic, no build step.
pub(crate) async fn dashboard_script(
    file: actix_web::web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let body = match file.as_str() {
        "charts.js" => include_str!("assets/dashboard/charts.js"),
        "app.js" => include_str!("assets/dashboard/app.js"),
        other => return Err(ApiError::not_found(format!("no dashboard file {other:?}"))),
    };
    Ok(HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .body(body))
}

/// The process is alive.
#[utoipa::path(get, path = "/health", tag = "operations",
    responses((status = 200, description = "Alive", body = Object)))]
pub(crate) async fn health() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// Ready when the model is loaded, the engine thread runs and has timed its steps, and the
/// server is not draining.
#[utoipa::path(get, path = "/ready", tag = "operations",
    responses((status = 200, description = "Ready", body = Object),
              (status = 503, description = "Not ready (engine down, warming up or draining)", body = Object)))]
pub(crate) async fn ready(state: State) -> HttpResponse {
    if state.draining.load(Ordering::SeqCst) {
        HttpResponse::ServiceUnavailable().json(json!({"status": "draining"}))
    } else if !state.services.engine.is_alive() {
        HttpResponse::ServiceUnavailable().json(json!({"status": "engine not running"}))
    } else if !state.services.engine.is_warm() {
        HttpResponse::ServiceUnavailable().json(json!({"status": "warming up"}))
    } else {
        HttpResponse::Ok().json(json!({"status": "ready"}))
    }
}

/// Prometheus text. Series are labelled by tenant, so only the admin token may read them.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text", content_type = "text/plain", body = String)),
    security(("admin_token" = [])))]
pub(crate) async fn metrics_text(req: HttpRequest, state: State) -> Result<HttpResponse, ApiError> {
    authorize_admin(&state, &req).await?;
    if let Some(bytes) = resident_memory_bytes() {
        metrics::gauge!("specgate_process_resident_memory_bytes").set(bytes as f64);
    }
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render()))
}

/// The process's resident set size (Linux), for the RSS gauge.
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
