//! HTTP handlers: authenticate, validate, hand the request to a [`RequestActor`], and shape
//! what comes back into OpenAI's bodies or server-sent events.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::StreamExt;
use metrics_exporter_prometheus::PrometheusHandle;
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;

use super::actors::{Outgoing, RequestActor, Services};
use super::api::{
    parse_body, ChatRequest, CompletionRequest, GenerationRequest, RequestBody, RequestLimits,
};
use super::error::ApiError;
use super::logprobs_json::Renderer;
use super::ops;
use super::prepare::prepare;
use super::quotas::{Quotas, Ticket};
use super::responses::{self, Endpoint, ResponseMeta};
use super::tenants::{TenantError, TenantStore};
use crate::clock::unix_now;
use crate::logprobs::TokenLogprob;
use crate::policy_store::PolicyStore;
use crate::tokenizer::Tokenizer;

/// Everything the handlers share.
pub struct AppState {
    pub services: Services,
    pub tenants: TenantStore,
    pub policies: PolicyStore,
    pub history: sled::Tree,
    pub tokenizer: Arc<Tokenizer>,
    pub limits: RequestLimits,
    pub admin_token: Option<String>,
    pub metrics: PrometheusHandle,
    pub body_limit: usize,
    pub quotas: Arc<Quotas>,
    /// Set on SIGTERM: not ready, new generations refused while in-flight ones finish.
    pub draining: Arc<AtomicBool>,
    pub started: u64,
}

pub type State = web::Data<AppState>;

pub fn routes(cfg: &mut web::ServiceConfig) {
    super::policies_api::routes(cfg);
    cfg.route("/v1/chat/completions", web::post().to(chat_completions))
        .route("/v1/completions", web::post().to(completions))
        .route("/v1/models", web::get().to(ops::models))
        .route("/health", web::get().to(ops::health))
        .route("/ready", web::get().to(ops::ready))
        .route("/metrics", web::get().to(ops::metrics_text))
        .route("/dashboard", web::get().to(ops::dashboard))
        .route("/openapi.json", web::get().to(super::openapi::openapi_json))
        .route(
            "/v1/analytics/routes",
            web::get().to(super::analytics::routes),
        );
    super::tenants_api::routes(cfg);
}

/// Unknown paths and methods, in OpenAI's error format.
pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.path()
    )))
}

pub(super) fn bearer(req: &HttpRequest) -> Option<&str> {
    // The scheme is case-insensitive (RFC 9110 §11.1): some clients send `bearer`.
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

pub(super) fn store_error(e: TenantError) -> ApiError {
    match e {
        TenantError::BadName(_) => ApiError::invalid(Some("name"), e.to_string()),
        TenantError::Exists(_) => ApiError::conflict(e.to_string()),
        TenantError::NoTenant(_) | TenantError::NoKey { .. } => ApiError::not_found(e.to_string()),
        TenantError::Store(_) | TenantError::Corrupt(_) => ApiError::internal(e.to_string()),
    }
}

pub(super) fn authenticate(state: &AppState, req: &HttpRequest) -> Result<String, ApiError> {
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
pub(super) fn authorize_admin(state: &AppState, req: &HttpRequest) -> Result<(), ApiError> {
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

/// The body, refused with 413 past the limit (before any of it is parsed).
pub(super) async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid(None, format!("reading the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::payload_too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

fn workload_header(req: &HttpRequest) -> Option<&str> {
    req.headers().get("x-workload")?.to_str().ok()
}

/// Turns an endpoint's body into the one request shape both endpoints run.
type Validate<T> = fn(T, &RequestLimits, Option<&str>) -> Result<GenerationRequest, ApiError>;

/// Authenticate, read, parse and validate the body, then run it.
async fn generation<T: RequestBody>(
    req: HttpRequest,
    payload: web::Payload,
    state: State,
    endpoint: Endpoint,
    validate: Validate<T>,
) -> Result<HttpResponse, ApiError> {
    let tenant = authenticate(&state, &req)?;
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    let body = read_body(payload, state.body_limit).await?;
    let request = validate(
        parse_body::<T>(&body)?,
        &state.limits,
        workload_header(&req),
    )?;
    respond(&state, tenant, request, endpoint).await
}

/// Chat completion (OpenAI's), streamed as server-sent events when `stream` is true.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "generation",
    request_body = super::api::ChatRequest,
    responses((status = 200, description = "The answer, or its events when streamed",
        content((super::responses::ChatCompletion = "application/json"),
                (super::responses::SseEvent = "text/event-stream")))),
    security(("api_key" = [])))]
pub(crate) async fn chat_completions(
    req: HttpRequest,
    payload: web::Payload,
    state: State,
) -> Result<HttpResponse, ApiError> {
    generation(req, payload, state, Endpoint::Chat, ChatRequest::validate).await
}

/// Text completion (OpenAI's legacy endpoint), streamed when `stream` is true.
#[utoipa::path(post, path = "/v1/completions", tag = "generation",
    request_body = super::api::CompletionRequest,
    responses((status = 200, description = "The answer, or its events when streamed",
        content((super::responses::TextCompletion = "application/json"),
                (super::responses::SseEvent = "text/event-stream")))),
    security(("api_key" = [])))]
pub(crate) async fn completions(
    req: HttpRequest,
    payload: web::Payload,
    state: State,
) -> Result<HttpResponse, ApiError> {
    generation(
        req,
        payload,
        state,
        Endpoint::Completion,
        CompletionRequest::validate,
    )
    .await
}

async fn respond(
    state: &AppState,
    tenant: String,
    request: GenerationRequest,
    endpoint: Endpoint,
) -> Result<HttpResponse, ApiError> {
    let job = prepare(&state.tokenizer, &state.limits, tenant, &request)?;
    let overrides = state
        .tenants
        .limits(&job.route.tenant)
        .map_err(store_error)?;
    let mut ticket = state.quotas.admit(
        &job.route.tenant,
        &overrides,
        (job.prompt.len() + job.params.max_tokens) as u64,
    )?;
    // Random, not a counter: a sequential id would tell every tenant the server's traffic.
    let id: u128 = rand::random();
    let meta = ResponseMeta {
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-{id:032x}"),
            Endpoint::Completion => format!("cmpl-{id:032x}"),
        },
        created: unix_now(),
        model: state.limits.model_id.clone(),
        endpoint,
    };
    let (admitted, out) = RequestActor::launch(job, &state.services);
    let admission = admitted.await.unwrap_or_else(|_| {
        Err(ApiError::internal(
            "the request actor stopped before admitting",
        ))
    });
    if let Err(e) = admission {
        // Refused before any token was computed: the tenant's quota pays nothing for it.
        ticket.used(0);
        return Err(e);
    }
    let logprobs = request
        .logprobs
        .map(|_| Renderer::new(Arc::clone(&state.tokenizer), endpoint));
    if request.stream {
        let events = sse_stream(out, meta, request.include_usage, ticket, logprobs);
        return Ok(HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .streaming(events));
    }
    collect(out, &meta, ticket, logprobs).await
}

/// Wait for the whole answer.
async fn collect(
    mut out: mpsc::UnboundedReceiver<Outgoing>,
    meta: &ResponseMeta,
    mut ticket: Ticket,
    mut logprobs: Option<Renderer>,
) -> Result<HttpResponse, ApiError> {
    let (mut text, mut entries) = (String::new(), Vec::new());
    while let Some(item) = out.recv().await {
        match item {
            Outgoing::Text(t, lp) => {
                text += &t;
                entries.extend(lp);
            }
            Outgoing::Done(summary) => {
                ticket.used((summary.prompt_tokens + summary.completion_tokens) as u64);
                let lp = logprobs.as_mut().map(|r| r.render(&entries));
                let body = responses::with_logprobs(responses::full(meta, &text, &summary), lp);
                return Ok(HttpResponse::Ok().json(body));
            }
            Outgoing::Failed(why) => {
                // The server failed it: the tenant's quota is not charged.
                ticket.used(0);
                return Err(ApiError::internal(why));
            }
        }
    }
    Err(ApiError::internal("the request ended without an answer"))
}

/// The answer as server-sent events, ending with `data: [DONE]`. Dropping the stream (the
/// client went away) closes `out`, and the request actor cancels the sequence.
fn sse_stream(
    out: mpsc::UnboundedReceiver<Outgoing>,
    meta: ResponseMeta,
    include_usage: bool,
    ticket: Ticket,
    logprobs: Option<Renderer>,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct S {
        out: mpsc::UnboundedReceiver<Outgoing>,
        meta: ResponseMeta,
        first: bool,
        done: bool,
        // Held as long as the stream: dropped at its end or when the client goes away.
        ticket: Ticket,
        logprobs: Option<Renderer>,
        // Log-probabilities not sent yet: the engine sends a token's entry with its text,
        // so these are only entries on a text-less event (tokens a stop string cut, or
        // whose text is empty); they go with the next chunk that carries text, or the
        // finish chunk.
        held: Vec<TokenLogprob>,
    }
    impl S {
        /// `chunk` with the held log-probabilities, if any (asked for and not yet sent).
        fn with_held(&mut self, chunk: serde_json::Value) -> serde_json::Value {
            let held = std::mem::take(&mut self.held);
            let lp = self
                .logprobs
                .as_mut()
                .filter(|_| !held.is_empty())
                .map(|r| r.render(&held));
            responses::with_logprobs(chunk, lp)
        }
    }
    let s = S {
        out,
        meta,
        first: true,
        done: false,
        ticket,
        logprobs,
        held: Vec::new(),
    };
    futures_util::stream::unfold(s, move |mut s| async move {
        if s.done {
            return None;
        }
        let bytes = loop {
            match s.out.recv().await {
                Some(Outgoing::Text(t, lp)) if t.is_empty() => s.held.extend(lp),
                Some(Outgoing::Text(t, lp)) => {
                    s.held.extend(lp);
                    let chunk = responses::text_chunk(&s.meta, &t, s.first);
                    s.first = false;
                    break responses::sse(&s.with_held(chunk));
                }
                Some(Outgoing::Done(summary)) => {
                    s.ticket
                        .used((summary.prompt_tokens + summary.completion_tokens) as u64);
                    let finish = responses::finish_chunk(&s.meta, summary.finish_reason);
                    let mut b = responses::sse(&s.with_held(finish)).to_vec();
                    if include_usage {
                        b.extend_from_slice(&responses::sse(&responses::usage_chunk(
                            &s.meta, &summary,
                        )));
                    }
                    b.extend_from_slice(responses::SSE_DONE);
                    s.done = true;
                    break Bytes::from(b);
                }
                Some(Outgoing::Failed(why)) => {
                    s.ticket.used(0);
                    s.done = true;
                    break error_event(&why);
                }
                None => {
                    s.done = true;
                    break error_event("the request ended without an answer");
                }
            }
        };
        Some((Ok(bytes), s))
    })
}

/// A failure after the stream began: OpenAI's error object as an event, then the end.
fn error_event(why: &str) -> Bytes {
    let mut b = responses::sse(&ApiError::internal(why).body()).to_vec();
    b.extend_from_slice(responses::SSE_DONE);
    Bytes::from(b)
}
