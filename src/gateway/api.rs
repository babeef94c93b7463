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

impl ChatRequest {
    pub fn validate(
        self,
        limits: &RequestLimits,
        workload_header: Option<&str>,
    ) -> Result<GenerationRequest, ApiError> {
        let messages = self
            .messages
            .ok_or_else(|| ApiError::invalid(Some("messages"), "`messages` is required"))?;
        if messages.is_empty() {
            return Err(ApiError::invalid(
                Some("messages"),
                "`messages` must not be empty",
            ));
        }
        let mut out = Vec::with_capacity(messages.len());
        for (i, m) in messages.into_iter().enumerate() {
            let param = format!("messages[{i}]");
            if !matches!(
                m.role.as_str(),
                "system" | "user" | "assistant" | "developer"
            ) {
                return Err(ApiError::invalid(
                    Some(&param),
                    format!("unsupported role {:?} (system, user, assistant)", m.role),
                ));
            }
            let content = match m.content {
                Content::Text(t) => t,
                Content::Parts(parts) => {
                    let mut text = String::new();
                    for p in parts {
                        match (p.kind.as_str(), p.text) {
                            ("text", Some(t)) => text += &t,
                            _ => {
                                return Err(ApiError::invalid(
                                    Some(&param),
                                    "only text content parts are supported",
                                ))
                            }
                        }
                    }
                    text
                }
            };
            let role = if m.role == "developer" {
                "system".into()
            } else {
                m.role
            };
            out.push(ChatMessage { role, content });
        }
        let mut req = self.common.validate(limits, workload_header)?;
        req.messages = Some(out);
        Ok(req)
    }
}

impl CompletionRequest {
    pub fn validate(
        self,
        limits: &RequestLimits,
        workload_header: Option<&str>,
    ) -> Result<GenerationRequest, ApiError> {
        let prompt = match self.prompt {
            None => return Err(ApiError::invalid(Some("prompt"), "`prompt` is required")),
            Some(PromptField::One(p)) => p,
            Some(PromptField::Many(mut v)) if v.len() == 1 => v.remove(0),
            Some(PromptField::Many(_)) => {
                return Err(ApiError::invalid(
                    Some("prompt"),
                    "exactly one prompt per request is supported",
                ))
            }
        };
        if prompt.is_empty() {
            return Err(ApiError::invalid(
                Some("prompt"),
                "`prompt` must not be empty",
            ));
        }
        if self.echo == Some(true) {
            return Err(ApiError::invalid(Some("echo"), "`echo` is not supported"));
        }
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(ApiError::invalid(
                Some("best_of"),
                "only best_of = 1 is supported",
            ));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid(
                Some("suffix"),
                "`suffix` is not supported",
            ));
        }
        let mut req = self.common.validate(limits, workload_header)?;
        req.prompt = Some(prompt);
        Ok(req)
    }
}

fn in_range(param: &str, v: Option<f64>, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(ApiError::invalid(
            Some(param),
            format!("`{param}` must be between {lo} and {hi}, got {x}"),
        )),
        _ => Ok(v),
    }
}

impl CommonFields {
    fn validate(
        self,
        limits: &RequestLimits,
        workload_header: Option<&str>,
    ) -> Result<GenerationRequest, ApiError> {
        let model = self
            .model
            .ok_or_else(|| ApiError::invalid(Some("model"), "`model` is required"))?;
        if model != limits.model_id {
            return Err(ApiError::model_not_found(&model));
        }
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid(Some("n"), "only n = 1 is supported"));
        }
        for (param, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if v.is_some_and(|x| x != 0.0) {
                return Err(ApiError::invalid(
                    Some(param),
                    format!("`{param}` is not supported"),
                ));
            }
        }
        if self
            .logprobs
            .as_ref()
            .is_some_and(|v| !(v.is_null() || *v == serde_json::Value::Bool(false)))
        {
            return Err(ApiError::invalid(
                Some("logprobs"),
                "`logprobs` is not supported",
            ));
        }
        let (param, max) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        let max_tokens = match max {
            None => limits.default_max_tokens,
            Some(m) if m <= 0 => {
                return Err(ApiError::invalid(
                    Some(param),
                    format!("`{param}` must be at least 1"),
                ))
            }
            Some(m) if m as u64 > limits.max_tokens_limit as u64 => {
                return Err(ApiError::invalid(
                    Some(param),
                    format!("`{param}` must be at most {}", limits.max_tokens_limit),
                ))
            }
            Some(m) => m as usize,
        };
        let temperature = in_range("temperature", self.temperature, 0.0, 2.0)?.unwrap_or(1.0);
        let top_p = in_range("top_p", self.top_p, f64::MIN_POSITIVE, 1.0)?.unwrap_or(1.0);
        let min_p = in_range("min_p", self.min_p, 0.0, 1.0)?.unwrap_or(0.0);
        let top_k = match self.top_k {
            None | Some(0) | Some(-1) => 0,
            Some(k) if k < 0 => {
                return Err(ApiError::invalid(
                    Some("top_k"),
                    "`top_k` must be 0 (off) or positive",
                ))
            }
            Some(k) => k.min(u32::MAX as i64) as usize,
        };
        let stop = match self.stop {
            None => Vec::new(),
            Some(StopField::One(s)) => vec![s],
            Some(StopField::Many(v)) => v,
        };
        if stop.len() > limits.max_stop_strings {
            return Err(ApiError::invalid(
                Some("stop"),
                format!("at most {} stop strings", limits.max_stop_strings),
            ));
        }
        if stop.iter().any(|s| s.len() > limits.max_stop_len) {
            return Err(ApiError::invalid(
                Some("stop"),
                format!("stop strings are at most {} bytes", limits.max_stop_len),
            ));
        }
        let workload = self
            .workload
            .as_deref()
            .or(workload_header)
            .map(|w| {
                w.parse::<WorkloadClass>()
                    .map_err(|e| ApiError::invalid(Some("workload"), e.to_string()))
            })
            .transpose()?;
        let speculation = speculation(self.speculation, limits.max_k)?;
        let stream = self.stream.unwrap_or(false);
        let include_usage = self.stream_options.is_some_and(|o| o.include_usage);
        Ok(GenerationRequest {
            messages: None,
            prompt: None,
            max_tokens,
            sampling: SamplingParams {
                temperature: temperature as f32,
                top_k,
                top_p: top_p as f32,
                min_p: min_p as f32,
            },
            // A request without a seed still gets reproducible rounds; OpenAI's seed is i64.
            seed: self.seed.map_or(0, |s| s as u64),
            stop,
            stream,
            include_usage,
            workload,
            speculation,
        })
    }
}

fn speculation(field: Option<SpeculationField>, max_k: usize) -> Result<SpecOverride, ApiError> {
    let Some(f) = field else {
        return Ok(SpecOverride::Default);
    };
    if f.enabled == Some(false) {
        return Ok(SpecOverride::Disabled);
    }
    let strategy = f
        .strategy
        .map(|s| {
            s.parse::<StrategyKind>()
                .map_err(|e| ApiError::invalid(Some("speculation.strategy"), e.to_string()))
        })
        .transpose()?;
    let k = match f.k {
        None => None,
        Some(k) if k < 0 || k as u64 > max_k as u64 => {
            return Err(ApiError::invalid(
                Some("speculation.k"),
                format!("`speculation.k` must be between 0 and {max_k}"),
            ))
        }
        Some(k) => Some(k as usize),
    };
    Ok(SpecOverride::Use { strategy, k })
}
