//! `POST /v1/responses`: OpenAI's Responses API on the same engine, learner and history as
//! chat completions. The body is read into a chat request ([`input`]), run as one, and its
//! answer shaped into a response object ([`output`]) or the Responses event stream
//! ([`events`]).

pub mod events;
pub mod input;
pub mod output;
pub mod stored;

use std::sync::atomic::Ordering;

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use self::events::ResponseEvents;
use self::output::{new_id, output_items, response_object, ResponseHead};
use super::auth::authenticate;
use super::body::{json_object, parse_body, read_body};
use super::completions::{gather, launch, Launched};
use super::requests::ChatRequest;
use super::responses::Endpoint;
use super::state::{AppState, State};
use crate::clock::unix_now;
use crate::constraint::tools::{read_calls, CallEvent, CallReader};
use crate::gateway::actors::request::Outgoing;
use crate::gateway::admission::Ticket;
use crate::gateway::error::ApiError;

/// A model response (OpenAI's Responses API), streamed as typed events when `stream` is true.
#[utoipa::path(post, path = "/v1/responses", tag = "generation",
    request_body(content = Object, description = "OpenAI's Responses request: `input` (a \
        string or message, function_call and function_call_output items), `instructions`, \
        function `tools`, `tool_choice`, `text.format`, `max_output_tokens`, `temperature`, \
        `top_p`, `stream`"),
    responses((status = 200, description = "The response object, or its events when streamed")),
    security(("api_key" = [])))]
pub async fn responses(
    req: HttpRequest,
    payload: web::Payload,
    state: State,
) -> Result<HttpResponse, ApiError> {
    let tenant = authenticate(&state, &req).await?;
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    let body = json_object(&read_body(payload, state.body_limit).await?)?;
    let keep = stored::wanted(&body)?;
    let earlier = stored::earlier_messages(&state, &tenant, &body).await?;
    let chat = input::chat_body(&body, &earlier)?;
    let chat = serde_json::to_vec(&chat).map_err(|e| ApiError::internal(e.to_string()))?;
    let workload = req
        .headers()
        .get("x-workload")
        .and_then(|h| h.to_str().ok());
    let request = parse_body::<ChatRequest>(&chat)
        .and_then(|c| c.validate(&state.limits, workload))
        .map_err(input::rename_param)?;
    let launched = launch(&state, tenant.clone(), &request, Endpoint::Chat)
        .await
        .map_err(input::rename_param)?;
    let id = new_id("resp");
    let created_at = unix_now();
    let model = state.limits.model_id.clone();
    let mut answer = Answer {
        id,
        created_at,
        model,
        request: body,
        keep: keep.then_some((tenant, earlier)),
    };
    if request.stream {
        let stream = event_stream(launched, answer, state);
        return Ok(HttpResponse::Ok()
            .content_type("text/event-stream")
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .streaming(stream));
    }
    let calls = launched.calls.unwrap_or_default();
    let (text, _, summary) = gather(launched.out, launched.ticket).await?;
    let (content, calls) = if calls.is_empty() {
        (text, Vec::new())
    } else {
        read_calls(&text, &calls)
    };
    let output = output_items(&content, &calls, summary.finish_reason);
    let response = response_object(&answer.head(), output, Some(&summary));
    answer.keep(&state, &response).await?;
    Ok(HttpResponse::Ok().json(response))
}

/// What a response object repeats of its request.
struct Answer {
    id: String,
    created_at: u64,
    model: String,
    request: Map<String, Value>,
    /// Keep the response for this tenant, after the conversation it continued.
    keep: Option<(String, Vec<Value>)>,
}

impl Answer {
    fn head(&self) -> ResponseHead<'_> {
        ResponseHead {
            id: &self.id,
            created_at: self.created_at,
            model: &self.model,
            request: &self.request,
        }
    }

    /// Store the finished response when asked to (an unreachable store: 503).
    async fn keep(&mut self, state: &AppState, response: &Value) -> Result<(), ApiError> {
        match self.keep.take() {
            Some((tenant, earlier)) => {
                stored::keep(state, &tenant, &self.request, earlier, response).await
            }
            None => Ok(()),
        }
    }
}

/// The answer as Responses events. Dropping the stream (the client went away) closes the
/// request's channel, and its actor cancels the sequence.
fn event_stream(
    l: Launched,
    answer: Answer,
    state: State,
) -> impl futures_util::Stream<Item = Result<Bytes, actix_web::Error>> {
    struct S {
        out: mpsc::UnboundedReceiver<Outgoing>,
        // Held as long as the stream: dropped at its end or when the client goes away.
        ticket: Ticket,
        reader: Option<CallReader>,
        events: ResponseEvents,
        answer: Answer,
        state: State,
        started: bool,
        done: bool,
    }
    let s = S {
        out: l.out,
        ticket: l.ticket,
        reader: l.calls.map(CallReader::with_names),
        events: ResponseEvents::default(),
        answer,
        state,
        started: false,
        done: false,
    };
    futures_util::stream::unfold(s, move |mut s| async move {
        if s.done {
            return None;
        }
        let mut events = Vec::new();
        if !s.started {
            // Sent at once, before the prompt's pass: the client knows its response's id.
            s.started = true;
            let created = response_object(&s.answer.head(), Vec::new(), None);
            let bytes: Vec<u8> = s
                .events
                .start(&created)
                .iter()
                .flat_map(|e| events::sse(e).to_vec())
                .collect();
            return Some((Ok(Bytes::from(bytes)), s));
        }
        match s.out.recv().await {
            Some(Outgoing::Text(t, _)) => {
                let pieces = match s.reader.as_mut() {
                    Some(r) => r.push(&t),
                    None if t.is_empty() => Vec::new(),
                    None => vec![CallEvent::Content(t)],
                };
                for p in pieces {
                    events.extend(s.events.push(p));
                }
            }
            Some(Outgoing::Done(summary)) => {
                s.ticket
                    .used((summary.prompt_tokens + summary.completion_tokens) as u64);
                for p in s
                    .reader
                    .as_mut()
                    .map(CallReader::finish)
                    .unwrap_or_default()
                {
                    events.extend(s.events.push(p));
                }
                let (tail, items) = s.events.finish(summary.finish_reason);
                events.extend(tail);
                let full = response_object(&s.answer.head(), items, Some(&summary));
                let kept = s.answer.keep(&s.state, &full).await;
                events.push(match kept {
                    Ok(()) => s.events.end(full, summary.finish_reason),
                    Err(e) => s.events.failed(failed(full, &e)),
                });
                s.done = true;
            }
            ended => {
                s.ticket.used(0);
                let e = match ended {
                    Some(Outgoing::Failed(f)) => f.into(),
                    _ => ApiError::internal("the request ended without an answer"),
                };
                let r = response_object(&s.answer.head(), Vec::new(), None);
                events.push(s.events.failed(failed(r, &e)));
                s.done = true;
            }
        }
        let bytes: Vec<u8> = events
            .iter()
            .flat_map(|e| events::sse(e).to_vec())
            .collect();
        Some((Ok(Bytes::from(bytes)), s))
    })
}

/// `response` marked failed, saying why (`invalid_grammar` when the client's grammar failed).
fn failed(mut response: Value, e: &ApiError) -> Value {
    response["status"] = "failed".into();
    let code = e.code.unwrap_or("server_error");
    response["error"] = serde_json::json!({"code": code, "message": e.message});
    response
}
