//! The OpenAI request bodies specgate accepts, and their validation into one plain
//! [`GenerationRequest`]. Pure: parsing and checks only, no HTTP types, so every rule is
//! tested alone. Unknown fields are refused (a typo must not silently change behaviour);
//! OpenAI fields we do not implement are accepted only at their neutral value
//! ([`neutral`]).

use serde::Deserialize;
pub use specgate_policies::SpecOverride;
use specgate_policies::WorkloadClass;
use specgate_strategies::{Penalties, SamplingParams};
use utoipa::ToSchema;

use crate::gateway::error::ApiError;
pub use crate::gateway::http::body::parse_body;
pub use crate::gateway::http::structured::OutputFormat;
use crate::model::chat_template::ChatMessage;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

/// `logprobs` as the document shows it: chat takes a boolean, the completions endpoint an
/// integer 0–5 (the body keeps the raw value, checked per endpoint).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum LogprobsField {
    Flag(bool),
    Count(u8),
}

/// A message's content: a string or a list of text parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text, parts joined; any part but text is refused, naming the part
    /// (`{param}.content[i]`).
    pub fn into_text(self, param: &str) -> Result<String, ApiError> {
        match self {
            Content::Text(t) => Ok(t),
            Content::Parts(parts) => parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| p.into_text(&format!("{param}.content[{i}]")))
                .collect(),
        }
    }
}

/// OpenAI's predicted output: `{"type": "content", "content": "…"}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PredictionField {
    #[serde(rename = "type")]
    #[schema(pattern = "^content$")]
    pub kind: String,
    pub content: Content,
}

/// One part of a message's content. Parts of every kind are read, so that one this model
/// cannot take (an image, audio, a file) is refused by name rather than as JSON that did
/// not match.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type", default)]
    #[schema(pattern = "^text$")]
    pub kind: String,
    #[schema(value_type = String, required = true)]
    pub text: Option<String>,
    /// Whatever else the part carries (an image part's `image_url`).
    #[serde(flatten)]
    #[schema(ignore)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

impl ContentPart {
    fn into_text(self, param: &str) -> Result<String, ApiError> {
        if self.kind.is_empty() {
            return Err(ApiError::invalid(
                Some(&format!("{param}.type")),
                "a content part needs `type` (`text`)",
            ));
        }
        if self.kind != "text" {
            return Err(ApiError::invalid(
                Some(param),
                format!(
                    "content parts of type `{}` are not supported by this model (it reads \
                     text only: parts of type `text`)",
                    self.kind
                ),
            )
            .with_code("unsupported_content"));
        }
        if let Some(field) = self.other.keys().next() {
            return Err(ApiError::invalid(
                Some(&format!("{param}.{field}")),
                format!("unknown field `{field}` in a text part (`type`, `text`)"),
            )
            .with_code("unknown_field"));
        }
        self.text.ok_or_else(|| {
            ApiError::invalid(Some(&format!("{param}.text")), "a text part needs `text`")
        })
    }
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Message {
    #[schema(pattern = "^(system|user|assistant|developer|tool)$")]
    pub role: String,
    /// Null only on an assistant message (read as empty).
    #[serde(default)]
    #[schema(value_type = Content, required = true)]
    pub content: Option<Content>,
    #[serde(default)]
    pub name: Option<String>,
    /// The fields an assistant message of the openai client carries, so a conversation
    /// replayed from its responses reads back: accepted empty (null, [] or {}).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub refusal: Option<serde_json::Value>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<serde_json::Value>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub function_call: Option<serde_json::Value>,
    /// A tool message's call (`role` "tool"; required there, as OpenAI does). The result is
    /// shown to the model in order.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub audio: Option<serde_json::Value>,
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub annotations: Option<serde_json::Value>,
}

impl Message {
    /// The first of the replay-only fields that is not empty.
    pub fn unsupported_field(&self) -> Option<&'static str> {
        [
            ("refusal", &self.refusal),
            ("function_call", &self.function_call),
            ("audio", &self.audio),
            ("annotations", &self.annotations),
        ]
        .into_iter()
        .find(|(_, v)| v.as_ref().is_some_and(|v| !is_empty_value(v)))
        .map(|(name, _)| name)
    }
}

/// Null, an empty string, list or object.
pub(super) fn is_empty_value(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
    /// OpenAI pads chunks against length side channels; specgate's chunks are not padded,
    /// whatever this says.
    #[serde(default)]
    pub include_obfuscation: Option<bool>,
}

/// specgate's extension: `{"strategy": "ngram", "k": 4}` or `{"enabled": false}`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpeculationField {
    pub enabled: Option<bool>,
    /// `draft` only when the server runs with `--draft-model`.
    #[schema(pattern = "^(plain|ngram|suffix|draft|early-exit|medusa|medusa-tree|suffix-medusa)$")]
    pub strategy: Option<String>,
    #[schema(minimum = 0, maximum = 16)]
    pub k: Option<i64>,
}

/// Sampling and length fields shared by both endpoints.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
// The `schema` attributes document what validation enforces (`/openapi.json`); limits set
// at start-up (the model id, max_tokens' ceiling) are filled in when the document is served.
pub struct CommonFields {
    /// The served model's id (`GET /v1/models`).
    #[schema(value_type = String, required = true)]
    pub model: Option<String>,
    #[schema(minimum = 1)]
    pub max_tokens: Option<i64>,
    #[schema(minimum = 1)]
    pub max_completion_tokens: Option<i64>,
    #[schema(minimum = 0.0, maximum = 2.0)]
    pub temperature: Option<f64>,
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub top_p: Option<f64>,
    /// 0 or -1: off.
    #[schema(minimum = -1)]
    pub top_k: Option<i64>,
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<StopField>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Choices to sample independently from the prompt (at most the server's `--max-n`).
    #[schema(minimum = 1)]
    pub n: Option<i64>,
    pub user: Option<String>,
    /// Subtracted from the logit of every token already in the output.
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub presence_penalty: Option<f64>,
    /// Subtracted from a token's logit once per time it is in the output.
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub frequency_penalty: Option<f64>,
    /// vLLM's extension: the logit of a token in the prompt or output is divided by it when
    /// positive, multiplied when negative (1: off).
    #[schema(exclusive_minimum = 0.0, maximum = 2.0)]
    pub repetition_penalty: Option<f64>,
    /// Token id (as a string) → a bias from -100 to 100 added to its logit.
    #[schema(value_type = Option<std::collections::HashMap<String, f64>>)]
    pub logit_bias: Option<std::collections::BTreeMap<String, f64>>,
    /// Chat: true reports each generated token's log-probability (the target's, before
    /// temperature and truncation). Completions: an integer 0–5, the alternatives to report
    /// with it.
    #[schema(value_type = Option<LogprobsField>)]
    pub logprobs: Option<serde_json::Value>,
    /// The workload class (else the `X-Workload` header, else a heuristic).
    #[schema(pattern = "^(code_edit|rag|creative|chat|structured)$")]
    pub workload: Option<String>,
    pub speculation: Option<SpeculationField>,
    /// What the client expects most of the answer to be: drafted from when the request
    /// drafts (a wrong one costs speed, never the answer).
    #[serde(default)]
    pub prediction: Option<PredictionField>,
    /// `{"type": "text" | "json_object"}` or `{"type": "json_schema", "json_schema":
    /// {"name", "schema", "strict"}}`: the answer is valid by construction.
    #[schema(value_type = Option<Object>)]
    pub response_format: Option<serde_json::Value>,
    /// specgate's extension (vLLM's name): exactly one of `json` (a schema), `regex`,
    /// `grammar` (Lark, llguidance's dialect), `choice` (strings) or `json_object: true`.
    #[schema(value_type = Option<Object>)]
    pub structured_outputs: Option<serde_json::Value>,
    /// llama-server's name: false computes the whole prompt and keeps nothing of it in the
    /// prefix cache (default true: the tenant's own cached blocks are reused).
    pub cache_prompt: Option<bool>,
}

/// Fields of [`CommonFields`]; with the endpoint's own, anything else is refused.
pub(super) const COMMON_FIELDS: [&str; 24] = [
    "model",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "n",
    "user",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "workload",
    "speculation",
    "prediction",
    "response_format",
    "structured_outputs",
    "cache_prompt",
];

/// A body the endpoint can name its fields for.
pub trait RequestBody: serde::de::DeserializeOwned {
    const OWN_FIELDS: &'static [&'static str];
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatRequest {
    /// Required (checked by validation, so its absence gets a clear 400).
    #[schema(value_type = Vec<Message>, required = true, min_items = 1)]
    pub messages: Option<Vec<Message>>,
    /// With `logprobs` true: how many likeliest alternatives each token reports.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 20)]
    pub top_logprobs: Option<f64>,
    /// Functions the model may call: `[{"type": "function", "function": {"name",
    /// "description", "parameters"}}]`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<serde_json::Value>,
    /// `none`, `auto` (the default with tools), `required`, or `{"type": "function",
    /// "function": {"name"}}`.
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<serde_json::Value>,
    /// Whether one answer may hold several calls (default true).
    pub parallel_tool_calls: Option<serde_json::Value>,
    #[serde(flatten)]
    pub common: CommonFields,
}

/// `prompt`: a string or a list holding one string.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum PromptField {
    One(String),
    Many(Vec<String>),
}

impl RequestBody for ChatRequest {
    const OWN_FIELDS: &'static [&'static str] = &[
        "messages",
        "top_logprobs",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
    ];
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CompletionRequest {
    /// Required (checked by validation, so its absence gets a clear 400).
    #[schema(value_type = PromptField, required = true)]
    pub prompt: Option<PromptField>,
    pub echo: Option<bool>,
    pub best_of: Option<i64>,
    pub suffix: Option<String>,
    #[serde(flatten)]
    pub common: CommonFields,
}

impl RequestBody for CompletionRequest {
    const OWN_FIELDS: &'static [&'static str] = &["prompt", "echo", "best_of", "suffix"];
}

/// Limits the server enforces on every request.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    pub model_id: String,
    pub context_length: usize,
    pub max_tokens_limit: usize,
    pub default_max_tokens: usize,
    pub max_stop_strings: usize,
    pub max_stop_len: usize,
    /// Most choices one request may ask for (`n`).
    pub max_n: usize,
    pub max_k: usize,
    /// The target's vocabulary: `logit_bias` names ids below it.
    pub vocab_size: usize,
}

/// A validated request, before tokenization.
#[derive(Debug, Clone)]
pub struct GenerationRequest {
    pub messages: Option<Vec<ChatMessage>>, // chat
    pub prompt: Option<String>,             // completions
    /// None: the client set no limit; the server's default applies, capped at what the
    /// context leaves after the prompt.
    pub max_tokens: Option<usize>,
    /// Choices to generate, each its own sequence.
    pub n: usize,
    pub sampling: SamplingParams,
    pub penalties: Penalties,
    /// None: the client gave no seed, so two such requests sample differently.
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub workload: Option<WorkloadClass>,
    pub speculation: SpecOverride,
    /// The predicted output's text (`prediction`), when given.
    pub prediction: Option<String>,
    /// Report each token's log-probability with this many alternatives (None: no logprobs).
    pub logprobs: Option<usize>,
    /// What the answer must be: text, a grammar's language, or tool calls.
    pub output: OutputFormat,
    /// Reuse and fill the prefix cache (`cache_prompt`, default true).
    pub cache_prompt: bool,
}
