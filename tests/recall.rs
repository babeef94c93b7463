//! A prompt sent again drafts from its earlier answer in the tenant's suffix cache, whatever
//! the route learned for fresh prompts, on the real model; the answer stays the plain one.

mod common;

use common::server::Server;
use serde_json::{json, Value};

const TOKENS: usize = 64;

fn code_edit_prompts() -> Vec<String> {
    common::fixture("prompts/code_edit.jsonl")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["prompt"].as_str().unwrap().to_string()
        })
        .collect()
}

fn ask(s: &Server, key: &str, prompt: &str, extra: Value) -> Value {
    ask_up_to(s, key, prompt, TOKENS, extra)
}

fn ask_up_to(s: &Server, key: &str, prompt: &str, tokens: usize, extra: Value) -> Value {
    let mut body = s.chat_body(prompt, tokens, extra);
    body["workload"] = json!("code_edit");
    let (status, v) = s.post("/v1/chat/completions", key, &body);
    assert_eq!(status, 200, "{v}");
    v
}

fn text(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap()
}

#[test]
fn a_repeated_prompt_drafts_from_its_earlier_answer_and_keeps_it() {
    // Uniform priors: with the shipped ones the class's suffix evidence would make suffix the
    // route's plan for fresh prompts too, and the test could not tell recall from the plan.
    let dir = tempfile::tempdir().expect("temp dir");
    let priors = common::uniform_priors(dir.path());
    let s = Server::start(&["--priors", priors.to_str().expect("UTF-8 path")]);
    let key = s.tenant("acme");
    // The route may use ngram or suffix and does not explore: with no evidence the two tie
    // and ngram, listed first, is its plan for fresh prompts.
    let policy = json!({"speculation": true, "allowed": ["ngram", "suffix"], "k_min": 1,
                        "k_max": 8, "explore": false, "shadow_rate": 0.0});
    let (status, v) = s.admin("PUT", "/admin/v1/policies/acme/code_edit", Some(policy));
    assert_eq!(status, 200, "{v}");
    let prompts = code_edit_prompts();

    // First seen plain: a request's text reaches its tenant's cache whatever served it, and
    // a plain request teaches the learner nothing.
    let first = ask(
        &s,
        &key,
        &prompts[0],
        json!({"speculation": {"enabled": false}}),
    );
    let n = first["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n >= 32, "{first}");

    // A stop string ends it inside a round of drafts, which are then never output.
    let stop = "This function";
    let again = ask(&s, &key, &prompts[0], json!({"stop": [stop]}));
    let usage = &again["usage"]["speculative"];
    assert_eq!(usage["strategy"], "suffix", "{again}");
    let (want, _) = text(&first)
        .split_once(stop)
        .expect("the first answer has the stop");
    assert_eq!(text(&again), want, "greedy: the same answer up to the stop");
    assert_eq!(again["choices"][0]["finish_reason"], "stop");
    let got = again["usage"]["completion_tokens"].as_u64().unwrap();
    let passes = usage["target_passes"].as_u64().unwrap();
    eprintln!("recalled: {passes} target passes for {got} tokens");
    assert!(passes * 3 <= got, "{passes} passes for {got} tokens");
    // The prompt's pass and every round but one that ends on a draft commit one token of
    // the target's own, the rest are accepted drafts: drafts past the end do not count.
    let accepted = usage["accepted"].as_u64().unwrap();
    assert!(accepted + passes <= got + 1, "{again}");
    assert_eq!(s.metric("specgate_recalled_prompts_total"), 1.0);

    // A fresh prompt runs the route's own plan (the recalled request taught the learner
    // nothing), so the test can tell the two apart.
    let fresh = ask(&s, &key, &prompts[1], json!({}));
    assert_eq!(
        fresh["usage"]["speculative"]["strategy"], "ngram",
        "{fresh}"
    );

    // Another tenant sending the same prompt recalls nothing of acme's (its plan is its
    // own learner's, from the class's evidence).
    let other = s.tenant("globex");
    let policy = json!({"speculation": true, "allowed": ["ngram", "suffix"], "k_min": 1,
                        "k_max": 8, "explore": false, "shadow_rate": 0.0});
    let (status, _) = s.admin("PUT", "/admin/v1/policies/globex/code_edit", Some(policy));
    assert_eq!(status, 200);
    let theirs = ask(&s, &other, &prompts[0], json!({}));
    assert_eq!(text(&theirs), text(&first));
    assert_eq!(s.metric("specgate_recalled_prompts_total"), 1.0, "{theirs}");
    let passes = theirs["usage"]["speculative"]["target_passes"]
        .as_u64()
        .unwrap();
    assert!(passes * 3 > n, "{theirs}");
}
