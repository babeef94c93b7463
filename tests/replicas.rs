//! Two real replicas (two `specgate serve` processes) on one PostgreSQL and one Redis, over
//! HTTP: keys, revocations, policies, limits and history are one state. Each test makes a
//! database and a Redis prefix of its own; without the servers it says `skipped: …`.

mod common;

use std::time::{Duration, Instant};

use common::server::Server;
use serde_json::{json, Value};
use specgate::store::test_services::{redis_url, TestDatabase};

/// A database and a Redis prefix for one test (None: a server is missing, skipped).
struct Shared {
    db: TestDatabase,
    prefix: String,
}

fn shared() -> Option<Shared> {
    let db = TestDatabase::create()?;
    let redis = redis_url();
    let addr = redis.trim_start_matches("redis://").trim_end_matches('/');
    if std::net::TcpStream::connect_timeout(
        &addr
            .parse()
            .unwrap_or_else(|_| "127.0.0.1:6379".parse().unwrap()),
        Duration::from_secs(2),
    )
    .is_err()
    {
        specgate::store::test_services::skip(&format!("no Redis at {redis}"));
        return None;
    }
    Some(Shared {
        db,
        prefix: format!("sgtest-{:016x}", rand::random::<u64>()),
    })
}

impl Shared {
    fn replica(&self, extra: &[&str]) -> Server {
        let redis = redis_url();
        let mut args = vec![
            "--store",
            &self.db.url,
            "--redis",
            &redis,
            "--redis-prefix",
            &self.prefix,
            "--history-flush-ms",
            "200",
        ];
        args.extend_from_slice(extra);
        Server::start_with(&args)
    }
}

fn chat(s: &Server, key: &str, max_tokens: usize) -> (u16, Value) {
    let body = json!({"model": s.model_id, "messages": [{"role": "user", "content": "Say hello."}],
                      "max_tokens": max_tokens, "temperature": 0, "workload": "chat"});
    s.post("/v1/chat/completions", key, &body)
}

fn only(strategy: &str, k: usize) -> Value {
    json!({"speculation": true, "allowed": [strategy], "k_min": k, "k_max": k,
           "explore": false, "shadow_rate": 0.0})
}

#[test]
fn keys_revocations_policies_and_history_are_one_state_across_replicas() {
    let Some(shared) = shared() else { return };
    let (a, b) = (shared.replica(&[]), shared.replica(&[]));

    // Every answer the tenant got, as its usage told it.
    let told = std::cell::RefCell::new(Vec::<Value>::new());
    let served = |s: &Server, key: &str, max_tokens: usize| -> Value {
        let (status, v) = chat(s, key, max_tokens);
        assert_eq!(status, 200, "{v}");
        told.borrow_mut().push(v["usage"].clone());
        v
    };

    // A key created on A serves on B.
    let key = a.tenant("acme");
    served(&b, &key, 4);

    // A policy edit on A governs B's next request.
    for (strategy, k) in [("ngram", 3), ("suffix", 2)] {
        let (status, v) = a.admin(
            "PUT",
            "/admin/v1/policies/acme/chat",
            Some(only(strategy, k)),
        );
        assert_eq!(status, 200, "{v}");
        let v = served(&b, &key, 6);
        assert_eq!(v["usage"]["speculative"]["strategy"], strategy, "{v}");
    }

    // A key revoked on A is refused on B within 1 s.
    let second = a.admin("POST", "/admin/v1/tenants/acme/keys", None).1;
    let (id, second) = (
        second["key_id"].as_str().unwrap(),
        second["api_key"].as_str().unwrap(),
    );
    served(&b, second, 2);
    let (status, _) = a.admin("DELETE", &format!("/admin/v1/tenants/acme/keys/{id}"), None);
    assert_eq!(status, 200);
    let revoked = Instant::now();
    loop {
        // Answered before the revocation reached B: it counts in the history too.
        match chat(&b, second, 2) {
            (401, _) => break,
            (200, v) => told.borrow_mut().push(v["usage"].clone()),
            (status, v) => panic!("{status}: {v}"),
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(1),
            "B still takes the revoked key"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // More on both replicas; analytics read on A count each exactly once.
    for s in [&a, &b, &a, &b, &b] {
        served(s, &key, 5);
    }
    let told = told.into_inner();
    let usage = |f: &str| told.iter().map(|u| u[f].as_u64().unwrap()).sum::<u64>();
    let want = (told.len() as u64, usage("completion_tokens"));
    // Reading flushes A's writer; B's flushes every 200 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rows;
    loop {
        let (status, v) = common::server::request(
            "GET",
            &a.url("/v1/analytics/routes?tenant=acme&bucket=minute"),
            common::server::ADMIN,
            None,
        );
        assert_eq!(status, 200, "{v}");
        rows = v["data"].as_array().unwrap().clone();
        let total = |f: &str| rows.iter().map(|r| r[f].as_u64().unwrap()).sum::<u64>();
        let got = (total("requests"), total("tokens_out"));
        assert!(got.0 <= want.0, "counted twice: {got:?} vs {want:?}");
        if got == want || Instant::now() > deadline {
            assert_eq!(got, want, "requests and tokens: {rows:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A two-step tool loop through the Responses API: the call answered on A, its result sent
/// to B by `previous_response_id` alone. B answers as if sent the whole conversation, and no
/// other tenant can read or continue it.
#[test]
fn a_response_stored_on_one_replica_is_continued_on_another() {
    let Some(shared) = shared() else { return };
    let (a, b) = (shared.replica(&[]), shared.replica(&[]));
    let (key, other) = (a.tenant("globex"), a.tenant("initech"));
    let tools = json!([{"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let ask = json!([{"role": "user", "content": "What is the weather in Oslo?"}]);
    let (status, first) = a.post(
        "/v1/responses",
        &key,
        &json!({"model": a.model_id,
        "input": ask, "tools": tools, "tool_choice": "required", "max_output_tokens": 48,
        "temperature": 0}),
    );
    assert_eq!(status, 200, "{first}");
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "function_call")
        .cloned()
        .expect("a call");
    let result = json!({"type": "function_call_output", "call_id": call["call_id"],
                        "output": "12 degrees and cloudy"});
    let continued = |s: &Server, key: &str| {
        s.post(
            "/v1/responses",
            key,
            &json!({"model": s.model_id, "tools": tools,
            "previous_response_id": first["id"], "input": [result], "max_output_tokens": 24,
            "temperature": 0}),
        )
    };
    let (status, second) = continued(&b, &key);
    assert_eq!(status, 200, "{second}");
    let (_, resent) = b.post(
        "/v1/responses",
        &key,
        &json!({"model": b.model_id,
        "tools": tools, "input": [ask[0], call, result], "max_output_tokens": 24,
        "temperature": 0, "store": false}),
    );
    assert_eq!(
        second["output"][0]["content"], resent["output"][0]["content"],
        "{second}"
    );
    assert_eq!(
        second["usage"]["input_tokens"],
        resent["usage"]["input_tokens"]
    );
    assert_eq!(second["previous_response_id"], first["id"]);
    // Another tenant: not found, whether it reads or continues.
    let (status, v) = continued(&b, &other);
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (404, Some("previous_response_id")),
        "{v}"
    );
    let path = format!("/v1/responses/{}", first["id"].as_str().unwrap());
    let read = |s: &Server, key: &str| common::server::request("GET", &s.url(&path), key, None);
    assert_eq!(read(&b, &other).0, 404);
    let (status, v) = read(&b, &key);
    assert_eq!((status, &v["output"]), (200, &first["output"]), "{v}");
}
