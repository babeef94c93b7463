//! Validation of the OpenAI request bodies into one [`GenerationRequest`]: every rule with
//! the parameter it names and the reason, as a 4xx in OpenAI's error format. Pure.

use specgate_policies::WorkloadClass;
use specgate_strategies::{SamplingParams, StrategyKind};

use crate::engine::logprobs::MAX_TOP_LOGPROBS;
use crate::gateway::error::ApiError;
use crate::gateway::http::penalties::{penalties, PenaltyFields};
use crate::gateway::http::replay::{earlier_calls, turn};
use crate::gateway::http::requests::{
    ChatRequest, CommonFields, CompletionRequest, GenerationRequest, PredictionField, PromptField,
    RequestLimits, SpecOverride, SpeculationField, StopField,
};
use crate::gateway::http::structured;

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
                "system" | "user" | "assistant" | "developer" | "tool"
            ) {
                return Err(ApiError::invalid(
                    Some(&param),
                    format!(
                        "unsupported role {:?} (system, user, assistant, tool)",
                        m.role
                    ),
                ));
            }
            if m.role == "tool" && m.tool_call_id.as_deref().is_none_or(str::is_empty) {
                return Err(ApiError::invalid(
                    Some(&format!("{param}.tool_call_id")),
                    "a `tool` message needs `tool_call_id`: the id of the call it answers",
                ));
            }
            let calls = earlier_calls(&param, &m)?;
            if let Some(field) = m.unsupported_field() {
                return Err(ApiError::invalid(
                    Some(&format!("{param}.{field}")),
                    format!("`{field}` is not supported; only null or empty is accepted"),
                )
                .with_code("unsupported_parameter"));
            }
            let content = match m.content {
                None if m.role == "assistant" => String::new(),
                None => {
                    return Err(ApiError::invalid(
                        Some(&format!("{param}.content")),
                        "`content` is required (null only on an assistant message)",
                    ))
                }
                Some(c) => c.into_text(&param)?,
            };
            out.push(turn(m.role, content, &calls));
        }
        let tools = structured::tools(
            self.tools.as_ref(),
            self.tool_choice.as_ref(),
            self.parallel_tool_calls.as_ref(),
        )?;
        // The shared fields (model first) are checked before the endpoint's logprobs.
        let logprobs = self.common.logprobs.clone();
        let mut req = self.common.validate(limits, workload_header)?;
        if tools.is_some() {
            req.output = structured::output_format(req.output.grammar(), tools)?;
        }
        req.messages = Some(out);
        req.logprobs = chat_logprobs(logprobs.as_ref(), self.top_logprobs)?;
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
        let logprobs = self.common.logprobs.clone();
        let mut req = self.common.validate(limits, workload_header)?;
        req.prompt = Some(prompt);
        req.logprobs = completion_logprobs(logprobs.as_ref())?;
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
        let n = match self.n {
            None => 1,
            Some(n) if n >= 1 && n as u64 <= limits.max_n as u64 => n as usize,
            Some(n) => {
                return Err(ApiError::invalid(
                    Some("n"),
                    format!("`n` must be from 1 to {}, got {n}", limits.max_n),
                ))
            }
        };
        let penalties = penalties(
            PenaltyFields {
                presence: self.presence_penalty,
                frequency: self.frequency_penalty,
                repetition: self.repetition_penalty,
                logit_bias: self.logit_bias,
            },
            limits.vocab_size,
        )?;
        let (param, max) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        let max_tokens = match max {
            None => None,
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
            Some(m) => Some(m as usize),
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
        let prediction = prediction(self.prediction)?;
        let stream = self.stream.unwrap_or(false);
        let include_usage = self.stream_options.is_some_and(|o| o.include_usage);
        let grammar = structured::grammar_of(
            structured::response_format(self.response_format.as_ref())?,
            structured::structured_outputs(self.structured_outputs.as_ref())?,
        )?
        .map(|(g, from)| {
            let body = match from {
                "structured_outputs" => self.structured_outputs.as_ref(),
                _ => self.response_format.as_ref(),
            };
            (g, structured::grammar_field(from, body))
        });
        let output = structured::output_format(grammar, None)?;
        Ok(GenerationRequest {
            messages: None,
            prompt: None,
            max_tokens,
            n,
            sampling: SamplingParams {
                temperature: temperature as f32,
                top_k,
                top_p: top_p as f32,
                min_p: min_p as f32,
            },
            penalties,
            // OpenAI's seed is i64; none → the shell draws one per request.
            seed: self.seed.map(|s| s as u64),
            stop,
            stream,
            include_usage,
            cache_prompt: self.cache_prompt.unwrap_or(true),
            workload,
            speculation,
            prediction,
            logprobs: None,
            output,
        })
    }
}

/// Chat's `logprobs` (a boolean) and `top_logprobs` (0 to 20 alternatives, with `logprobs`
/// true) as the alternatives to report, or None.
fn chat_logprobs(
    logprobs: Option<&serde_json::Value>,
    top: Option<f64>,
) -> Result<Option<usize>, ApiError> {
    let on = match logprobs {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid(
                Some("logprobs"),
                "`logprobs` must be a boolean",
            ))
        }
    };
    // A whole number, written as an integer or not (0.0 is what some clients send).
    let max = MAX_TOP_LOGPROBS as f64;
    match top {
        Some(n) if !(0.0..=max).contains(&n) || n.fract() != 0.0 => Err(ApiError::invalid(
            Some("top_logprobs"),
            format!("`top_logprobs` must be a whole number between 0 and {max}, got {n}"),
        )),
        Some(n) if n > 0.0 && !on => Err(ApiError::invalid(
            Some("top_logprobs"),
            "`top_logprobs` needs `logprobs` set to true",
        )),
        _ => Ok(on.then(|| top.unwrap_or(0.0) as usize)),
    }
}

/// The completions endpoint's `logprobs`: how many alternatives (0 to 5) to report, or None
/// (null, or false as some clients send).
fn completion_logprobs(logprobs: Option<&serde_json::Value>) -> Result<Option<usize>, ApiError> {
    let v = match logprobs {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => {
            return Ok(None)
        }
        Some(v) => v,
    };
    match v.as_u64() {
        Some(n) if n <= COMPLETION_MAX_LOGPROBS => Ok(Some(n as usize)),
        _ => Err(ApiError::invalid(
            Some("logprobs"),
            format!(
                "`logprobs` must be an integer between 0 and {COMPLETION_MAX_LOGPROBS}, got {v}"
            ),
        )),
    }
}

/// OpenAI's limit for the completions endpoint.
const COMPLETION_MAX_LOGPROBS: u64 = 5;

/// The predicted output's text; only `{"type": "content"}` exists.
fn prediction(field: Option<PredictionField>) -> Result<Option<String>, ApiError> {
    let Some(p) = field else {
        return Ok(None);
    };
    if p.kind != "content" {
        return Err(ApiError::invalid(
            Some("prediction.type"),
            format!("unsupported prediction type {:?} (content)", p.kind),
        ));
    }
    p.content.into_text("prediction.content").map(Some)
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
