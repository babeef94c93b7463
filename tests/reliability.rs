//! Reliability over real HTTP and the real model: per-tenant limits, drafter faults, a dead
//! engine, SIGTERM draining, and kill -9 during heavy writes.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use common::server::{parse_sse, request, Server, ADMIN};
use serde_json::{json, Value};

const CODE: &str =
    "Rename x to n and return the code:\n```python\ndef f(x):\n    y = x + 1\n    return y\n```";

/// (status, Retry-After, body) of a chat request.
fn chat_status(s: &Server, key: &str, body: &Value) -> (u16, Option<u64>, Value) {
    let r = ureq::post(&s.url("/v1/chat/completions"))
        .set("Authorization", &format!("Bearer {key}"))
        .send_json(body.clone());
    let (code, resp) = match r {
        Ok(resp) => (resp.status(), resp),
        Err(ureq::Error::Status(code, resp)) => (code, resp),
        Err(e) => panic!("{e}"),
    };
    let retry = resp.header("retry-after").and_then(|v| v.parse().ok());
    (code, retry, resp.into_json().unwrap_or(Value::Null))
}

/// A streaming request whose first chunk has arrived (so it holds its slot); the rest is
/// left unread.
fn open_stream(s: &Server, key: &str, body: &Value) -> BufReader<Box<dyn Read + Send + Sync>> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let resp = ureq::post(&s.url("/v1/chat/completions"))
        .set("Authorization", &format!("Bearer {key}"))
        .send_json(body)
        .expect("stream");
    let mut reader = BufReader::new(resp.into_reader());
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        reader.read_line(&mut line).expect("first chunk");
    }
    reader
}

#[test]
fn tenant_limits_answer_429_with_retry_after_and_admin_overrides_apply() {
    let s = Server::start(&["--max-concurrent-per-tenant", "2"]);
    let (a, b) = (s.tenant("a"), s.tenant("b"));
    let limits = "/admin/v1/tenants/a/limits";
    assert_eq!(
        s.admin("GET", limits, None).1["effective"]["max_concurrent_requests"],
        2
    );
    let (status, v) = s.admin("PUT", limits, Some(json!({"max_concurrent_requests": 1})));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["effective"]["max_concurrent_requests"], 1);
    assert_eq!(
        s.admin("PUT", limits, Some(json!({"max_streams": 1}))).0,
        400
    );
    assert_eq!(
        s.admin("PUT", "/admin/v1/tenants/ghost/limits", Some(json!({})))
            .0,
        404
    );
    assert_eq!(request("PUT", &s.url(limits), &a, Some(json!({}))).0, 403);

    // One stream in flight: a's next request waits its turn, b's does not.
    let long = s.chat_body("Write a long story about a lighthouse.", 400, json!({}));
    let held = open_stream(&s, &a, &long);
    let short = s.chat_body("Say hello.", 4, json!({}));
    let (status, retry, v) = chat_status(&s, &a, &short);
    assert_eq!(status, 429, "{v}");
    assert!(retry.is_some_and(|r| r >= 1), "Retry-After: {retry:?}");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(chat_status(&s, &b, &short).0, 200);
    // The client goes away: its slot comes back.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while chat_status(&s, &a, &short).0 != 200 {
        assert!(Instant::now() < deadline, "the slot never came back");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Tokens per minute: a request reserves prompt + max_tokens while it runs; past the
    // bucket, 429 with the wait; larger than the whole limit, 400.
    let tpm = json!({"max_concurrent_requests": 4, "tokens_per_minute": 600});
    assert_eq!(s.admin("PUT", limits, Some(tpm)).0, 200);
    let held = open_stream(
        &s,
        &a,
        &s.chat_body("Write a long story about a lighthouse.", 420, json!({})),
    );
    let (status, retry, v) = chat_status(&s, &a, &s.chat_body("Say hello.", 200, json!({})));
    assert_eq!(status, 429, "{v}");
    assert!(retry.is_some_and(|r| (1..=60).contains(&r)), "{retry:?}");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    let (status, _, v) = chat_status(&s, &a, &s.chat_body("Say hello.", 700, json!({})));
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("request_too_large")),
        "{v}"
    );
    assert_eq!(
        chat_status(&s, &b, &s.chat_body("Say hello.", 200, json!({}))).0,
        200
    );
    drop(held);
    assert!(s.metric("specgate_quota_refusals_total") >= 2.0);
    // The overrides are stored: the tenant listing shows them.
    let (_, list) = s.admin("GET", "/admin/v1/tenants", None);
    let listed = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "a")
        .cloned();
    assert_eq!(listed.unwrap()["limits"]["tokens_per_minute"], 600);
}

#[test]
fn a_failing_drafter_costs_speculation_never_the_answer() {
    let s = Server::start(&["--inject-faults", "drafter-fail-every=2"]);
    let key = s.tenant("acme");
    let plain = s.chat_body(CODE, 48, json!({"speculation": {"enabled": false}}));
    let (status, _, want) = chat_status(&s, &key, &plain);
    assert_eq!(status, 200, "{want}");
    let want_text = want["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // Proposals, commits and (adaptive k, no k given) the track-record lookup all fail.
    for (strategy, k) in [
        ("ngram", json!(4)),
        ("suffix", json!(4)),
        ("early-exit", json!(4)),
        ("early-exit", json!(null)),
    ] {
        let body = s.chat_body(
            CODE,
            48,
            json!({"speculation": {"strategy": strategy, "k": k}}),
        );
        let (status, _, v) = chat_status(&s, &key, &body);
        assert_eq!(status, 200, "{strategy}: {v}");
        assert_eq!(
            v["choices"][0]["message"]["content"],
            want_text.as_str(),
            "{strategy}"
        );
        let failures = v["usage"]["speculative"]["drafter_failures"]
            .as_u64()
            .unwrap();
        assert!(failures > 0, "{strategy}: the fault never fired: {v}");
        // Streaming too.
        let mut body = body.clone();
        body["stream"] = json!(true);
        let streamed = s.stream("/v1/chat/completions", &key, &body);
        assert_eq!(streamed.text, want_text, "{strategy} streamed");
    }
    assert!(s.metric("specgate_spec_decode_drafter_failures_total") > 0.0);
}

#[test]
fn a_dead_engine_answers_503_promptly_and_a_restart_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start_in(dir.path(), &["--inject-faults", "engine-panic-at-step=20"]);
    let key = s.tenant("acme");
    // A request the server fails costs its tenant no quota: the 200-token request below
    // fits only if the failed one was refunded (else 429 instead of 503).
    let tpm = Some(json!({"tokens_per_minute": 300}));
    assert_eq!(s.admin("PUT", "/admin/v1/tenants/acme/limits", tpm).0, 200);
    let started = Instant::now();
    let mut body = s.chat_body("Write a long story about a lighthouse.", 200, json!({}));
    body["stream"] = json!(true);
    let resp = ureq::post(&s.url("/v1/chat/completions"))
        .set("Authorization", &format!("Bearer {key}"))
        .send_json(body)
        .expect("the stream starts");
    let mut raw = String::new();
    resp.into_reader().read_to_string(&mut raw).unwrap();
    assert!(raw.contains("\"error\""), "no error event: {raw}");
    assert!(raw.trim_end().ends_with("data: [DONE]"), "{raw}");
    assert!(started.elapsed() < Duration::from_secs(30));

    let deadline = Instant::now() + Duration::from_secs(10);
    while ureq::get(&s.url("/ready")).call().is_ok() {
        assert!(Instant::now() < deadline, "/ready stayed true");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ureq::get(&s.url("/health")).call().map(|r| r.status()).ok(),
        Some(200)
    );
    let asked = Instant::now();
    let (status, retry, v) = chat_status(&s, &key, &s.chat_body("Say hello.", 200, json!({})));
    assert_eq!(status, 503, "{v}");
    assert!(retry.is_some());
    assert!(
        // Far below the engine's 30 s start-up wait it must not sit through.
        asked.elapsed() < Duration::from_secs(10),
        "503 took {:?}",
        asked.elapsed()
    );

    s.sigterm();
    let exit = s
        .wait_exit(Duration::from_secs(30))
        .expect("exits after SIGTERM");
    assert!(exit.success(), "{exit:?}");
    let s = Server::start_in(dir.path(), &[]);
    let (status, _, v) = chat_status(&s, &key, &s.chat_body("Say hello.", 8, json!({})));
    assert_eq!(
        status, 200,
        "the restarted server serves the same tenant: {v}"
    );
}

#[test]
fn sigterm_lets_streams_finish_flushes_history_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    // History is written only at the end: what the analytics show after the restart proves
    // the shutdown flushed it.
    let mut s = Server::start_in(dir.path(), &["--history-flush-ms", "600000"]);
    let key = s.tenant("acme");
    let body = s.chat_body(
        "Write a long story about a lighthouse.",
        160,
        json!({
        "stream_options": {"include_usage": true}}),
    );
    let reader = open_stream(&s, &key, &body);
    s.sigterm();
    // Draining: once /ready says so, new work is refused (503) or the port no longer
    // accepts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ureq::get(&s.url("/ready")).call().is_ok() {
        assert!(
            Instant::now() < deadline,
            "/ready stayed true after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = ureq::post(&s.url("/v1/chat/completions"))
        .set("Authorization", &format!("Bearer {key}"))
        .send_json(s.chat_body("Say hello.", 4, json!({})));
    match r {
        Err(ureq::Error::Status(code, _)) => assert_eq!(code, 503),
        Err(ureq::Error::Transport(_)) => {}
        Ok(resp) => panic!("a new request was served while draining: {}", resp.status()),
    }
    // The stream in flight runs to its end.
    let rest = parse_sse(reader);
    assert!(rest.done, "the stream was cut");
    let completion = rest.usage.expect("usage")["completion_tokens"]
        .as_u64()
        .unwrap();
    assert!(completion > 1);
    let exit = s
        .wait_exit(Duration::from_secs(60))
        .expect("exits after draining");
    assert!(exit.success(), "{exit:?}");

    let s = Server::start_in(dir.path(), &[]);
    let (status, v) = s.admin("GET", "/v1/analytics/routes?bucket=minute", None);
    assert_eq!(status, 200, "{v}");
    let out: u64 = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tenant"] == "acme")
        .map(|r| r["tokens_out"].as_u64().unwrap())
        .sum();
    assert_eq!(out, completion, "history lost tokens: {v}");
}

fn policy(k: u64) -> Value {
    json!({"speculation": true, "allowed": ["ngram"], "k_min": 1, "k_max": k,
           "explore": false, "shadow_rate": 0.0})
}

#[test]
fn kill_9_during_heavy_policy_and_history_writes_loses_no_acknowledged_edit() {
    let dir = tempfile::tempdir().unwrap();
    let path = "/admin/v1/policies/acme/chat";
    let mut key = None;
    let mut acknowledged: Vec<(u64, u64)> = Vec::new(); // (version, k_max)
    for round in 0..3u64 {
        let s = Server::start_in(dir.path(), &["--history-flush-ms", "20"]);
        let key = key.get_or_insert_with(|| s.tenant("acme")).clone();
        let (base, model) = (s.base.clone(), s.model_id.clone());
        // Requests write history while an admin edits the policy as fast as it can.
        let traffic = std::thread::spawn(move || {
            let body = json!({"model": model, "messages": [{"role": "user", "content": "Say hi."}],
                              "max_tokens": 4, "workload": "chat"});
            while ureq::post(&format!("{base}/v1/chat/completions"))
                .set("Authorization", &format!("Bearer {key}"))
                .send_json(body.clone())
                .is_ok()
            {}
        });
        let url = s.url(path);
        let editor = std::thread::spawn(move || {
            let mut acked = Vec::new();
            for i in 0.. {
                let k = 1 + (i % 7);
                let r = ureq::put(&url)
                    .set("Authorization", &format!("Bearer {ADMIN}"))
                    .send_json(policy(k));
                match r.ok().and_then(|r| r.into_json::<Value>().ok()) {
                    Some(v) => acked.push((v["version"].as_u64().unwrap(), k)),
                    None => break,
                }
            }
            acked
        });
        std::thread::sleep(Duration::from_millis(700 + 400 * round));
        s.kill_9();
        acknowledged.extend(editor.join().unwrap());
        traffic.join().unwrap();
    }
    assert!(
        acknowledged.len() > 10,
        "too few edits to mean anything: {}",
        acknowledged.len()
    );
    let s = Server::start_in(dir.path(), &[]);
    let (status, v) = s.admin("GET", &format!("{path}/history"), None);
    assert_eq!(status, 200, "{v}");
    let stored: Vec<(u64, u64)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["version"].as_u64().unwrap(),
                e["policy"]["k_max"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    for edit in &acknowledged {
        assert!(
            stored.contains(edit),
            "acknowledged edit {edit:?} lost; stored {stored:?}"
        );
    }
    let (_, analytics) = s.admin("GET", "/v1/analytics/routes?bucket=minute", None);
    assert!(
        !analytics["data"].as_array().unwrap().is_empty(),
        "history was written"
    );
}

#[test]
fn the_admin_token_is_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let token = "admin-secret-8c1f27d94e";
    let log = dir.path().join("server.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_specgate"))
        .args([
            "serve",
            "--port",
            "0",
            "--inject-faults",
            "engine-panic-at-step=3",
        ])
        .arg("--model")
        .arg(common::model_path())
        .arg("--db")
        .arg(dir.path().join("store"))
        .env("SPECGATE_ADMIN_TOKEN", token)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let base = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text
            .lines()
            .find_map(|l| l.strip_prefix("specgate listening on "))
        {
            break l.trim().to_string();
        }
        assert!(Instant::now() < deadline, "no listen line: {text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let key = request(
        "POST",
        &format!("{base}/admin/v1/tenants"),
        token,
        Some(json!({"name": "t"})),
    )
    .1["api_key"]
        .as_str()
        .unwrap()
        .to_string();
    // The token where it belongs, where it does not, and requests that fail and log.
    request("GET", &format!("{base}/metrics"), token, None);
    request(
        "GET",
        &format!("{base}/metrics"),
        &format!("{token}x"),
        None,
    );
    request("GET", &format!("{base}/v1/models"), token, None);
    let body = json!({"model": "x", "messages": [{"role": "user", "content": token}]});
    request(
        "POST",
        &format!("{base}/v1/chat/completions"),
        token,
        Some(body),
    );
    let body = json!({"model": common::model_path().file_stem().unwrap().to_string_lossy(),
                      "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20});
    request(
        "POST",
        &format!("{base}/v1/chat/completions"),
        &key,
        Some(body),
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("injected engine fault"),
        "the engine fault logged: {logged}"
    );
    assert!(
        !logged.contains(token),
        "the admin token is in the log:\n{logged}"
    );
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_specgate"))
        .args(["serve", "--help"])
        .env("SPECGATE_ADMIN_TOKEN", token)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&help.stdout).contains(token));
}

#[test]
fn a_tenant_sees_none_of_another_tenants_metrics_history_policies_or_limits() {
    let s = Server::start(&["--history-flush-ms", "50"]);
    let (a, b) = (s.tenant("a"), s.tenant("b"));
    assert_eq!(
        chat_status(&s, &a, &s.chat_body("Say hello.", 4, json!({}))).0,
        200
    );
    let get = |path: &str, key: &str| request("GET", &s.url(path), key, None).0;
    assert_eq!(
        get("/metrics", &b),
        403,
        "metrics carry every tenant's labels"
    );
    assert_eq!(get("/v1/analytics/routes?tenant=a", &b), 403);
    assert_eq!(get("/admin/v1/policies/a/chat", &b), 403);
    assert_eq!(get("/admin/v1/tenants/a/limits", &b), 403);
    let (status, own) = request("GET", &s.url("/v1/analytics/routes"), &b, None);
    assert_eq!(status, 200);
    assert!(
        own["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["tenant"] == "b"),
        "{own}"
    );
    // The admin sees a's route, so the filter above had something to hide.
    let (_, all) = s.admin("GET", "/v1/analytics/routes", None);
    assert!(
        all["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["tenant"] == "a"),
        "{all}"
    );
}
