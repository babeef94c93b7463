//! `n` > 1: choices sampled independently from one prompt, each its own sequence with its own
//! drafter state and seed (`seed + i` when seeded). The first is launched alone and the rest
//! once its prompt is prefilled (its first event), so they start from its cached blocks
//! instead of computing the prompt again. Answers are one body with `choices[i].index`, or
//! one stream whose chunks carry their choice's index; usage counts the prompt once and the
//! completions of every choice.

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

use super::call_responses::{self, CallChunks};
use super::completions::{gather, launch, sse_stream, Launched};
use super::logprobs_json::Renderer;
use super::requests::GenerationRequest;
use super::responses::{self, Endpoint, ResponseMeta, SSE_DONE};
use super::state::AppState;
use crate::engine::logprobs::TokenLogprob;
use crate::engine::Summary;
use crate::gateway::error::ApiError;

/// Launch the request's `n` choices.
pub(super) async fn launch_choices(
    state: &AppState,
    tenant: &str,
    request: &GenerationRequest,
    endpoint: Endpoint,
) -> Result<Vec<Launched>, ApiError> {
    let mut first = launch(state, tenant.to_string(), request, endpoint).await?;
    // Wait for the prompt's pass (its first event), then hand that event on unchanged.
    let event = first.out.recv().await;
    let (tx, rx) = mpsc::unbounded_channel();
    if let Some(e) = event {
        let _ = tx.send(e);
    }
    let mut upstream = std::mem::replace(&mut first.out, rx);
    actix_web::rt::spawn(async move {
        while let Some(e) = upstream.recv().await {
            if tx.send(e).is_err() {
                break; // the client went away: dropping `upstream` cancels the choice
            }
        }
    });
    let mut all = vec![first];
    for i in 1..request.n {
        let mut r = request.clone();
        r.seed = request.seed.map(|s| s.wrapping_add(i as u64));
        match launch(state, tenant.to_string(), &r, endpoint).await {
            Ok(l) => all.push(l),
            Err(e) => {
                // Refused part way (a quota): the choices already running are cancelled,
                // and the tenant pays nothing for an answer it does not get.
                for mut l in all {
                    l.ticket.used(0);
                }
                return Err(e);
            }
        }
    }
    Ok(all)
}

/// Every choice's whole answer, as one body. Every choice runs to its end (each charged what
/// it used), even when another fails and the request answers that failure.
pub(super) async fn collect_all(choices: Vec<Launched>) -> Result<HttpResponse, ApiError> {
    let meta = choices[0].meta.clone();
    let answers = futures_util::future::join_all(choices.into_iter().map(|c| {
        let meta = meta.clone();
        async move {
            let (text, entries, summary) = gather(c.out, c.ticket).await?;
            Ok::<_, ApiError>(body(&meta, &text, &entries, &summary, c.logprobs, &c.calls))
        }
    }))
    .await;
    let answers: Vec<Value> = answers.into_iter().collect::<Result<_, _>>()?;
    let mut bodies = answers.into_iter();
    let Some(mut body) = bodies.next() else {
        return Err(ApiError::internal("a request without choices"));
    };
    let mut usages = vec![body["usage"].take()];
    for (i, b) in bodies.enumerate() {
        let mut choice = b["choices"][0].clone();
        choice["index"] = (i + 1).into();
        if let Some(list) = body["choices"].as_array_mut() {
            list.push(choice);
        }
        usages.push(b["usage"].clone());
    }
    body["usage"] = merged_usage(&usages);
    Ok(HttpResponse::Ok().json(body))
}

/// Every choice streamed into one SSE stream, chunks tagged with their choice's index; the
/// usage chunk (when asked) and `[DONE]` come after the last choice ends.
pub(super) fn stream_all(choices: Vec<Launched>, include_usage: bool) -> HttpResponse {
    let meta = choices[0].meta.clone();
    let (usage_tx, mut usage_rx) = mpsc::unbounded_channel();
    let streams: Vec<_> = choices
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let calls = c.calls.map(CallChunks::new);
            let tail = Some((i, usage_tx.clone()));
            // One id for the whole stream, as OpenAI's.
            sse_stream(
                c.out,
                meta.clone(),
                include_usage,
                c.ticket,
                c.logprobs,
                calls,
                tail,
            )
            .boxed_local()
        })
        .collect();
    // The usage channel closes once every choice has sent its usage and let go of it.
    drop(usage_tx);
    let merged = futures_util::stream::select_all(streams);
    let end = futures_util::stream::once(async move {
        // In choice order, whichever finished first.
        let mut usages = Vec::new();
        while let Some(u) = usage_rx.recv().await {
            usages.push(u);
        }
        usages.sort_by_key(|(i, _)| *i);
        let usages: Vec<Value> = usages.into_iter().map(|(_, u)| u).collect();
        let mut b = Vec::new();
        if include_usage && !usages.is_empty() {
            let mut chunk = meta.chat_chunk(Vec::new(), None);
            if meta.endpoint == Endpoint::Completion {
                chunk["object"] = "text_completion".into();
            }
            chunk["usage"] = merged_usage(&usages);
            b.extend_from_slice(&responses::sse(&chunk));
        }
        b.extend_from_slice(SSE_DONE);
        Ok(Bytes::from(b))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(merged.chain(end))
}

/// One choice's whole answer as its endpoint's body.
pub(super) fn body(
    meta: &ResponseMeta,
    text: &str,
    entries: &[TokenLogprob],
    summary: &Summary,
    mut logprobs: Option<Renderer>,
    calls: &Option<Vec<String>>,
) -> Value {
    let lp = logprobs.as_mut().map(|r| r.render(entries));
    let body = match calls {
        Some(names) => call_responses::full_with_calls(meta, text, summary, names),
        None => responses::full(meta, text, summary),
    };
    responses::with_logprobs(body, lp)
}

/// One usage for every choice: the prompt counted once (as the first choice read it),
/// completions and speculative work summed.
pub fn merged_usage(usages: &[Value]) -> Value {
    let Some(first) = usages.first() else {
        return Value::Null;
    };
    let mut u = first.clone();
    let sum = |path: &str| -> u64 {
        usages
            .iter()
            .filter_map(|v| v.pointer(path).and_then(Value::as_u64))
            .sum()
    };
    let completion = sum("/completion_tokens");
    u["completion_tokens"] = completion.into();
    u["total_tokens"] = (first["prompt_tokens"].as_u64().unwrap_or(0) + completion).into();
    for field in [
        "drafted",
        "accepted",
        "forced",
        "target_passes",
        "drafter_failures",
    ] {
        u["speculative"][field] = sum(&format!("/speculative/{field}")).into();
    }
    if u["completion_tokens_details"].is_object() {
        for field in ["accepted_prediction_tokens", "rejected_prediction_tokens"] {
            u["completion_tokens_details"][field] =
                sum(&format!("/completion_tokens_details/{field}")).into();
        }
    }
    let (drafted, accepted) = (sum("/speculative/drafted"), sum("/speculative/accepted"));
    u["speculative"]["acceptance_rate"] = if drafted == 0 {
        0.0.into()
    } else {
        (accepted as f64 / drafted as f64).into()
    };
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_counts_the_prompt_once_and_every_completion() {
        let one = |out: u64, drafted: u64, accepted: u64| {
            json!({"prompt_tokens": 10, "completion_tokens": out, "total_tokens": 10 + out,
                   "prompt_tokens_details": {"cached_tokens": 0},
                   "speculative": {"strategy": "ngram", "drafted": drafted,
                                   "accepted": accepted, "target_passes": out}})
        };
        let u = merged_usage(&[one(5, 4, 2), one(7, 4, 4)]);
        assert_eq!(u["prompt_tokens"], 10);
        assert_eq!(u["completion_tokens"], 12);
        assert_eq!(u["total_tokens"], 22);
        assert_eq!(u["speculative"]["drafted"], 8);
        assert_eq!(u["speculative"]["acceptance_rate"], 0.75);
    }
}
