//! From a validated request to the job the engine runs: the chat template, tokens, the
//! completion budget the context leaves, and the workload class.

use specgate_policies::{classify, WorkloadClass};

use crate::constraint::tools::{call_grammar, offer_tools, ToolSpec};
use crate::constraint::{GrammarError, GrammarSpec, LazyGrammars};
use crate::engine::generate::GenerateParams;
use crate::engine::RouteLabels;
use crate::gateway::actors::request::Job;
use crate::gateway::error::ApiError;
use crate::gateway::http::requests::OutputFormat;
use crate::gateway::http::requests::{GenerationRequest, RequestLimits};
use crate::model::loaded::chat_prompt;
use crate::model::tokenizer::Tokenizer;
use specgate_strategies::TokenConstraint;

/// Template, tokenize, check the context, compile the output's grammar, classify: the job
/// the engine will run.
pub fn prepare(
    tokenizer: &Tokenizer,
    grammars: &LazyGrammars,
    limits: &RequestLimits,
    tenant: String,
    r: &GenerationRequest,
) -> Result<Job, ApiError> {
    let (spec, offered) = output_grammar(&r.output)?;
    let (text, user_text, param) = match (&r.messages, &r.prompt) {
        (Some(messages), _) => {
            let with_tools = offered.map(|t| offer_tools(messages, t));
            let messages = with_tools.as_deref().unwrap_or(messages);
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
            penalties: r.penalties.clone(),
        },
        route: RouteLabels {
            tenant: tenant.clone(),
            // A constrained answer accepts unlike its text's class: its own route.
            class: if spec.is_some() {
                WorkloadClass::Structured
            } else {
                r.workload.unwrap_or_else(|| classify(&user_text))
            },
        },
        speculation: r.speculation,
        prediction,
        logprobs: r.logprobs,
        stream: r.stream,
        grammar: spec.map(|s| compile(grammars, &s, &r.output)).transpose()?,
        // Set by the handler once it knows the tenant's scope and share.
        cache: None,
        share: crate::scheduler::Share::standard(tenant.as_str()),
    })
}

/// The grammar a request's output must follow, and the tools its prompt offers.
fn output_grammar(
    output: &OutputFormat,
) -> Result<(Option<GrammarSpec>, Option<&[ToolSpec]>), ApiError> {
    Ok(match output {
        OutputFormat::Text => (None, None),
        OutputFormat::Grammar(g, _) => (Some(g.clone()), None),
        OutputFormat::Tools(t) => {
            let g = call_grammar(&t.tools, &t.choice, t.parallel, t.answer.as_ref())
                .map_err(|e| ApiError::invalid(Some("tools"), e.to_string()))?;
            (g, Some(&t.tools))
        }
    })
}

/// Compile in the handler: a grammar that cannot be used is the client's 400, never the
/// engine's failure.
fn compile(
    grammars: &LazyGrammars,
    spec: &GrammarSpec,
    output: &OutputFormat,
) -> Result<Box<dyn TokenConstraint>, ApiError> {
    let param = match output {
        OutputFormat::Grammar(_, from) => from,
        _ => "tools",
    };
    let engine = grammars
        .get()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    engine.compile(spec).map_err(|e| match e {
        GrammarError::Invalid(why) => ApiError::invalid(
            Some(param),
            format!("the output grammar cannot be used: {why}"),
        )
        .with_code("invalid_grammar"),
        GrammarError::Setup(why) => ApiError::internal(why),
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
            max_n: 8,
            max_k: 16,
            vocab_size: 100,
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
