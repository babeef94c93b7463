//! The OpenAI request bodies specgate accepts, and their validation into one plain
//! [`GenerationRequest`]. Pure: parsing and checks only, no HTTP types, so every rule is
//! tested alone. Unknown fields are refused (a typo must not silently change behaviour);
//! OpenAI fields we do not implement are accepted only at their neutral value
//! ([`neutral`]).

use serde::Deserialize;
pub use specgate_policies::SpecOverride;
use specgate_policies::WorkloadClass;
use specgate_strategies::SamplingParams;
use utoipa::ToSchema;

use crate::gateway::error::ApiError;
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
    /// The text, parts joined; any part but text is refused (naming `param`).
    pub fn into_text(self, param: &str) -> Result<String, ApiError> {
        match self {
            Content::Text(t) => Ok(t),
            Content::Parts(parts) => parts
                .into_iter()
                .map(|p| match (p.kind.as_str(), p.text) {
                    ("text", Some(t)) => Ok(t),
                    _ => Err(ApiError::invalid(
                        Some(param),
                        "only text content parts are supported",
                    )),
                })
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
    /// A tool message's call (`role` "tool"): the result is shown to the model in order,
    /// so the id itself is not needed.
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
fn is_empty_value(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Whether `v` is the value of an OpenAI field specgate does not implement that changes
/// nothing (None: not such a field). Clients and UIs often send these as a matter of
/// course; any other value is refused, since ignoring it would change the answer.
fn neutral(field: &str, v: &serde_json::Value) -> Option<bool> {
    let null = v.is_null();
    let zero = |v: &serde_json::Value| v.as_f64() == Some(0.0);
    Some(match field {
        "tools" | "functions" => is_empty_value(v),
        // A bias of 0 changes no logit.
        "logit_bias" => null || v.as_object().is_some_and(|o| o.values().all(zero)),
        "tool_choice" | "function_call" => null || v == "none" || v == "auto",
        "parallel_tool_calls" => null || v.is_boolean(),
        "top_logprobs" => null || zero(v),
        "store" => null || v == false,
        "metadata" => null || v.is_object(),
        "service_tier" => null || v == "auto" || v == "default",
        "modalities" => null || v.as_array().is_some_and(|a| a.iter().all(|m| m == "text")),
        // Hints that change latency or bookkeeping, never the answer.
        "prompt_cache_key" | "safety_identifier" => true,
        // Known, and not implemented at any value but null.
        "reasoning_effort" | "verbosity" | "audio" | "web_search_options" => null,
        _ => return None,
    })
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
    /// Only 1.
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<i64>,
    pub user: Option<String>,
    /// Only 0 (not supported otherwise).
    #[schema(minimum = 0.0, maximum = 0.0)]
    pub presence_penalty: Option<f64>,
    #[schema(minimum = 0.0, maximum = 0.0)]
    pub frequency_penalty: Option<f64>,
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
const COMMON_FIELDS: [&str; 22] = [
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

/// Parse a JSON body into `T`: a 400 with serde's explanation when it is not JSON or a field
/// has the wrong type, and a 400 naming the field when it is one `T` does not know.
pub fn parse_body<T: RequestBody>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid(
            None,
            "the request body is empty; expected JSON",
        ));
    }
    let mut value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(None, format!("the request body is not valid JSON: {e}"))
            .with_code("invalid_json")
    })?;
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::invalid(
            None,
            "the request body must be a JSON object",
        ));
    };
    let others: Vec<String> = obj
        .keys()
        .filter(|k| !T::OWN_FIELDS.contains(&k.as_str()) && !COMMON_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    for field in others {
        match neutral(&field, &obj[&field]) {
            Some(true) => {
                obj.remove(&field);
            }
            Some(false) => {
                return Err(ApiError::invalid(
                    Some(&field),
                    format!("`{field}` is not supported; only its neutral value is accepted"),
                )
                .with_code("unsupported_parameter"))
            }
            None => {
                return Err(
                    ApiError::invalid(Some(&field), format!("unknown field `{field}`"))
                        .with_code("unknown_field"),
                )
            }
        }
    }
    serde_json::from_value(value).map_err(|e| {
        ApiError::invalid(None, format!("invalid request body: {e}")).with_code("invalid_type")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_neutral_values_of_unimplemented_fields_pass() {
        let cases = [
            ("tools", json!([]), Some(true)),
            ("tools", json!([{"type": "function"}]), Some(false)),
            ("logit_bias", json!({"50256": 0}), Some(true)),
            ("logit_bias", json!({"50256": -100}), Some(false)),
            // Chat implements it; to completions only the neutral value is known.
            ("top_logprobs", json!(0.0), Some(true)),
            ("top_logprobs", json!(2), Some(false)),
            ("prompt_cache_key", json!("k"), Some(true)),
            // Implemented, so not a neutral-only field.
            (
                "prediction",
                json!({"type": "content", "content": "x"}),
                None,
            ),
            ("reasoning_effort", json!(null), Some(true)),
            ("reasoning_effort", json!("high"), Some(false)),
            ("temprature", json!(0), None),
        ];
        for (field, value, want) in cases {
            assert_eq!(neutral(field, &value), want, "{field}: {value}");
        }
    }

    #[test]
    fn a_known_unimplemented_field_is_unsupported_and_a_typo_unknown() {
        let code = |body: serde_json::Value| {
            parse_body::<CompletionRequest>(body.to_string().as_bytes())
                .err()
                .and_then(|e| e.code)
        };
        let base = json!({"model": "m", "prompt": "x"});
        let with = |k: &str, v: serde_json::Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        assert_eq!(code(with("tools", json!([]))), None);
        assert_eq!(
            code(with("reasoning_effort", json!("low"))),
            Some("unsupported_parameter")
        );
        assert_eq!(code(with("temprature", json!(0))), Some("unknown_field"));
        let mut obfuscated = base.clone();
        obfuscated["stream_options"] = json!({"include_usage": true, "include_obfuscation": false});
        assert_eq!(code(obfuscated), None);
    }
}
