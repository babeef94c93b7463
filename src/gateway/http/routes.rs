//! The route table: every endpoint and the handler that answers it.

use actix_web::{web, HttpRequest, HttpResponse};

use super::completions::{chat_completions, completions};
use super::{analytics, openapi, ops, policies_api, tenants_api};
use crate::gateway::error::ApiError;

pub fn routes(cfg: &mut web::ServiceConfig) {
    policies_api::routes(cfg);
    cfg.route("/v1/chat/completions", web::post().to(chat_completions))
        .route("/v1/completions", web::post().to(completions))
        .route(
            "/v1/responses",
            web::post().to(super::responses_api::responses),
        )
        .route(
            "/v1/responses/{id}",
            web::get().to(super::responses_api::stored::get_response),
        )
        .route(
            "/v1/responses/{id}",
            web::delete().to(super::responses_api::stored::delete_response),
        )
        .route("/v1/models", web::get().to(ops::models))
        .route("/health", web::get().to(ops::health))
        .route("/ready", web::get().to(ops::ready))
        .route("/metrics", web::get().to(ops::metrics_text))
        .route("/dashboard", web::get().to(ops::dashboard))
        .route("/dashboard/{file}", web::get().to(ops::dashboard_script))
        .route("/openapi.json", web::get().to(openapi::openapi_json))
        .route("/v1/analytics/routes", web::get().to(analytics::routes))
        .route("/v1/analytics/summary", web::get().to(analytics::summary));
    tenants_api::routes(cfg);
}

/// Unknown paths and methods, in OpenAI's error format.
pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.path()
    )))
}
