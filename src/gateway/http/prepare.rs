//! From a validated request to the job the engine runs: the chat template, tokens, the
//! completion budget the context leaves, and the workload class.

use specgate_policies::classify;

use crate::engine::generate::GenerateParams;
use crate::engine::RouteLabels;
use crate::gateway::actors::request::Job;
use crate::gateway::error::ApiError;
use crate::gateway::http::requests::{GenerationRequest, RequestLimits};
use crate::model::loaded::chat_prompt;
use crate::model::tokenizer::Tokenizer;

/// Template, tokenize, check the context, classify: the job the engine will run.
pub fn prepare(
    tokenizer: &Tokenizer,
    limits: &RequestLimits,
    tenant: String,
    r: &GenerationRequest,
) -> Result<Job, ApiError> {
    let (text, user_text, param) = match (&r.messages, &r.prompt) {
        (Some(messages), _) => {
            let text = chat_prompt(tokenizer, messages)
                .map_err(|e| ApiError::invalid(Some("messages"), e.to_string()))?;
            let user: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
            (text, user.join("\n"), "messages")
        }
        (None, Some(prompt)) => (prompt.clone(), prompt.clone(), "prompt"),
        (None, None) => return Err(ApiError::invalid(None, "no prompt")),
    };
    let prompt = tokenizer
        .encode_prompt(&text)
        .map_err(|e| ApiError::invalid(Some(param), e.to_string()))?;
    if prompt.is_empty() {
        return Err(ApiError::invalid(Some(param), "the prompt is empty"));
    }
    // Past the context it could never be reached.
    let mut prediction = match &r.prediction {
        Some(p) => tokenizer
            .encode(p)
            .map_err(|e| ApiError::invalid(Some("prediction.content"), e.to_string()))?,
        None => Vec::new(),
    };
    prediction.truncate(limits.context_length);
    let max_tokens =
        completion_budget(limits, prompt.len(), r.max_tokens).map_err(|e| e.with_param(param))?;
    Ok(Job {
        prompt,
        params: GenerateParams {
            max_tokens,
            sampling: r.sampling,
            // Unseeded sampling must differ between requests, as OpenAI's does.
            seed: r.seed.unwrap_or_else(rand::random),
            stop: r.stop.clone(),
            max_draft_tokens: 0,
            adaptive_k: false,
            row_cost: None,
        },
        route: RouteLabels {
            tenant,
            class: r.workload.unwrap_or_else(|| classify(&user_text)),
        },
        speculation: r.speculation,
        prediction,
        logprobs: r.logprobs,
        stream: r.stream,
        grammar: None,
    })
}

/// The tokens the answer may have: what the client asked for, or when it set no limit the
/// server's default capped at what the context leaves (as OpenAI and vLLM do).
pub fn completion_budget(
    limits: &RequestLimits,
    prompt: usize,
    asked: Option<usize>,
) -> Result<usize, ApiError> {
    let context = limits.context_length;
    let left = context.saturating_sub(prompt);
    match asked {
        Some(m) if m <= left => Ok(m),
        None if left > 0 => Ok(limits.default_max_tokens.min(left)),
        _ => Err(ApiError::invalid(
            None,
            format!(
                "this model's context is {context} tokens; the prompt has {prompt}{}",
                asked.map_or(String::new(), |m| format!(" and max_tokens is {m}"))
            ),
        )
        .with_code("context_length_exceeded")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(context_length: usize, default_max_tokens: usize) -> RequestLimits {
        RequestLimits {
            model_id: "m".into(),
            context_length,
            max_tokens_limit: 2048,
            default_max_tokens,
            max_stop_strings: 4,
            max_stop_len: 64,
            max_k: 16,
        }
    }

    #[test]
    fn an_unset_max_tokens_is_capped_at_what_the_context_leaves() {
        let l = limits(1000, 256);
        assert_eq!(completion_budget(&l, 100, None).unwrap(), 256);
        assert_eq!(completion_budget(&l, 900, None).unwrap(), 100);
        assert_eq!(completion_budget(&l, 999, None).unwrap(), 1);
        assert_eq!(completion_budget(&l, 900, Some(100)).unwrap(), 100);
        for (prompt, asked) in [
            (900, Some(101)),
            (1000, None),
            (1200, None),
            (1000, Some(1)),
        ] {
            let e = completion_budget(&l, prompt, asked).unwrap_err();
            assert_eq!(
                e.code,
                Some("context_length_exceeded"),
                "{prompt} {asked:?}"
            );
        }
    }
}
