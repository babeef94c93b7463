//! Responses kept in the store (`store`, default true as OpenAI's): what a continuation by
//! `previous_response_id` replays, and `GET` / `DELETE /v1/responses/{id}`. Every call names
//! the caller's tenant, so another tenant's response reads as not found.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Map, Value};

use super::input::input_messages;
use super::output::as_messages;
use crate::clock::unix_now;
use crate::gateway::error::ApiError;
use crate::gateway::http::auth::authenticate;
use crate::gateway::http::state::{AppState, State};
use crate::gateway::http::store_calls;
use crate::store::responses::{StoredResponse, RESPONSE_TTL_SECS};

fn not_found(id: &str, param: Option<&str>) -> ApiError {
    let mut e = ApiError::not_found(format!("no response with id {id:?}"));
    e.param = param.map(str::to_string);
    e
}

/// The conversation `previous_response_id` names (empty without one).
pub async fn earlier_messages(
    state: &AppState,
    tenant: &str,
    body: &Map<String, Value>,
) -> Result<Vec<Value>, ApiError> {
    let id = match body.get("previous_response_id") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(id)) => id.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                Some("previous_response_id"),
                "`previous_response_id` must be a string",
            ))
        }
    };
    find(state, tenant, &id)
        .await?
        .map(|r| r.messages)
        .ok_or_else(|| not_found(&id, Some("previous_response_id")))
}

/// The tenant's stored response `id`, unless it expired.
async fn find(
    state: &AppState,
    tenant: &str,
    id: &str,
) -> Result<Option<StoredResponse>, ApiError> {
    let (t, i) = (tenant.to_string(), id.to_string());
    store_calls::responses(state, move |s| s.get(&t, &i, unix_now())).await
}

/// Whether the request asks for its response to be kept.
pub fn wanted(body: &Map<String, Value>) -> Result<bool, ApiError> {
    match body.get("store") {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(
            Some("store"),
            "`store` must be a boolean",
        )),
    }
}

/// Keep a finished response: the conversation through its output, and the object itself.
pub async fn keep(
    state: &AppState,
    tenant: &str,
    body: &Map<String, Value>,
    earlier: Vec<Value>,
    response: &Value,
) -> Result<(), ApiError> {
    let mut messages = earlier;
    messages.extend(input_messages(body.get("input"))?);
    messages.extend(as_messages(
        response["output"].as_array().map_or(&[][..], Vec::as_slice),
    ));
    let created_at = unix_now();
    let record = StoredResponse {
        id: response["id"].as_str().unwrap_or_default().to_string(),
        tenant: tenant.to_string(),
        created_at,
        expires_at: created_at + RESPONSE_TTL_SECS,
        messages,
        response: response.clone(),
    };
    store_calls::responses(state, move |s| s.put(&record)).await
}

/// `GET /v1/responses/{id}`: the caller's stored response object.
pub async fn get_response(
    req: HttpRequest,
    id: web::Path<String>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    let tenant = authenticate(&state, &req).await?;
    let r = find(&state, &tenant, &id)
        .await?
        .ok_or_else(|| not_found(&id, None))?;
    Ok(HttpResponse::Ok().json(r.response))
}

/// `DELETE /v1/responses/{id}`: forget the caller's stored response.
pub async fn delete_response(
    req: HttpRequest,
    id: web::Path<String>,
    state: State,
) -> Result<HttpResponse, ApiError> {
    let tenant = authenticate(&state, &req).await?;
    let id = id.into_inner();
    let i = id.clone();
    if !store_calls::responses(&state, move |s| s.delete(&tenant, &i)).await? {
        return Err(not_found(&id, None));
    }
    Ok(HttpResponse::Ok().json(json!({"id": id, "object": "response.deleted", "deleted": true})))
}
