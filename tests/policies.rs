//! Routing policies through the admin API: validated, versioned, applied to the next request,
//! and still there after `kill -9`.

mod common;

use common::server::{Server, ADMIN};
use serde_json::{json, Value};

fn admin(s: &Server, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
    let req = ureq::request(method, &s.url(path))
        .set("Authorization", &format!("Bearer {token}"))
        .set("X-Admin-User", "alice");
    let r = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    match r {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("{e}"),
    }
}

fn policy(allowed: &[&str], k: usize) -> Value {
    json!({"speculation": true, "allowed": allowed, "k_min": k, "k_max": k,
           "explore": false, "shadow_rate": 0.0})
}

fn chat(s: &Server, key: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({"model": s.model_id, "messages": [{"role": "user", "content": "Say hello."}],
                          "max_tokens": 8, "temperature": 0, "workload": "chat"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    s.post("/v1/chat/completions", key, &body)
}

#[test]
fn policies_are_validated_versioned_applied_to_the_next_request_and_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start_in(dir.path(), &[]);
    let key = s.tenant("acme");
    let path = "/admin/v1/policies/acme/chat";

    // Who may call it.
    assert_eq!(admin(&s, "GET", path, "", None).0, 401);
    assert_eq!(admin(&s, "GET", path, "wrong", None).0, 401);
    assert_eq!(
        admin(&s, "GET", path, &key, None).0,
        403,
        "a tenant key is not the admin's"
    );

    // The shipped default applies until the tenant has its own.
    let (status, v) = admin(&s, "GET", path, ADMIN, None);
    assert_eq!(
        (status, v["source"].as_str()),
        (200, Some("all_tenants")),
        "{v}"
    );

    // Bad policies get the reason; bad routes are refused.
    let bad = [
        (
            json!({"speculation": true, "allowed": ["ngram"], "k_min": 4, "k_max": 2, "explore": true, "shadow_rate": 0}),
            "greater than",
        ),
        (
            json!({"speculation": true, "allowed": ["warp"], "k_min": 1, "k_max": 2, "explore": true, "shadow_rate": 0}),
            "unknown strategy",
        ),
        (
            json!({"speculation": true, "allowed": [], "k_min": 1, "k_max": 2, "explore": true, "shadow_rate": 0}),
            "no drafting",
        ),
        (json!({"speculation": true}), "missing field"),
    ];
    for (body, why) in bad {
        let (status, v) = admin(&s, "PUT", path, ADMIN, Some(body));
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(why),
            "{v} should say {why}"
        );
    }
    assert_eq!(
        admin(
            &s,
            "PUT",
            "/admin/v1/policies/acme/poetry",
            ADMIN,
            Some(policy(&["ngram"], 2))
        )
        .0,
        400
    );
    assert_eq!(
        admin(
            &s,
            "PUT",
            "/admin/v1/policies/ghost/chat",
            ADMIN,
            Some(policy(&["ngram"], 2))
        )
        .0,
        404
    );

    // An edit changes the plan of the very next request.
    let (status, v) = admin(&s, "PUT", path, ADMIN, Some(policy(&["ngram"], 2)));
    assert_eq!((status, v["version"].as_u64()), (200, Some(1)), "{v}");
    let (_, r) = chat(&s, &key, json!({}));
    assert_eq!(r["usage"]["speculative"]["strategy"], "ngram", "{r}");
    assert_eq!(r["usage"]["speculative"]["k"], 2);
    admin(&s, "PUT", path, ADMIN, Some(policy(&["suffix"], 3)));
    let (_, r) = chat(&s, &key, json!({}));
    assert_eq!(
        (
            r["usage"]["speculative"]["strategy"].as_str(),
            r["usage"]["speculative"]["k"].as_u64()
        ),
        (Some("suffix"), Some(3))
    );
    // A client that sets only k is not refused for the class default (ngram) its policy
    // forbids: the policy picks the strategy, within its k bounds.
    let (status, r) = chat(&s, &key, json!({"speculation": {"k": 2}}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["usage"]["speculative"]["strategy"], "suffix", "{r}");
    assert_eq!(r["usage"]["speculative"]["k"], 3);
    // A client may not override into what its policy forbids, and a refusal costs its
    // tenant no tokens of its per-minute quota (three refusals of 150 would exceed 200).
    let tpm = json!({"tokens_per_minute": 200});
    let limits = "/admin/v1/tenants/acme/limits";
    assert_eq!(admin(&s, "PUT", limits, ADMIN, Some(tpm)).0, 200);
    for _ in 0..3 {
        let body = json!({"speculation": {"strategy": "ngram"}, "max_tokens": 150});
        let (status, v) = chat(&s, &key, body);
        assert_eq!(
            (status, v["error"]["type"].as_str()),
            (403, Some("permission_error")),
            "{v}"
        );
    }
    assert_eq!(chat(&s, &key, json!({"max_tokens": 150})).0, 200);
    // The scheduler's share: a weight and a tier, shown in force; out of range named.
    let share = json!({"weight": 3, "priority": "interactive"});
    let (status, v) = admin(&s, "PUT", limits, ADMIN, Some(share));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (
            v["effective"]["weight"].as_u64(),
            v["effective"]["priority"].as_str()
        ),
        (Some(3), Some("interactive")),
        "{v}"
    );
    assert_eq!(
        chat(&s, &key, json!({})).0,
        200,
        "an interactive tenant is served"
    );
    for (bad, param) in [
        (json!({"weight": 0}), Some("weight")),
        (json!({"weight": 1001}), Some("weight")),
        (json!({"priority": "urgent"}), Some("priority")),
    ] {
        let (status, v) = admin(&s, "PUT", limits, ADMIN, Some(bad.clone()));
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(v["error"]["param"].as_str(), param, "{v}");
        if param.is_none() {
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("priority"),
                "{v}"
            );
        }
    }
    assert_eq!(admin(&s, "PUT", limits, ADMIN, Some(json!({}))).0, 200);
    let (_, v) = admin(&s, "GET", limits, ADMIN, None);
    assert_eq!(v["effective"]["priority"], "standard", "{v}");
    // Speculation off by policy wins over a request that asks for it.
    admin(
        &s,
        "PUT",
        path,
        ADMIN,
        Some(
            json!({"speculation": false, "allowed": [], "k_min": 0, "k_max": 0, "explore": false, "shadow_rate": 0}),
        ),
    );
    let (_, r) = chat(
        &s,
        &key,
        json!({"speculation": {"strategy": "suffix", "k": 4}}),
    );
    assert_eq!(r["usage"]["speculative"]["strategy"], "plain");

    let (_, h) = admin(&s, "GET", &format!("{path}/history"), ADMIN, None);
    let versions: Vec<(u64, &str)> = h["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_u64().unwrap(), v["by"].as_str().unwrap()))
        .collect();
    assert_eq!(versions, vec![(1, "alice"), (2, "alice"), (3, "alice")]);

    // kill -9 right after an acknowledged edit: it is there after the restart.
    let (status, _) = admin(&s, "PUT", path, ADMIN, Some(policy(&["ngram"], 5)));
    assert_eq!(status, 200);
    s.kill_9();
    let s = Server::start_in(dir.path(), &[]);
    let (_, v) = admin(&s, "GET", path, ADMIN, None);
    assert_eq!(
        (v["source"].as_str(), v["version"].as_u64()),
        (Some("tenant"), Some(4)),
        "{v}"
    );
    assert_eq!(v["policy"]["k_max"], 5);
    let (status, _) = admin(&s, "DELETE", path, ADMIN, None);
    assert_eq!(status, 200);
    assert_eq!(
        admin(&s, "GET", path, ADMIN, None).1["source"],
        "all_tenants"
    );
}

#[test]
fn shadow_checks_compare_speculative_answers_with_plain_decoding() {
    let s = Server::start(&["--history-flush-ms", "100"]);
    let key = s.tenant("acme");
    let path = "/admin/v1/policies/acme/code_edit";
    let mut p = policy(&["suffix"], 4);
    p["shadow_rate"] = json!(1.0);
    assert_eq!(admin(&s, "PUT", path, ADMIN, Some(p)).0, 200);
    let prompt = "Rename x to n and return the code:\n```python\ndef f(x):\n    y = x + 1\n    return y\n```";
    let mut checked = 0;
    for _ in 0..3 {
        let body = json!({"model": s.model_id, "messages": [{"role": "user", "content": prompt}],
                          "max_tokens": 32, "temperature": 0, "workload": "code_edit"});
        let (status, v) = s.post("/v1/chat/completions", &key, &body);
        assert_eq!(status, 200, "{v}");
        checked += usize::from(v["usage"]["speculative"]["drafted"].as_u64().unwrap() > 0);
    }
    assert!(checked > 0, "no request drafted anything: nothing to check");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while s.metric("specgate_shadow_checks_total") < checked as f64 {
        assert!(
            std::time::Instant::now() < deadline,
            "shadow checks did not finish"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Exactness holds: every check matched (or met a tie), none disabled the strategy.
    let (_, a) = {
        let r = ureq::get(&s.url("/v1/analytics/routes?tenant=acme&bucket=day"))
            .set("Authorization", &format!("Bearer {ADMIN}"))
            .call()
            .unwrap();
        (r.status(), r.into_json::<Value>().unwrap())
    };
    let rows = a["data"].as_array().unwrap();
    let checks: u64 = rows
        .iter()
        .map(|r| r["shadow_checks"].as_u64().unwrap())
        .sum();
    let mismatches: u64 = rows
        .iter()
        .map(|r| r["shadow_mismatches"].as_u64().unwrap())
        .sum();
    assert_eq!((checks, mismatches), (checked as u64, 0), "{a}");
    let (_, v) = admin(&s, "GET", path, ADMIN, None);
    assert_eq!(v["version"], 1, "no shadow check rewrote the policy: {v}");
}
