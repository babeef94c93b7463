//! OpenAI response bodies: whole responses, stream chunks and the SSE framing around them.

use serde_json::{json, Value};

use crate::engine::Summary;
use crate::sequence::FinishReason;

/// The two endpoints, which differ only in names and where the text goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// Identity shared by every chunk of one response.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
}

impl ResponseMeta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }
}

fn finish_name(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

/// `usage`, with specgate's `speculative` object.
pub fn usage(s: &Summary) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "speculative": {
            "strategy": s.plan.strategy.name(),
            "k": s.plan.k,
            "adaptive": s.plan.adaptive,
            "drafted": s.stats.drafted,
            "accepted": s.stats.accepted,
            "acceptance_rate": s.stats.acceptance_rate(),
            "target_passes": 1 + s.stats.rounds,
            "drafter_failures": s.stats.drafter_failures,
        },
    })
}

/// A whole non-streamed response.
pub fn full(meta: &ResponseMeta, text: &str, s: &Summary) -> Value {
    let finish = finish_name(s.finish_reason);
    let choice = match meta.endpoint {
        Endpoint::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": null,
            "finish_reason": finish,
        }),
        Endpoint::Completion => json!({
            "index": 0, "text": text, "logprobs": null, "finish_reason": finish,
        }),
    };
    let mut v = meta.envelope(false, json!([choice]));
    v["usage"] = usage(s);
    v
}

/// A stream chunk carrying text (the first chat chunk also carries the role).
pub fn text_chunk(meta: &ResponseMeta, text: &str, first: bool) -> Value {
    let choice = match meta.endpoint {
        Endpoint::Chat if first => json!({
            "index": 0, "delta": {"role": "assistant", "content": text},
            "logprobs": null, "finish_reason": null,
        }),
        Endpoint::Chat => json!({
            "index": 0, "delta": {"content": text}, "logprobs": null, "finish_reason": null,
        }),
        Endpoint::Completion => json!({
            "index": 0, "text": text, "logprobs": null, "finish_reason": null,
        }),
    };
    meta.envelope(true, json!([choice]))
}

/// The chunk that ends the choice.
pub fn finish_chunk(meta: &ResponseMeta, finish: FinishReason) -> Value {
    let choice = match meta.endpoint {
        Endpoint::Chat => json!({
            "index": 0, "delta": {}, "logprobs": null, "finish_reason": finish_name(finish),
        }),
        Endpoint::Completion => json!({
            "index": 0, "text": "", "logprobs": null, "finish_reason": finish_name(finish),
        }),
    };
    meta.envelope(true, json!([choice]))
}

/// The usage chunk (`stream_options.include_usage`): no choices.
pub fn usage_chunk(meta: &ResponseMeta, s: &Summary) -> Value {
    let mut v = meta.envelope(true, json!([]));
    v["usage"] = usage(s);
    v
}

/// One server-sent event.
pub fn sse(v: &Value) -> bytes::Bytes {
    bytes::Bytes::from(format!("data: {v}\n\n"))
}

pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";
