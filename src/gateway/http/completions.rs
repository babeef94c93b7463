//! OpenAI's generation endpoints: authenticate, validate, hand the request to a
//! [`RequestActor`], and shape what comes back into OpenAI's bodies or server-sent events.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::auth::{authenticate, limits};
use super::body::read_body;
use super::call_responses::CallChunks;
use super::choices;
use super::logprobs_json::Renderer;
use super::prepare::prepare;
use super::requests::{
    parse_body, ChatRequest, CompletionRequest, GenerationRequest, OutputFormat, RequestBody,
    RequestLimits,
};
use super::responses::{self, Endpoint, ResponseMeta};
use super::state::{AppState, State};
use crate::clock::unix_now;
use crate::engine::logprobs::TokenLogprob;
use crate::engine::Summary;
use crate::gateway::actors::request::{Outgoing, RequestActor};
use crate::gateway::admission::Ticket;
use crate::gateway::error::ApiError;

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
    let tenant = authenticate(&state, &req).await?;
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
    request_body = crate::gateway::http::requests::ChatRequest,
    responses((status = 200, description = "The answer, or its events when streamed",
        content((crate::gateway::http::responses::ChatCompletion = "application/json"),
                (crate::gateway::http::responses::SseEvent = "text/event-stream")))),
    security(("api_key" = [])))]
pub async fn chat_completions(
    req: HttpRequest,
    payload: web::Payload,
    state: State,
) -> Result<HttpResponse, ApiError> {
    generation(req, payload, state, Endpoint::Chat, ChatRequest::validate).await
}

/// Text completion (OpenAI's legacy endpoint), streamed when `stream` is true.
#[utoipa::path(post, path = "/v1/completions", tag = "generation",
    request_body = crate::gateway::http::requests::CompletionRequest,
    responses((status = 200, description = "The answer, or its events when streamed",
        content((crate::gateway::http::responses::TextCompletion = "application/json"),
                (crate::gateway::http::responses::SseEvent = "text/event-stream")))),
    security(("api_key" = [])))]
pub async fn completions(
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

/// A request handed to its actor and admitted: what comes back, and what shapes it.
pub(super) struct Launched {
    pub out: mpsc::UnboundedReceiver<Outgoing>,
    pub meta: ResponseMeta,
    pub ticket: Ticket,
    pub logprobs: Option<Renderer>,
    /// The functions the answer may call (None: no tools offered), its text read for calls.
    pub calls: Option<Vec<String>>,
}

/// Tokenize, admit against the tenant's quota, and start the request's actor.
pub(super) async fn launch(
    state: &AppState,
    tenant: String,
    request: &GenerationRequest,
    endpoint: Endpoint,
) -> Result<Launched, ApiError> {
    let mut job = prepare(
        &state.tokenizer,
        &state.grammars,
        &state.limits,
        tenant,
        request,
    )?;
    let overrides = limits(state, &job.route.tenant).await?;
    // The scope comes from who is asking (and an admin's grouping), never from the body.
    job.cache = request.cache_prompt.then(|| match &overrides.cache_scope {
        Some(group) => state.cache_scopes.shared(group),
        None => state.cache_scopes.tenant(&job.route.tenant),
    });
    job.share = overrides.share(&job.route.tenant);
    let mut ticket = state
        .quotas
        .admit_async(
            &job.route.tenant,
            &overrides,
            (job.prompt.len() + job.params.max_tokens) as u64,
        )
        .await?;
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
    // Only a request that may call gets its text read for calls (of the functions it may call).
    let calls = match &request.output {
        OutputFormat::Tools(t) => Some(t.callable()),
        _ => None,
    };
    Ok(Launched {
        out,
        meta,
        ticket,
        logprobs,
        calls,
    })
}

async fn respond(
    state: &AppState,
    tenant: String,
    request: GenerationRequest,
    endpoint: Endpoint,
) -> Result<HttpResponse, ApiError> {
    if request.n > 1 {
        let all = choices::launch_choices(state, &tenant, &request, endpoint).await?;
        if request.stream {
            return Ok(choices::stream_all(all, request.include_usage));
        }
        return choices::collect_all(all).await;
    }
    let l = launch(state, tenant, &request, endpoint).await?;
    if request.stream {
        let calls = l.calls.map(CallChunks::new);
        let events = sse_stream(
            l.out,
            l.meta,
            request.include_usage,
            l.ticket,
            l.logprobs,
            calls,
            None,
        );
        return Ok(HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .streaming(events));
    }
    collect(l.out, &l.meta, l.ticket, l.logprobs, l.calls).await
}

/// Wait for the whole answer: its text, the log-probabilities sent with it, and its
/// summary; the tenant's quota is charged what it used (nothing when the server failed it).
pub(super) async fn gather(
    mut out: mpsc::UnboundedReceiver<Outgoing>,
    mut ticket: Ticket,
) -> Result<(String, Vec<TokenLogprob>, Summary), ApiError> {
    let (mut text, mut entries) = (String::new(), Vec::new());
    while let Some(item) = out.recv().await {
        match item {
            Outgoing::Text(t, lp) => {
                text += &t;
                entries.extend(lp);
            }
            Outgoing::Done(summary) => {
                ticket.used((summary.prompt_tokens + summary.completion_tokens) as u64);
                return Ok((text, entries, summary));
            }
            Outgoing::Failed(failure) => {
                // The tenant's quota pays nothing for an answer it did not get.
                ticket.used(0);
                return Err(failure.into());
            }
        }
    }
    Err(ApiError::internal("the request ended without an answer"))
}

/// The whole answer as one chat or completion body.
async fn collect(
    out: mpsc::UnboundedReceiver<Outgoing>,
    meta: &ResponseMeta,
    ticket: Ticket,
    logprobs: Option<Renderer>,
    calls: Option<Vec<String>>,
) -> Result<HttpResponse, ApiError> {
    let (text, entries, summary) = gather(out, ticket).await?;
    let body = choices::body(meta, &text, &entries, &summary, logprobs, &calls);
    Ok(HttpResponse::Ok().json(body))
}

/// One choice's usage, sent by its stream when several choices share one.
pub(super) type UsageTail = (usize, mpsc::UnboundedSender<(usize, serde_json::Value)>);

/// The answer as server-sent events, ending with `data: [DONE]`. Dropping the stream (the
/// client went away) closes `out`, and the request actor cancels the sequence. With a
/// `tail` (choice i of several), chunks carry index i and the usage goes to the tail instead
/// of a chunk, with no `[DONE]`: the caller ends the shared stream.
pub(super) fn sse_stream(
    out: mpsc::UnboundedReceiver<Outgoing>,
    meta: ResponseMeta,
    include_usage: bool,
    ticket: Ticket,
    logprobs: Option<Renderer>,
    calls: Option<CallChunks>,
    tail: Option<UsageTail>,
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
        // A request with tools: its text is read for calls.
        calls: Option<CallChunks>,
        tail: Option<UsageTail>,
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

        /// Chunks as server-sent events, the held log-probabilities on the first.
        fn events(&mut self, chunks: Vec<serde_json::Value>) -> Vec<u8> {
            let mut b = Vec::new();
            for (i, c) in chunks.into_iter().enumerate() {
                let mut c = if i == 0 { self.with_held(c) } else { c };
                if let (Some((index, _)), Some(list)) = (&self.tail, c["choices"].as_array_mut()) {
                    list.iter_mut()
                        .for_each(|choice| choice["index"] = (*index).into());
                }
                b.extend_from_slice(&responses::sse(&c));
            }
            b
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
        calls,
        tail,
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
                    let chunks = match s.calls.as_mut() {
                        Some(c) => c.push(&s.meta, &t, s.first),
                        None => vec![responses::text_chunk(&s.meta, &t, s.first)],
                    };
                    if chunks.is_empty() {
                        continue; // held: it could still open a call
                    }
                    s.first = false;
                    break Bytes::from(s.events(chunks));
                }
                Some(Outgoing::Done(summary)) => {
                    s.ticket
                        .used((summary.prompt_tokens + summary.completion_tokens) as u64);
                    let reason = summary.finish_reason;
                    let chunks = match s.calls.as_mut() {
                        Some(c) => c.finish(&s.meta, reason, s.first),
                        None => vec![responses::finish_chunk(&s.meta, reason)],
                    };
                    let mut b = s.events(chunks);
                    if let Some((index, tx)) = &s.tail {
                        let usage = serde_json::to_value(responses::usage(&summary));
                        let _ = tx.send((*index, usage.unwrap_or_default()));
                        s.done = true;
                        break Bytes::from(b);
                    }
                    if include_usage {
                        b.extend_from_slice(&responses::sse(&responses::usage_chunk(
                            &s.meta, &summary,
                        )));
                    }
                    b.extend_from_slice(responses::SSE_DONE);
                    s.done = true;
                    break Bytes::from(b);
                }
                Some(Outgoing::Failed(failure)) => {
                    s.ticket.used(0);
                    s.done = true;
                    break error_event(failure.into(), s.tail.is_none());
                }
                None => {
                    s.done = true;
                    let e = ApiError::internal("the request ended without an answer");
                    break error_event(e, s.tail.is_none());
                }
            }
        };
        Some((Ok(bytes), s))
    })
}

/// A failure after the stream began: OpenAI's error object as an event, then the end
/// (`[DONE]` unless the stream is one choice of several, whose end is the caller's).
fn error_event(e: ApiError, end: bool) -> Bytes {
    let mut b = responses::sse(&e.body()).to_vec();
    if end {
        b.extend_from_slice(responses::SSE_DONE);
    }
    Bytes::from(b)
}
