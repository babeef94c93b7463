//! `n` > 1 over real HTTP: n independently sampled choices from one prompt, each the answer
//! the same request gives with n = 1 and that choice's seed, the prompt computed once (the
//! other choices start from its cached blocks), streamed with each chunk's index.

mod common;

use std::collections::BTreeMap;

use common::server::Server;
use serde_json::{json, Value};

const N: usize = 4;

#[test]
fn n_choices_are_the_n_seeded_answers_and_share_one_prefill() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    // Long enough for several full cache blocks.
    let prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle. \
                  Describe the storm, the bottle, the letter inside and what the keeper does next."
        .repeat(2);
    let body = |n: usize, seed: u64, extra: Value| {
        s.chat_body(
            &prompt,
            24,
            json!({"n": n, "seed": seed, "temperature": 0.9, "top_k": 40,
                   "speculation": {"strategy": "ngram", "k": 3}}),
        )
        .as_object()
        .unwrap()
        .clone()
        .into_iter()
        .chain(extra.as_object().unwrap().clone())
        .collect::<serde_json::Map<_, _>>()
    };
    let hits = s.metric("specgate_prefix_cache_hits_total");
    let (status, all) = s.post(
        "/v1/chat/completions",
        &key,
        &Value::Object(body(N, 7, json!({}))),
    );
    assert_eq!(status, 200, "{all}");
    let shared = s.metric("specgate_prefix_cache_hits_total") - hits;
    let prompt_tokens = all["usage"]["prompt_tokens"].as_u64().unwrap();
    eprintln!(
        "{N} choices of a {prompt_tokens}-token prompt: {shared} prompt tokens from the cache"
    );
    // Choices 1..n took the first one's full blocks of the prompt instead of computing them.
    assert!(
        shared >= ((N - 1) as u64 * (prompt_tokens / 2)) as f64,
        "{shared} cached tokens for {N} choices of a {prompt_tokens}-token prompt"
    );
    let choices = all["choices"].as_array().unwrap();
    assert_eq!(choices.len(), N);
    let mut completion = 0;
    let mut texts = Vec::new();
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i, "{all}");
        let (status, one) = s.post(
            "/v1/chat/completions",
            &key,
            &Value::Object(body(1, 7 + i as u64, json!({}))),
        );
        assert_eq!(status, 200, "{one}");
        assert_eq!(c["message"], one["choices"][0]["message"], "choice {i}");
        completion += one["usage"]["completion_tokens"].as_u64().unwrap();
        texts.push(c["message"]["content"].as_str().unwrap().to_string());
    }
    assert!(
        texts.iter().any(|t| t != &texts[0]),
        "sampled choices differ: {texts:?}"
    );
    assert_eq!(all["usage"]["completion_tokens"], completion);
    assert_eq!(all["usage"]["prompt_tokens"], prompt_tokens);

    // Streamed: each index's deltas spell its choice; one usage chunk, one [DONE].
    let streamed = s.stream(
        "/v1/chat/completions",
        &key,
        &Value::Object(body(
            N,
            7,
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        )),
    );
    assert!(streamed.done);
    let mut by_index: BTreeMap<u64, String> = BTreeMap::new();
    for e in &streamed.events {
        for c in e["choices"].as_array().into_iter().flatten() {
            let text = c["delta"]["content"].as_str().unwrap_or_default();
            *by_index.entry(c["index"].as_u64().unwrap()).or_default() += text;
        }
    }
    assert_eq!(by_index.into_values().collect::<Vec<_>>(), texts);
    assert_eq!(streamed.usage.unwrap()["completion_tokens"], completion);

    let (status, v) = s.post(
        "/v1/chat/completions",
        &key,
        &Value::Object(body(9, 7, json!({}))),
    );
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("n")),
        "{v}"
    );
}
