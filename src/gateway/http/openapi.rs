//! `/openapi.json`: the API's OpenAPI 3.1 document, generated from the handlers'
//! annotations and the request and response types themselves (utoipa), so it cannot drift
//! from what the server does. Every operation also documents the OpenAI-format error body
//! for 4xx answers and 503 (engine down or draining).

use std::sync::OnceLock;

use actix_web::HttpResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use serde_json::{json, Value};

use crate::gateway::error::ErrorBody;
use crate::gateway::http::requests::RequestLimits;
use crate::gateway::http::state::State;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "specgate",
        description = "An OpenAI-compatible gateway with exact speculative decoding, for many tenants."
    ),
    paths(
        crate::gateway::http::completions::chat_completions,
        crate::gateway::http::completions::completions,
        crate::gateway::http::responses_api::responses,
        crate::gateway::http::ops::models,
        crate::gateway::http::ops::health,
        crate::gateway::http::ops::ready,
        crate::gateway::http::ops::metrics_text,
        crate::gateway::http::ops::dashboard,
        openapi_json,
        crate::gateway::http::analytics::routes,
        crate::gateway::http::analytics::summary,
        crate::gateway::http::tenants_api::create_tenant,
        crate::gateway::http::tenants_api::list_tenants,
        crate::gateway::http::tenants_api::add_key,
        crate::gateway::http::tenants_api::revoke_key,
        crate::gateway::http::tenants_api::get_limits,
        crate::gateway::http::tenants_api::put_limits,
        crate::gateway::http::policies_api::list,
        crate::gateway::http::policies_api::get,
        crate::gateway::http::policies_api::put,
        crate::gateway::http::policies_api::delete,
        crate::gateway::http::policies_api::history,
    ),
    components(schemas(ErrorBody)),
    modifiers(&SecurityAndErrors)
)]
pub struct ApiDoc;

struct SecurityAndErrors;

impl Modify for SecurityAndErrors {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let bearer = |what: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(what.to_string()))
                    .build(),
            )
        };
        components.add_security_scheme("api_key", bearer("a tenant's API key (sg-…)"));
        components.add_security_scheme("admin_token", bearer("the admin token"));
        let error = |what: &str| {
            ResponseBuilder::new()
                .description(what)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                            "ErrorBody",
                        ))))
                        .build(),
                )
                .build()
        };
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                let responses = &mut op.responses.responses;
                responses
                    .entry("4XX".into())
                    .or_insert_with(|| RefOr::T(error("Bad input, authentication, a limit (429 with Retry-After) or a missing resource")));
                responses.entry("503".into()).or_insert_with(|| {
                    RefOr::T(error(
                        "The engine is not running, or the server is draining",
                    ))
                });
            }
        }
    }
}

/// The document for this server: the generated one with the limits chosen at start-up.
pub fn document(limits: &RequestLimits) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    refuse_unknown_fields(&mut doc);
    for body in ["CommonFields", "ChatRequest", "CompletionRequest"] {
        let props = format!("/components/schemas/{body}/properties");
        if let Some(model) = doc.pointer_mut(&format!("{props}/model")) {
            model["enum"] = json!([limits.model_id]);
        }
        for field in ["max_tokens", "max_completion_tokens"] {
            if let Some(p) = doc.pointer_mut(&format!("{props}/{field}")) {
                p["maximum"] = json!(limits.max_tokens_limit);
            }
        }
    }
    doc
}

/// The request bodies are a shared part flattened into each endpoint's own (`allOf`); written
/// out as one object they can say what `parse_body` enforces: no other fields.
fn refuse_unknown_fields(doc: &mut Value) {
    let Some(schemas) = doc.pointer_mut("/components/schemas") else {
        return;
    };
    for name in ["ChatRequest", "CompletionRequest"] {
        let Some(parts) = schemas[name]["allOf"].as_array().cloned() else {
            continue;
        };
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for part in parts {
            let part = match part["$ref"].as_str() {
                Some(r) => schemas[r.trim_start_matches("#/components/schemas/")].clone(),
                None => part,
            };
            if let Some(p) = part["properties"].as_object() {
                properties.extend(p.clone());
            }
            if let Some(r) = part["required"].as_array() {
                required.extend(r.iter().cloned());
            }
        }
        schemas[name] = json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        });
    }
}

/// The document as JSON (built once).
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "This document", body = Object)))]
pub(crate) async fn openapi_json(state: State) -> HttpResponse {
    static DOC: OnceLock<String> = OnceLock::new();
    let doc = DOC.get_or_init(|| document(&state.limits).to_string());
    HttpResponse::Ok()
        .content_type("application/json")
        .body(doc.as_str())
}
