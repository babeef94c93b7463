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

#[test]
fn a_tenants_limits_hold_across_replicas_and_a_killed_replicas_places_come_back() {
    let Some(shared) = shared() else { return };
    let (a, b) = (
        shared.replica(&["--lease-ttl-secs", "2"]),
        shared.replica(&["--lease-ttl-secs", "2"]),
    );
    let key = a.tenant("busy");
    let per_minute = 600u64;
    let (status, v) = a.admin(
        "PUT",
        "/admin/v1/tenants/busy/limits",
        Some(json!({"tokens_per_minute": per_minute, "max_concurrent_requests": 2})),
    );
    assert_eq!(status, 200, "{v}");

    // Eight clients over both replicas, as fast as they are admitted.
    let started = Instant::now();
    let results: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let (s, key) = (if i % 2 == 0 { &a } else { &b }, &key);
                scope.spawn(move || (0..6).map(|_| chat(s, key, 16)).collect::<Vec<_>>())
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let admitted: Vec<&Value> = results
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, v)| v)
        .collect();
    let used: u64 = admitted
        .iter()
        .map(|v| v["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    let one_request = 16 + admitted[0]["usage"]["prompt_tokens"].as_u64().unwrap();
    // The bucket: full at the start, refilled at the rate over the run, plus one reservation.
    let bound = per_minute + (per_minute as f64 * secs / 60.0).ceil() as u64 + one_request;
    assert!(
        used <= bound,
        "{used} tokens used > {bound} ({} admitted in {secs:.1} s)",
        admitted.len()
    );
    let refused: Vec<&Value> = results
        .iter()
        .filter(|(s, _)| *s == 429)
        .map(|(_, v)| v)
        .collect();
    assert!(
        !refused.is_empty(),
        "8 clients on 2 replicas never hit a limit of 2 in flight / {per_minute} per minute"
    );
    assert_eq!(
        admitted.len() + refused.len(),
        results.len(),
        "only 200s and 429s"
    );

    // Two long requests in flight on A fill the tenant's two places; A is killed under them.
    let (status, v) = a.admin(
        "PUT",
        "/admin/v1/tenants/busy/limits",
        Some(json!({"max_concurrent_requests": 2})),
    );
    assert_eq!(status, 200, "{v}");
    let base = a.base.clone();
    let model = a.model_id.clone();
    for _ in 0..2 {
        let (base, key, model) = (base.clone(), key.clone(), model.clone());
        std::thread::spawn(move || {
            // A count goes on for its whole max_tokens (many seconds here).
            let body = json!({"model": model, "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,",
                              "max_tokens": 1500, "temperature": 0});
            // Until admitted: a place may still be held by a request of the run above.
            for _ in 0..100 {
                let r = ureq::post(&format!("{base}/v1/completions"))
                    .set("Authorization", &format!("Bearer {key}"))
                    .send_json(body.clone());
                match r {
                    Err(ureq::Error::Status(429, _)) => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => return,
                }
            }
        });
    }
    // Both are admitted within milliseconds; B's probes must not take a place meanwhile.
    std::thread::sleep(Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut answered = admitted.len() as u64; // requests the tenant was answered
    while chat(&b, &key, 1).0 != 429 {
        answered += 1;
        assert!(
            Instant::now() < deadline,
            "A's two requests never filled the places"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A's answered requests all ended seconds ago, more than its 200 ms flush interval.
    a.kill_9();
    let killed = Instant::now();
    loop {
        let (status, v) = chat(&b, &key, 1);
        if status == 200 {
            answered += 1;
            break;
        }
        assert_eq!(status, 429, "{v}");
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "A's places never came back (lease TTL 2 s)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The history lost nothing A had flushed, and the two requests killed on A, never
    // answered, are not in it.
    let (status, v) = common::server::request(
        "GET",
        &b.url("/v1/analytics/routes?tenant=busy&bucket=minute"),
        common::server::ADMIN,
        None,
    );
    assert_eq!(status, 200, "{v}");
    let recorded: u64 = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(recorded, answered, "{v}");
}

#[test]
fn redis_unreachable_falls_back_to_per_replica_limits_and_keeps_serving() {
    let Some(db) = TestDatabase::create() else {
        return;
    };
    // Nothing listens on port 9 here: Redis is down from the start.
    let s = Server::start_with(&["--store", &db.url, "--redis", "redis://127.0.0.1:9/"]);
    let key = s.tenant("solo");
    let (status, v) = chat(&s, &key, 3);
    assert_eq!(status, 200, "{v}");
    assert!(s.metric("specgate_limiter_fallback_total") >= 1.0);
    // The per-replica limits still hold.
    let (status, _) = s.admin(
        "PUT",
        "/admin/v1/tenants/solo/limits",
        Some(json!({"tokens_per_minute": 10})),
    );
    assert_eq!(status, 200);
    let (status, v) = chat(&s, &key, 64);
    assert_eq!(status, 400, "larger than the whole limit: {v}");
}

#[test]
fn a_sled_deployment_moves_to_postgresql_with_store_copy() {
    let Some(db) = TestDatabase::create() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut old = Server::start_in(dir.path(), &["--history-flush-ms", "200"]);
    let key = old.tenant("mover");
    for _ in 0..2 {
        assert_eq!(chat(&old, &key, 4).0, 200);
    }
    let (status, _) = old.admin(
        "PUT",
        "/admin/v1/policies/mover/chat",
        Some(only("ngram", 3)),
    );
    assert_eq!(status, 200);
    old.sigterm();
    assert!(
        old.wait_exit(Duration::from_secs(30)).is_some(),
        "the sled server did not stop"
    );

    let from = format!("sled:{}", dir.path().join("store").display());
    let copy = |to: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_specgate"))
            .args(["store", "copy", "--from", &from, "--to", to])
            .output()
            .expect("running store copy")
    };
    let out = copy(&db.url);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("1 tenants, 1 keys") && said.contains("identical"),
        "{said}"
    );
    // A second copy into the now non-empty database is refused.
    let again = copy(&db.url);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));

    // The same key, policy and history, served from PostgreSQL.
    let new = Server::start_with(&["--store", &db.url]);
    let (status, v) = chat(&new, &key, 4);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["speculative"]["strategy"], "ngram", "{v}");
    let (status, p) = new.admin("GET", "/admin/v1/policies/mover/chat", None);
    assert_eq!(status, 200, "{p}");
    let (status, rows) = common::server::request(
        "GET",
        &new.url("/v1/analytics/routes?tenant=mover&bucket=minute"),
        common::server::ADMIN,
        None,
    );
    assert_eq!(status, 200, "{rows}");
    let requests: u64 = rows["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(requests, 3, "two before the move, one after: {rows}");
}

/// The router of docs/deploy.md in miniature: a stable hash of the Authorization header picks
/// the replica (FNV-1a here; nginx's `hash … consistent` and Envoy's ring hash are others).
fn route(authorization: &str, replicas: usize) -> usize {
    let h = authorization
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    (h % replicas as u64) as usize
}

#[test]
fn a_conversation_routed_by_key_hits_its_replicas_cache_and_a_replica_without_it_answers_alike() {
    let Some(shared) = shared() else { return };
    let replicas = [shared.replica(&[]), shared.replica(&[])];
    let key = replicas[0].tenant("talker");
    let home = route(&format!("Bearer {key}"), replicas.len());
    let system = common::fixture("prompts/rag.jsonl");
    let ask = |s: &Server| {
        let body = json!({"model": s.model_id, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Who wrote it?"}]});
        let (status, v) = s.post("/v1/chat/completions", &key, &body);
        assert_eq!(status, 200, "{v}");
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        (v["choices"][0]["message"]["content"].clone(), cached)
    };
    let (first, cold) = ask(&replicas[home]);
    let (again, hit) = ask(&replicas[home]);
    assert_eq!((cold, again.clone()), (0, first.clone()));
    assert!(hit >= 300, "the home replica reused {hit} tokens");
    // A replica that has not seen the prompt computes it all and answers the same.
    let (away, miss) = ask(&replicas[1 - home]);
    assert_eq!((away, miss), (first, 0));
    // History is one state: the cached tokens reach the analytics of either replica.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, v) = common::server::request(
            "GET",
            &replicas[1 - home].url("/v1/analytics/routes?tenant=talker"),
            common::server::ADMIN,
            None,
        );
        assert_eq!(status, 200, "{v}");
        let cached: u64 = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["cached_tokens"].as_u64().unwrap_or(0))
            .sum();
        if cached == hit {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "history shows {cached} cached tokens, not {hit}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
