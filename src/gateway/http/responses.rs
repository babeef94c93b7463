//! OpenAI response bodies: whole responses, stream chunks and the SSE framing around them.
//! The types are what `/openapi.json` documents, so the document and the answers cannot
//! drift apart.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::engine::sequence::FinishReason;
use crate::engine::Summary;

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

/// specgate's account of the speculation behind an answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SpeculativeUsage {
    /// The strategy that drafted ("plain" when none did).
    pub strategy: String,
    /// Most draft tokens per round.
    pub k: usize,
    /// Whether k adapted round by round.
    pub adaptive: bool,
    pub drafted: u64,
    pub accepted: u64,
    /// Draft tokens an output grammar forced (counted in `drafted` too).
    pub forced: u64,
    pub acceptance_rate: f64,
    /// Forward passes of the target model (prefill included).
    pub target_passes: u64,
    /// Rounds whose drafter failed and that ran as plain decoding.
    pub drafter_failures: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// How many prompt tokens came from the prefix cache (counted in `prompt_tokens` too).
    pub prompt_tokens_details: PromptTokensDetails,
    /// Only for a request with a `prediction`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
    pub speculative: SpeculativeUsage,
}

/// OpenAI's breakdown of the prompt: `cached_tokens` were not computed again.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

/// OpenAI's breakdown of a predicted output: the predicted tokens that were drafted and
/// accepted, and those drafted and rejected (their rows were computed all the same).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompletionTokensDetails {
    pub accepted_prediction_tokens: u64,
    pub rejected_prediction_tokens: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AssistantMessage {
    /// Always "assistant".
    pub role: String,
    /// Null when the answer is only tool calls.
    pub content: Option<String>,
    /// The functions the model called (a request with `tools`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One call: `arguments` is JSON text valid against the function's `parameters`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCall {
    pub id: String,
    /// Always "function".
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct FunctionCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A streamed piece of call `index`: its first delta carries the id, type and name, the
/// next ones pieces of its arguments.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub function: FunctionCall,
}

/// `finish_reason`: "stop" (end of text or a stop string), "length" (max_tokens) or
/// "tool_calls" (the answer called functions).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    /// Null unless the request set `logprobs`: then `{"content": [{token, logprob, bytes,
    /// top_logprobs}], "refusal": null}`.
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
    pub finish_reason: String,
}

/// A whole chat answer (`object`: "chat.completion").
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: Option<String>,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
    pub finish_reason: Option<String>,
}

/// One streamed chat event (`object`: "chat.completion.chunk"); the usage chunk has no
/// choices.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: Option<String>,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
    pub finish_reason: Option<String>,
}

/// A completion (`object`: "text_completion"), whole or one streamed chunk.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TextCompletion {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: Option<String>,
    pub choices: Vec<TextChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One server-sent event as a client parses it: `data` holds a JSON chunk
/// ([`ChatCompletionChunk`] or [`TextCompletion`]), an error object, or `[DONE]`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SseEvent {
    pub data: String,
}

pub(crate) fn finish_name(f: FinishReason) -> String {
    match f {
        FinishReason::Stop => "stop".into(),
        FinishReason::Length => "length".into(),
    }
}

/// `usage`, with specgate's `speculative` object.
pub fn usage(s: &Summary) -> Usage {
    Usage {
        prompt_tokens: s.prompt_tokens,
        completion_tokens: s.completion_tokens,
        total_tokens: s.prompt_tokens + s.completion_tokens,
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: s.cached_tokens,
        },
        completion_tokens_details: s.prediction.map(|p| CompletionTokensDetails {
            accepted_prediction_tokens: p.accepted,
            rejected_prediction_tokens: p.rejected,
        }),
        speculative: SpeculativeUsage {
            strategy: s.plan.strategy.name().to_string(),
            k: s.plan.k,
            adaptive: s.plan.adaptive,
            drafted: s.stats.drafted,
            accepted: s.stats.accepted,
            forced: s.stats.forced,
            acceptance_rate: s.stats.acceptance_rate(),
            target_passes: 1 + s.stats.rounds,
            drafter_failures: s.stats.drafter_failures,
        },
    }
}

fn to_value(v: impl Serialize) -> Value {
    // Plain structs of strings and numbers: serialization cannot fail.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl ResponseMeta {
    pub(crate) fn chat_chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> Value {
        to_value(ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: None,
            choices,
            usage,
        })
    }

    fn text(&self, choices: Vec<TextChoice>, usage: Option<Usage>) -> Value {
        to_value(TextCompletion {
            id: self.id.clone(),
            object: "text_completion".into(),
            created: self.created,
            model: self.model.clone(),
            system_fingerprint: None,
            choices,
            usage,
        })
    }
}

fn text_choice(text: &str, finish: Option<String>) -> TextChoice {
    TextChoice {
        index: 0,
        text: text.to_string(),
        logprobs: None,
        finish_reason: finish,
    }
}

/// `v` (a response or chunk with one choice) with that choice's `logprobs` set, when
/// the request asked for them.
pub fn with_logprobs(mut v: Value, logprobs: Option<Value>) -> Value {
    if let (Some(lp), Some(choice)) = (logprobs, v.pointer_mut("/choices/0")) {
        choice["logprobs"] = lp;
    }
    v
}

/// A whole non-streamed response.
pub fn full(meta: &ResponseMeta, text: &str, s: &Summary) -> Value {
    let finish = finish_name(s.finish_reason);
    match meta.endpoint {
        Endpoint::Chat => to_value(ChatCompletion {
            id: meta.id.clone(),
            object: "chat.completion".into(),
            created: meta.created,
            model: meta.model.clone(),
            system_fingerprint: None,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: Some(text.to_string()),
                    tool_calls: None,
                },
                logprobs: None,
                finish_reason: finish,
            }],
            usage: usage(s),
        }),
        Endpoint::Completion => meta.text(vec![text_choice(text, Some(finish))], Some(usage(s))),
    }
}

/// A stream chunk carrying text (the first chat chunk also carries the role).
pub fn text_chunk(meta: &ResponseMeta, text: &str, first: bool) -> Value {
    match meta.endpoint {
        Endpoint::Chat => {
            let delta = Delta {
                role: first.then(|| "assistant".to_string()),
                content: Some(text.to_string()),
                tool_calls: None,
            };
            meta.chat_chunk(vec![chunk_choice(delta, None)], None)
        }
        Endpoint::Completion => meta.text(vec![text_choice(text, None)], None),
    }
}

pub(crate) fn chunk_choice(delta: Delta, finish: Option<String>) -> ChunkChoice {
    ChunkChoice {
        index: 0,
        delta,
        logprobs: None,
        finish_reason: finish,
    }
}

/// The chunk that ends the choice.
pub fn finish_chunk(meta: &ResponseMeta, finish: FinishReason) -> Value {
    let finish = Some(finish_name(finish));
    match meta.endpoint {
        Endpoint::Chat => meta.chat_chunk(vec![chunk_choice(Delta::default(), finish)], None),
        Endpoint::Completion => meta.text(vec![text_choice("", finish)], None),
    }
}

/// The usage chunk (`stream_options.include_usage`): no choices.
pub fn usage_chunk(meta: &ResponseMeta, s: &Summary) -> Value {
    match meta.endpoint {
        Endpoint::Chat => meta.chat_chunk(Vec::new(), Some(usage(s))),
        Endpoint::Completion => meta.text(Vec::new(), Some(usage(s))),
    }
}

/// One server-sent event.
pub fn sse(v: &Value) -> bytes::Bytes {
    bytes::Bytes::from(format!("data: {v}\n\n"))
}

pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";
