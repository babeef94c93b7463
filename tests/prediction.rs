//! Predicted outputs (OpenAI's `prediction`) through the gateway, on the real model: a right
//! prediction is drafted from and cuts target passes; a wrong or edited one never changes
//! the greedy answer.

mod common;

use common::server::Server;
use serde_json::{json, Value};

const TOKENS: usize = 64;

fn code_edit_prompt() -> String {
    let line = common::fixture("prompts/code_edit.jsonl");
    let v: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    v["prompt"].as_str().unwrap().to_string()
}

/// The answer's text, completion tokens and target passes.
fn ask(s: &Server, key: &str, prompt: &str, extra: Value) -> (String, u64, u64) {
    let v = ask_full(s, key, prompt, extra);
    let usage = &v["usage"];
    (
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string(),
        usage["completion_tokens"].as_u64().unwrap(),
        usage["speculative"]["target_passes"].as_u64().unwrap(),
    )
}

fn ask_full(s: &Server, key: &str, prompt: &str, extra: Value) -> Value {
    let body = s.chat_body(prompt, TOKENS, extra);
    let (status, v) = s.post("/v1/chat/completions", key, &body);
    assert_eq!(status, 200, "{v}");
    v
}

#[test]
fn a_prediction_drafts_and_never_changes_the_answer() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    let prompt = code_edit_prompt();
    let (want, n, plain_passes) = ask(
        &s,
        &key,
        &prompt,
        json!({"speculation": {"enabled": false}}),
    );
    assert_eq!(plain_passes, n, "plain decoding: a pass a token");
    // ngram drafts little on its own here; the prediction does the drafting.
    let spec = json!({"strategy": "ngram", "k": 8});
    let predicted = |p: Value| json!({"speculation": spec, "prediction": p});

    let (text, _, passes) = ask(
        &s,
        &key,
        &prompt,
        predicted(json!({"type": "content", "content": want})),
    );
    assert_eq!(text, want);
    assert!(
        passes * 3 <= n,
        "a right prediction: {passes} passes for {n} tokens"
    );

    // As content parts too.
    let parts = json!({"type": "content", "content": [{"type": "text", "text": want}]});
    let v = ask_full(&s, &key, &prompt, predicted(parts));
    assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
    // OpenAI's usage breakdown: most of the answer came from the prediction.
    let details = &v["usage"]["completion_tokens_details"];
    let accepted = details["accepted_prediction_tokens"].as_u64().unwrap();
    assert!(accepted * 2 >= n, "{v}");
    assert!(accepted <= v["usage"]["speculative"]["accepted"].as_u64().unwrap());
    assert!(details["rejected_prediction_tokens"].is_u64(), "{v}");
    assert!(s.metric("specgate_prediction_tokens_total") >= accepted as f64);
    let plain = ask_full(
        &s,
        &key,
        &prompt,
        json!({"speculation": {"enabled": false}}),
    );
    assert!(plain["usage"].get("completion_tokens_details").is_none());

    // An edit in the middle: the output leaves the prediction and finds its place again.
    let words: Vec<&str> = want.split(' ').collect();
    let mid = words.len() / 2;
    let edited = [&words[..mid], &["banana", "split"], &words[mid + 1..]]
        .concat()
        .join(" ");
    let (text, _, edited_passes) = ask(
        &s,
        &key,
        &prompt,
        predicted(json!({"type": "content", "content": edited})),
    );
    assert_eq!(text, want);
    assert!(
        edited_passes * 2 <= n,
        "an edited prediction: {edited_passes} passes for {n} tokens"
    );

    // A wrong one costs rejected drafts, never the answer.
    let wrong = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    let (text, _, wrong_passes) = ask(
        &s,
        &key,
        &prompt,
        predicted(json!({"type": "content", "content": wrong})),
    );
    assert_eq!(text, want);
    eprintln!(
        "{n} tokens: target passes {passes} (right), {edited_passes} (edited), {wrong_passes} (wrong)"
    );

    // Only `content` predictions exist.
    let mut bad = json!({"model": s.model_id, "messages": [{"role": "user", "content": "hi"}]});
    bad["prediction"] = json!({"type": "diff", "content": "x"});
    let (status, v) = s.post("/v1/chat/completions", &key, &bad);
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("prediction.type")),
        "{v}"
    );
}

#[test]
fn a_prediction_drafts_on_a_route_whose_learner_chose_plain_decoding() {
    let s = Server::start(&[]);
    let key = s.tenant("acme");
    // ngram only, no exploration: sampled poems (little to look up) soon teach the route's
    // learner that drafting does not pay there.
    let policy = json!({"speculation": true, "allowed": ["ngram"], "k_min": 1, "k_max": 8,
                        "explore": false, "shadow_rate": 0});
    let (status, v) = s.admin("PUT", "/admin/v1/policies/acme/creative", Some(policy));
    assert_eq!(status, 200, "{v}");
    let strategy = |v: &Value| {
        v["usage"]["speculative"]["strategy"]
            .as_str()
            .map(String::from)
    };
    let poem = |seed: u64| {
        let extra = json!({"workload": "creative", "temperature": 1.5, "seed": seed});
        let v = ask_full(&s, &key, "Write a poem about the sea.", extra);
        strategy(&v)
    };
    // Whether drafting stops paying depends on the measured row cost as well as α, and on a
    // machine whose rows are cheap at that moment ngram can keep paying: then this test's
    // premise does not hold and it checks nothing rather than fail on the machine's timing
    // (one fresh-clone CI run of 40 poems at temperature 1.0 never went plain).
    // Settled: three poems in a row ran plain (one plain pick can be the measured row cost of
    // a moment; the next request then drafts again).
    let mut in_a_row = 0;
    let settled = (0..80).find(|&i| {
        in_a_row = if poem(i).as_deref() == Some("plain") {
            in_a_row + 1
        } else {
            0
        };
        in_a_row == 3
    });
    let Some(went_plain) = settled else {
        eprintln!("skipped: the route never settled on plain decoding in 80 sampled poems");
        return;
    };
    eprintln!("the route settled on plain after {} poems", went_plain + 1);

    let prompt = code_edit_prompt();
    let creative = |extra: Value| {
        let mut e = json!({"workload": "creative"});
        for (k, v) in extra.as_object().into_iter().flatten() {
            e[k] = v.clone();
        }
        ask_full(&s, &key, &prompt, e)
    };
    let plain = creative(json!({}));
    if strategy(&plain).as_deref() != Some("plain") {
        eprintln!("skipped: the route's learner left plain decoding again (it reads pass times)");
        return;
    }
    let want = plain["choices"][0]["message"]["content"].as_str().unwrap();
    let n = plain["usage"]["completion_tokens"].as_u64().unwrap();

    // The route's plan is plain, but a prediction holds the answer: it drafts, falling back
    // to the policy's lookup, and the answer stays the same.
    let v = creative(json!({"prediction": {"type": "content", "content": want}}));
    assert_eq!(v["choices"][0]["message"]["content"], want, "{v}");
    assert_eq!(strategy(&v).as_deref(), Some("ngram"), "{v}");
    let passes = v["usage"]["speculative"]["target_passes"].as_u64().unwrap();
    // k adapts to measured pass times, so the bound is loose: a right prediction drafted
    // one token a round (the prompt's pass, then two tokens a round) already meets it.
    assert!(passes * 2 <= n + 2, "{passes} passes for {n} tokens: {v}");
    // The route itself stays plain: predicted requests do not teach its learner.
    assert_eq!(strategy(&creative(json!({}))).as_deref(), Some("plain"));
}
