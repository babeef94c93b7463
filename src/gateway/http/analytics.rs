//! The analyst API: per-route histories from the store, over time and summed over a range. A
//! tenant's key sees its own tenant only; the admin token sees every tenant.

use std::collections::{BTreeSet, HashMap};

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;
use specgate_policies::ANY_TENANT;

use crate::clock::unix_now;
use crate::gateway::actors::history_writer::Flush;
use crate::gateway::error::ApiError;
use crate::gateway::http::{
    auth::{authenticate, authorize_admin},
    state::State,
    store_calls,
};
use crate::store::history::{
    route_rows, rows_csv, summary_csv, summary_rows, HistoryKey, HistoryRecord,
};
use crate::store::policy_changes::{route_changes, RouteChange};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct RoutesQuery {
    tenant: Option<String>,
    /// Unix seconds, inclusive; default: 24 hours before `to`.
    from: Option<u64>,
    /// Unix seconds, exclusive; default: now.
    to: Option<u64>,
    /// minute, hour (default) or day (`/v1/analytics/routes` only).
    bucket: Option<String>,
    /// json (default) or csv; `Accept: text/csv` asks for CSV too.
    format: Option<String>,
}

/// Whose history, over which range, as what: read from the query and the caller's credential.
struct Reading {
    admin: bool,
    tenant: Option<String>,
    from: u64,
    to: u64,
    bucket: Option<String>,
    csv: bool,
}

async fn reading(req: &HttpRequest, state: &State) -> Result<Reading, ApiError> {
    let q = web::Query::<RoutesQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::invalid(None, format!("invalid query: {e}")))?
        .into_inner();
    // Whose history this caller may read: the admin any tenant's, a tenant only its own.
    let admin = authorize_admin(state, req).await.is_ok();
    let tenant = if admin {
        q.tenant.clone()
    } else {
        let own = authenticate(state, req).await?;
        if q.tenant.as_ref().is_some_and(|t| *t != own) {
            return Err(ApiError::forbidden(
                "a tenant key reads its own tenant's analytics only",
            ));
        }
        Some(own)
    };
    let to = q.to.unwrap_or_else(|| unix_now() + 1);
    let from = q.from.unwrap_or(to.saturating_sub(86_400));
    if from >= to {
        return Err(ApiError::invalid(
            Some("from"),
            "`from` must be before `to`",
        ));
    }
    let accepts_csv = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/csv"));
    let csv = match q.format.as_deref() {
        None => accepts_csv,
        Some("json") => false,
        Some("csv") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                Some("format"),
                format!("format must be json or csv, not {other:?}"),
            ))
        }
    };
    Ok(Reading {
        admin,
        tenant,
        from,
        to,
        bucket: q.bucket,
        csv,
    })
}

/// The records of the reading's range, the writer's pending ones written first.
async fn records(state: &State, r: &Reading) -> Result<Vec<(HistoryKey, HistoryRecord)>, ApiError> {
    // Requests that finished a moment ago are in the writer's memory: write them first.
    state
        .services
        .history
        .send(Flush)
        .await
        .map_err(|e| ApiError::internal(format!("history writer: {e}")))??;
    let history = std::sync::Arc::clone(&state.history);
    let (tenant, from, to) = (r.tenant.clone(), r.from, r.to);
    web::block(move || history.read(tenant.as_deref(), from, to))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(ApiError::from)
}

fn csv_body(body: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .body(body)
}

/// `GET /v1/analytics/routes?tenant=&from=&to=&bucket=`: JSON, or CSV with `Accept: text/csv`.
/// Per-route history rows (tenant × class × time bucket). A tenant key sees its own tenant.
#[utoipa::path(get, path = "/v1/analytics/routes", tag = "analytics", params(RoutesQuery),
    responses((status = 200, description = "Rows as JSON, or CSV with `Accept: text/csv` or `format=csv`",
        content((Object = "application/json"), (String = "text/csv")))),
    security(("api_key" = []), ("admin_token" = [])))]
pub async fn routes(req: HttpRequest, state: State) -> Result<HttpResponse, ApiError> {
    let r = reading(&req, &state).await?;
    let bucket_secs = match r.bucket.as_deref().unwrap_or("hour") {
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
    let rows = route_rows(&records(&state, &r).await?, bucket_secs);
    Ok(if r.csv {
        csv_body(rows_csv(&rows))
    } else {
        HttpResponse::Ok()
            .json(json!({ "object": "list", "from": r.from, "to": r.to, "data": rows }))
    })
}

/// `GET /v1/analytics/summary?tenant=&from=&to=`: per tenant and per route over the range,
/// with the speed-up speculation gave and the policy changes made in it. JSON or CSV.
#[utoipa::path(get, path = "/v1/analytics/summary", tag = "analytics", params(RoutesQuery),
    responses((status = 200, description = "Summary rows and policy changes as JSON, or the rows as CSV with `Accept: text/csv` or `format=csv`",
        content((Object = "application/json"), (String = "text/csv")))),
    security(("api_key" = []), ("admin_token" = [])))]
pub async fn summary(req: HttpRequest, state: State) -> Result<HttpResponse, ApiError> {
    let r = reading(&req, &state).await?;
    if r.bucket.is_some() {
        return Err(ApiError::invalid(
            Some("bucket"),
            "a summary covers the whole range: bucket is for /v1/analytics/routes",
        ));
    }
    let records = records(&state, &r).await?;
    let rows = summary_rows(&records);
    if r.csv {
        return Ok(csv_body(summary_csv(&rows)));
    }
    let changes = policy_changes(&state, &r, &records).await?;
    Ok(HttpResponse::Ok().json(json!({
        "object": "analytics.summary", "from": r.from, "to": r.to,
        "data": rows, "policy_changes": changes,
    })))
}

/// Policy versions written in the range on the routes the records show: each route's own,
/// and the default's where the route followed it (see [`route_changes`]).
async fn policy_changes(
    state: &State,
    r: &Reading,
    records: &[(HistoryKey, HistoryRecord)],
) -> Result<Vec<RouteChange>, ApiError> {
    let routes: Vec<_> = records
        .iter()
        .map(|(k, _)| (k.tenant.clone(), k.class))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let (range, admin) = ((r.from, r.to), r.admin);
    store_calls::policies(state, move |store| {
        let mut own = HashMap::new();
        let mut defaults = HashMap::new();
        for (tenant, class) in &routes {
            own.insert((tenant.clone(), *class), store.history(tenant, *class)?);
            if !defaults.contains_key(class) {
                defaults.insert(*class, store.history(ANY_TENANT, *class)?);
            }
        }
        Ok(route_changes(&routes, &own, &defaults, range, admin))
    })
    .await
}
