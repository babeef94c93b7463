//! Hostile input never panics: arbitrary JSON (biased toward the fields the API knows),
//! arbitrary bytes, huge numbers, lone-surrogate escapes and deep nesting go through request
//! parsing and validation, and what validates goes on through the chat template and the real
//! model's tokenizer — exactly the path a request takes before the engine. Each property runs
//! `PROPTEST_CASES` cases (default below); the closing note reports the counts.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Map, Value};
use specgate::gateway::http::requests::{
    parse_body, ChatRequest, CompletionRequest, GenerationRequest, RequestLimits,
};
use specgate::model::loaded::chat_prompt;
use specgate::model::tokenizer::Tokenizer;

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
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
    "role",
    "content",
    "name",
    "type",
    "text",
    "include_usage",
    "enabled",
    "strategy",
    "k",
    "echo",
    "best_of",
    "suffix",
    // OpenAI fields accepted only at their neutral value, and assistant replay fields.
    "tools",
    "tool_choice",
    "response_format",
    "top_logprobs",
    "metadata",
    "modalities",
    "prediction",
    "reasoning_effort",
    "refusal",
    "tool_calls",
    "include_obfuscation",
];

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

fn limits() -> RequestLimits {
    RequestLimits {
        model_id: MODEL.into(),
        context_length: 8192,
        max_tokens_limit: 2048,
        default_max_tokens: 16,
        max_stop_strings: 4,
        max_stop_len: 256,
        max_n: 8,
        max_k: 16,
        vocab_size: 49152,
    }
}

fn tokenizer() -> Arc<Tokenizer> {
    Arc::clone(&common::model().tokenizer)
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(MODEL.to_string()),
        prop::sample::select(vec![
            "user",
            "system",
            "assistant",
            "developer",
            "text",
            "ngram",
            "suffix",
            "early-exit",
            "draft",
            "code_edit",
            "rag",
            "<|im_start|>",
            "<|im_end|>",
            "{{ x }}",
            "{% if %}",
        ])
        .prop_map(String::from),
        any::<String>(),
        "\\PC{0,40}",
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-3i64..20).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-1.0f64..3.0).prop_map(Value::from),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            prop::sample::select(FIELDS).prop_map(String::from),
            "[a-z_]{1,8}"
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A body shaped like a real request, with any field replaced by anything.
fn request_like() -> impl Strategy<Value = Value> {
    let message = (text(), prop_oneof![text().prop_map(Value::String), json()])
        .prop_map(|(role, content)| serde_json::json!({"role": role, "content": content}));
    (
        any::<bool>(),
        prop::collection::vec(message, 0..4),
        text(),
        prop::collection::vec((prop::sample::select(FIELDS), json()), 0..3),
    )
        .prop_map(|(chat, messages, prompt, extra)| {
            let mut v = if chat {
                serde_json::json!({"model": MODEL, "messages": messages})
            } else {
                serde_json::json!({"model": MODEL, "prompt": prompt})
            };
            for (k, x) in extra {
                v[k] = x;
            }
            v
        })
}

/// What a handler does with a body, short of the engine; how many requests validated.
fn run_request(body: &[u8], tok: &Tokenizer) -> usize {
    let lim = limits();
    let validated: Vec<GenerationRequest> = [
        parse_body::<ChatRequest>(body).and_then(|r| r.validate(&lim, Some("rag"))),
        parse_body::<CompletionRequest>(body).and_then(|r| r.validate(&lim, None)),
    ]
    .into_iter()
    .filter_map(Result::ok)
    .collect();
    let n = validated.len();
    for r in validated {
        if let Some(messages) = &r.messages {
            if let Ok(prompt) = chat_prompt(tok, messages) {
                let _ = tok.encode(&prompt);
            }
        }
        if let Some(prompt) = &r.prompt {
            let _ = tok.encode(prompt);
        }
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_json_never_panics(v in json()) {
        run_request(v.to_string().as_bytes(), &tokenizer());
    }

    #[test]
    fn request_shaped_json_never_panics(v in request_like()) {
        run_request(v.to_string().as_bytes(), &tokenizer());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        run_request(&bytes, &tokenizer());
    }
}

/// The request-shaped strategy is not vacuous: many of its bodies validate and so reach the
/// chat template and the tokenizer.
#[test]
fn request_shaped_bodies_reach_the_tokenizer() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let tok = tokenizer();
    let strategy = request_like();
    let valid: usize = (0..400)
        .map(|_| {
            let v = strategy.new_tree(&mut runner).expect("value").current();
            run_request(v.to_string().as_bytes(), &tok)
        })
        .sum();
    assert!(valid >= 60, "only {valid} of 400 validated");
}

#[test]
fn edge_cases_get_errors_not_panics() {
    let tok = tokenizer();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let m = format!(r#""model": "{MODEL}""#);
    let bodies = [
        format!(r#"{{{m}, "messages": [{{"role": "user", "content": "\ud800"}}]}}"#),
        format!(r#"{{{m}, "messages": [{{"role": "user", "content": "\udfff\ud800x"}}]}}"#),
        format!(r#"{{{m}, "messages": [{{"role": "user", "content": "a\u0000b"}}]}}"#),
        format!(r#"{{{m}, "prompt": "x", "max_tokens": 1e400}}"#),
        format!(r#"{{{m}, "prompt": "x", "max_tokens": 18446744073709551616}}"#),
        format!(r#"{{{m}, "prompt": "x", "temperature": -0.0, "top_k": -9223372036854775808}}"#),
        format!(r#"{{{m}, "prompt": "x", "seed": -1, "stop": ["", "", ""]}}"#),
        format!(r#"{{{m}, "prompt": ["a", "b"]}}"#),
        format!(r#"{{{m}, "prompt": "{}"}}"#, "x".repeat(100_000)),
        deep,
        "\u{feff}{}".to_string(),
        "{\"model\": \"".to_string(),
        // A one-key response_format without "type" (once a panic).
        format!(r#"{{{m}, "prompt": "x", "response_format": {{"json_schema": {{}}}}}}"#),
    ];
    let valid: Vec<usize> = (0..bodies.len())
        .filter(|&i| run_request(bodies[i].as_bytes(), &tok) > 0)
        .collect();
    // A NUL, a -1 seed with empty stop strings and a long prompt are valid requests (the
    // context check comes after tokenizing); lone surrogates are not valid JSON text.
    assert_eq!(valid, vec![2, 6, 8]);
    // And they are refused, not accepted, where they are invalid.
    let lim = limits();
    let huge =
        parse_body::<CompletionRequest>(bodies[3].as_bytes()).and_then(|r| r.validate(&lim, None));
    assert_eq!(huge.err().map(|e| e.status), Some(400));
}
