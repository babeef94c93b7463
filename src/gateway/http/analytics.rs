//! The analyst API: per-route histories from the store. A tenant's key sees its own tenant
//! only; the admin token sees every tenant.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;

use crate::clock::unix_now;
use crate::gateway::actors::history_writer::Flush;
use crate::gateway::error::ApiError;
use crate::gateway::http::{
    auth::{authenticate, authorize_admin},
    state::State,
};
use crate::store::history::{route_rows, rows_csv};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct RoutesQuery {
    tenant: Option<String>,
    /// Unix seconds, inclusive; default: 24 hours before `to`.
    from: Option<u64>,
    /// Unix seconds, exclusive; default: now.
    to: Option<u64>,
    /// minute, hour (default) or day.
    bucket: Option<String>,
}

/// `GET /v1/analytics/routes?tenant=&from=&to=&bucket=`: JSON, or CSV with `Accept: text/csv`.
/// Per-route history rows (tenant × class × time bucket). A tenant key sees its own tenant.
#[utoipa::path(get, path = "/v1/analytics/routes", tag = "analytics", params(RoutesQuery),
    responses((status = 200, description = "Rows as JSON, or CSV with `Accept: text/csv`",
        content((Object = "application/json"), (String = "text/csv")))),
    security(("api_key" = []), ("admin_token" = [])))]
pub async fn routes(req: HttpRequest, state: State) -> Result<HttpResponse, ApiError> {
    let q = web::Query::<RoutesQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::invalid(None, format!("invalid query: {e}")))?
        .into_inner();
    // Whose history this caller may read: the admin any tenant's, a tenant only its own.
    let tenant = if authorize_admin(&state, &req).await.is_ok() {
        q.tenant.clone()
    } else {
        let own = authenticate(&state, &req).await?;
        if q.tenant.as_ref().is_some_and(|t| *t != own) {
            return Err(ApiError::forbidden(
                "a tenant key reads its own tenant's analytics only",
            ));
        }
        Some(own)
    };
    let bucket_secs = match q.bucket.as_deref().unwrap_or("hour") {
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        other => {
            return Err(ApiError::invalid(
                Some("bucket"),
                format!("bucket must be minute, hour or day, not {other:?}"),
            ))
        }
    };
    let to = q.to.unwrap_or_else(|| unix_now() + 1);
    let from = q.from.unwrap_or(to.saturating_sub(86_400));
    if from >= to {
        return Err(ApiError::invalid(
            Some("from"),
            "`from` must be before `to`",
        ));
    }
    // Requests that finished a moment ago are in the writer's memory: write them first.
    state
        .services
        .history
        .send(Flush)
        .await
        .map_err(|e| ApiError::internal(format!("history writer: {e}")))??;
    let history = std::sync::Arc::clone(&state.history);
    let records = web::block(move || history.read(tenant.as_deref(), from, to))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    let rows = route_rows(&records, bucket_secs);
    let wants_csv = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/csv"));
    Ok(if wants_csv {
        HttpResponse::Ok()
            .content_type("text/csv; charset=utf-8")
            .body(rows_csv(&rows))
    } else {
        HttpResponse::Ok().json(json!({ "object": "list", "from": from, "to": to, "data": rows }))
    })
}
