//! Log-probabilities (OpenAI's `logprobs`) through the gateway, on the real model: one per
//! generated token, spelling the answer, the target's own whether or not the request
//! speculates, the same streamed or not; bad values get a 400 naming the field.

mod common;

use common::server::Server;
use serde_json::{json, Value};

const TOKENS: usize = 40;

fn code_edit_prompt() -> String {
    let line = common::fixture("prompts/code_edit.jsonl");
    let v: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    v["prompt"].as_str().unwrap().to_string()
}

fn content(v: &Value) -> Vec<Value> {
    v["choices"][0]["logprobs"]["content"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no logprobs.content: {v}"))
}

fn bytes(v: &Value) -> Vec<u8> {
    v["bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect()
}

#[test]
fn chat_logprobs_spell_the_answer_and_speculation_does_not_change_them() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let prompt = code_edit_prompt();
    let lp = json!({"logprobs": true, "top_logprobs": 3});
    let ask = |spec: Value| {
        let mut extra = lp.clone();
        extra["speculation"] = spec;
        let (status, v) = s.post(
            "/v1/chat/completions",
            &key,
            &s.chat_body(&prompt, TOKENS, extra),
        );
        assert_eq!(status, 200, "{v}");
        v
    };
    let plain = ask(json!({"enabled": false}));
    let spec = ask(json!({"strategy": "suffix", "k": 6}));
    assert!(
        spec["usage"]["speculative"]["accepted"].as_u64().unwrap() > 0,
        "the speculative request must commit drafts for the comparison to mean anything: {spec}"
    );
    let text = plain["choices"][0]["message"]["content"].as_str().unwrap();
    let n = plain["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    let (want, got) = (content(&plain), content(&spec));
    assert_eq!(want.len(), n, "one entry per generated token");
    let spelled: Vec<u8> = want.iter().flat_map(bytes).collect();
    assert_eq!(String::from_utf8(spelled).unwrap(), text);
    for (i, e) in want.iter().enumerate() {
        let logprob = e["logprob"].as_f64().unwrap();
        let top = e["top_logprobs"].as_array().unwrap();
        assert!(logprob <= 0.0 && top.len() == 3, "token {i}: {e}");
        let tops: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(tops.windows(2).all(|w| w[0] >= w[1]), "token {i}: {e}");
        // Greedy: the chosen token is the likeliest, or tied with it.
        assert!(
            top[0]["token"] == e["token"] || tops[0] == logprob,
            "token {i}: {e}"
        );
    }
    // The verify pass's rows are computed with the same bits as plain decoding's.
    assert_eq!(got, want, "speculative against plain");

    // Streamed, the chunks' entries add up to the same list.
    let mut body = s.chat_body(&prompt, TOKENS, lp.clone());
    body["stream"] = json!(true);
    let r = s.stream("/v1/chat/completions", &key, &body);
    let streamed = r.logprobs;
    assert_eq!(streamed.len(), want.len());
    for (a, b) in streamed.iter().zip(&want) {
        assert_eq!((&a["token"], &a["logprob"]), (&b["token"], &b["logprob"]));
    }

    // Without the field: null, as before.
    let (_, v) = s.post(
        "/v1/chat/completions",
        &key,
        &s.chat_body(&prompt, 4, json!({})),
    );
    assert!(v["choices"][0]["logprobs"].is_null(), "{v}");
}

#[test]
fn streamed_entries_arrive_with_the_text_of_their_tokens() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    // A stop string whose start is common in code: text after each newline is held back
    // while it could still be the stop string, and its tokens' entries must wait with it.
    for spec in [
        json!({"enabled": false}),
        json!({"strategy": "suffix", "k": 6}),
    ] {
        let extra = json!({"logprobs": true, "stream": true, "temperature": 0,
                           "stream_options": {"include_usage": true},
                           "stop": ["\n    return None  # unreachable"], "speculation": spec});
        let body = s.chat_body(&code_edit_prompt(), TOKENS, extra);
        let r = s.stream("/v1/chat/completions", &key, &body);
        let tokens: Vec<Vec<u8>> = r.logprobs.iter().map(bytes).collect();
        let (mut text, mut sent) = (Vec::new(), 0);
        let last = r.pieces.len().saturating_sub(1);
        for (i, (piece, entries)) in r.pieces.iter().enumerate() {
            text.extend_from_slice(piece.as_bytes());
            sent += entries;
            if i == last {
                break; // the finish chunk: every entry left is sent
            }
            // Entries never run ahead of the text, nor lag it by more than the one token
            // whose text is still partly held back.
            let spelled = tokens[..sent].concat();
            assert!(
                text.starts_with(&spelled),
                "{spec}, chunk {i}: entries {:?} ahead of text {:?}",
                String::from_utf8_lossy(&spelled),
                String::from_utf8_lossy(&text)
            );
            let shown = &text[spelled.len()..];
            assert!(
                shown.is_empty()
                    || tokens
                        .get(sent)
                        .is_some_and(|next| next.len() > shown.len() && next.starts_with(shown)),
                "{spec}, chunk {i}: text {:?} shown without its entries",
                String::from_utf8_lossy(shown)
            );
        }
        assert_eq!(
            tokens.concat(),
            text,
            "{spec}: in the end the entries spell the answer"
        );
        let newlines = r.text.matches('\n').count();
        assert!(
            newlines >= 3,
            "the answer must hold back text for the check to bite: {:?}",
            r.text
        );
        if spec["strategy"] == "suffix" {
            let accepted = r
                .usage
                .as_ref()
                .map(|u| u["speculative"]["accepted"].clone());
            assert!(
                accepted
                    .as_ref()
                    .and_then(Value::as_u64)
                    .is_some_and(|a| a > 0),
                "rounds must commit several tokens for this run to mean anything: {accepted:?}"
            );
        }
    }
}

#[test]
fn completions_logprobs_are_parallel_lists_and_bad_values_are_refused() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let body = json!({"model": s.model_id, "prompt": "The capital of France is",
                      "max_tokens": 12, "temperature": 0, "logprobs": 2});
    let (status, v) = s.post("/v1/completions", &key, &body);
    assert_eq!(status, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    let n = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tokens.len(), n, "{v}");
    assert_eq!(tokens.concat(), v["choices"][0]["text"].as_str().unwrap());
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), n);
    // Greedy: the chosen token is among the two likeliest (OpenAI adds it when it is not).
    let tops = lp["top_logprobs"].as_array().unwrap();
    for (t, top) in tokens.iter().zip(tops) {
        let top = top.as_object().unwrap();
        assert!(top.len() == 2 && top.contains_key(*t), "{t:?}: {top:?}");
        // Likeliest first, as OpenAI lists them (the document's order, not the keys').
        let values: Vec<f64> = top.values().map(|x| x.as_f64().unwrap()).collect();
        assert!(values[0] >= values[1], "{t:?}: {top:?}");
    }
    let offsets: Vec<u64> = lp["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_u64().unwrap())
        .collect();
    let starts: Vec<u64> = (0..n)
        .map(|i| tokens[..i].concat().chars().count() as u64)
        .collect();
    assert_eq!(offsets, starts);

    // Sampled: the chosen token's probability is the target's, whatever the temperature.
    let mut sampled = body.clone();
    sampled["temperature"] = json!(1.5);
    sampled["seed"] = json!(7);
    let (status, v) = s.post("/v1/completions", &key, &sampled);
    assert_eq!(status, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    let lps = lp["token_logprobs"].as_array().unwrap();
    assert!(
        lps.iter().all(|x| x.as_f64().is_some_and(|x| x <= 0.0)),
        "{v}"
    );
    let tokens = lp["tokens"].as_array().unwrap();
    for (t, top) in tokens.iter().zip(lp["top_logprobs"].as_array().unwrap()) {
        let top = top.as_object().unwrap();
        let has = top.contains_key(t.as_str().unwrap());
        assert!((2..=3).contains(&top.len()) && has, "{v}");
    }

    let chat = |extra: Value| s.chat_body("Say hi.", 4, extra);
    let completion =
        |lp: Value| json!({"model": s.model_id, "prompt": "Hi", "max_tokens": 4, "logprobs": lp});
    let bad = [
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": true, "top_logprobs": 21})),
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"top_logprobs": 2})),
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": "yes"})),
            "logprobs",
        ),
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": true, "top_logprobs": 2.5})),
            "top_logprobs",
        ),
        ("/v1/completions", completion(json!(6)), "logprobs"),
        ("/v1/completions", completion(json!(true)), "logprobs"),
        ("/v1/completions", completion(json!(-1)), "logprobs"),
    ];
    for (path, body, param) in bad {
        let (status, v) = s.post(path, &key, &body);
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"]["param"].as_str(), Some(param), "{body}: {v}");
    }
    // The neutral values clients send as a matter of course still pass.
    let neutral = [
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": false, "top_logprobs": 0})),
        ),
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": null, "top_logprobs": 0.0})),
        ),
        ("/v1/completions", completion(json!(false))),
        ("/v1/completions", completion(json!(null))),
    ];
    for (path, body) in neutral {
        let (status, v) = s.post(path, &key, &body);
        assert_eq!(status, 200, "{body}: {v}");
        assert!(v["choices"][0]["logprobs"].is_null(), "{v}");
    }
}
