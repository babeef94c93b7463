//! The OpenAI request bodies specgate accepts, and their validation into one plain
//! [`GenerationRequest`]. Pure: parsing and checks only, no HTTP types, so every rule is
//! tested alone. Unknown fields are refused (a typo must not silently change behaviour);
//! OpenAI fields we do not implement are accepted only at their neutral value.

use serde::Deserialize;
use specgate_policies::WorkloadClass;
use specgate_strategies::{SamplingParams, StrategyKind};
use utoipa::ToSchema;

use super::error::ApiError;
use crate::chat::ChatMessage;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

/// A message's content: a string or a list of text parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContentPart {
    #[serde(rename = "type")]
    #[schema(pattern = "^text$")]
    pub kind: String,
    #[schema(value_type = String, required = true)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Message {
    #[schema(pattern = "^(system|user|assistant|developer)$")]
    pub role: String,
    pub content: Content,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
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
    /// Only 1.
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<i64>,
    pub user: Option<String>,
    /// Only 0 (not supported otherwise).
    #[schema(minimum = 0.0, maximum = 0.0)]
    pub presence_penalty: Option<f64>,
    #[schema(minimum = 0.0, maximum = 0.0)]
    pub frequency_penalty: Option<f64>,
    /// Only null or false (not supported otherwise).
    #[schema(value_type = Option<bool>)]
    pub logprobs: Option<serde_json::Value>,
    /// The workload class (else the `X-Workload` header, else a heuristic).
    #[schema(pattern = "^(code_edit|rag|creative|chat)$")]
    pub workload: Option<String>,
    pub speculation: Option<SpeculationField>,
}

/// Fields of [`CommonFields`]; with the endpoint's own, anything else is refused.
const COMMON_FIELDS: [&str; 18] = [
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
    "logprobs",
    "workload",
    "speculation",
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
    const OWN_FIELDS: &'static [&'static str] = &["messages"];
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

/// What the client asked of speculation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpecOverride {
    #[default]
    Default,
    Disabled,
    Use {
        strategy: Option<StrategyKind>,
        k: Option<usize>,
    },
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
    pub max_k: usize,
}

/// A validated request, before tokenization.
#[derive(Debug, Clone)]
pub struct GenerationRequest {
    pub messages: Option<Vec<ChatMessage>>, // chat
    pub prompt: Option<String>,             // completions
    /// None: the client set no limit; the server's default applies, capped at what the
    /// context leaves after the prompt.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub seed: u64,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub workload: Option<WorkloadClass>,
    pub speculation: SpecOverride,
}

/// Parse a JSON body into `T`: a 400 with serde's explanation when it is not JSON or a field
/// has the wrong type, and a 400 naming the field when it is one `T` does not know.
pub fn parse_body<T: RequestBody>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid(
            None,
            "the request body is empty; expected JSON",
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(None, format!("the request body is not valid JSON: {e}"))
            .with_code("invalid_json")
    })?;
    let Some(obj) = value.as_object() else {
        return Err(ApiError::invalid(
            None,
            "the request body must be a JSON object",
        ));
    };
    if let Some(unknown) = obj
        .keys()
        .find(|k| !T::OWN_FIELDS.contains(&k.as_str()) && !COMMON_FIELDS.contains(&k.as_str()))
    {
        return Err(
            ApiError::invalid(Some(unknown), format!("unknown field `{unknown}`"))
                .with_code("unknown_field"),
        );
    }
    serde_json::from_value(value).map_err(|e| {
        ApiError::invalid(None, format!("invalid request body: {e}")).with_code("invalid_type")
    })
}
