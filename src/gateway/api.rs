//! The OpenAI request bodies specgate accepts, and their validation into one plain
//! [`GenerationRequest`]. Pure: parsing and checks only, no HTTP types, so every rule is
//! tested alone. Unknown fields are refused (a typo must not silently change behaviour);
//! OpenAI fields we do not implement are accepted only at their neutral value.

use serde::Deserialize;
use specgate_policies::WorkloadClass;
use specgate_strategies::{SamplingParams, StrategyKind};

use super::error::ApiError;
use crate::chat::ChatMessage;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    One(String),
    Many(Vec<String>),
}

/// A message's content: a string or a list of text parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub role: String,
    pub content: Content,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// specgate's extension: `{"strategy": "ngram", "k": 4}` or `{"enabled": false}`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpeculationField {
    pub enabled: Option<bool>,
    pub strategy: Option<String>,
    pub k: Option<i64>,
}

/// Sampling and length fields shared by both endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CommonFields {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<StopField>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<i64>,
    pub user: Option<String>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub logprobs: Option<serde_json::Value>,
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

#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub messages: Option<Vec<Message>>,
    #[serde(flatten)]
    pub common: CommonFields,
}

/// `prompt`: a string or a list holding one string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PromptField {
    One(String),
    Many(Vec<String>),
}

impl RequestBody for ChatRequest {
    const OWN_FIELDS: &'static [&'static str] = &["messages"];
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
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
    pub max_tokens: usize,
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
