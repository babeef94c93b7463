//! PostgreSQL and Redis going away under load, on the machine's own services: a database
//! restart is served through from the caches and loses or double-counts no history; a Redis
//! that stops falls back to per-replica limits and comes back to shared ones. One binary of
//! its own, so no other test runs while a service is down; each service is started again
//! however the test ends.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::server::Server;
use serde_json::{json, Value};
use specgate::store::test_services::{redis_url, skip, TestDatabase};

fn run(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", cmd])
        .status()
        .is_ok_and(|s| s.success())
}

fn have(program: &str) -> bool {
    run(&format!("command -v {program} >/dev/null 2>&1"))
}

const PG_START: &str =
    "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | head -1) main start";
const PG_RESTART: &str =
    "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | head -1) main restart";
const REDIS_START: &str = "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' \
                           --appendonly no --dir /tmp";

/// One outage at a time: the two tests of this binary would otherwise take each other's
/// services down.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the service again when dropped, whatever happened in between.
struct Restart(&'static str);

impl Drop for Restart {
    fn drop(&mut self) {
        run(self.0);
    }
}

fn chat(s: &Server, key: &str) -> (u16, Value) {
    let body = json!({"model": s.model_id, "messages": [{"role": "user", "content": "Name a colour."}],
                      "max_tokens": 4, "temperature": 0, "workload": "chat"});
    s.post("/v1/chat/completions", key, &body)
}

/// Requests from two clients until `stop`; each answer's status and completion tokens.
fn load(s: &Server, key: &str, stop: &AtomicBool) -> Vec<(u16, u64)> {
    std::thread::scope(|scope| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut seen = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let (status, v) = chat(s, key);
                        let tokens = v["usage"]["completion_tokens"].as_u64().unwrap_or(0);
                        seen.push((status, tokens));
                    }
                    seen
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

fn history_totals(s: &Server) -> (u64, u64) {
    let (status, rows) = common::server::request(
        "GET",
        &s.url("/v1/analytics/routes?tenant=steady&bucket=minute"),
        common::server::ADMIN,
        None,
    );
    if status != 200 {
        return (0, 0);
    }
    let rows = rows["data"].as_array().cloned().unwrap_or_default();
    let sum = |f: &str| rows.iter().map(|r| r[f].as_u64().unwrap_or(0)).sum::<u64>();
    (sum("requests"), sum("tokens_out"))
}

#[test]
fn a_postgres_restart_under_load_is_served_from_the_cache_and_history_counts_once() {
    let _turn = one_at_a_time();
    if !have("pg_ctlcluster") {
        return skip("no pg_ctlcluster to restart PostgreSQL with");
    }
    let Some(db) = TestDatabase::create() else {
        return;
    };
    let _again = Restart(PG_START);
    let s = Server::start_with(&["--store", &db.url, "--history-flush-ms", "200"]);
    let key = s.tenant("steady");
    assert_eq!(chat(&s, &key).0, 200); // the key, limits and policy are cached now

    let stop = AtomicBool::new(false);
    let answers = std::thread::scope(|scope| {
        let load = scope.spawn(|| load(&s, &key, &stop));
        std::thread::sleep(Duration::from_millis(500));
        assert!(run(PG_RESTART), "restarting PostgreSQL");
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
        load.join().unwrap()
    });
    let refused: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status != 200)
        .collect();
    assert!(
        refused.is_empty(),
        "requests failed across the restart: {refused:?}"
    );
    // Every answered request lands in the history once, after the flushes' retries.
    let want = (
        answers.len() as u64 + 1,
        answers.iter().map(|(_, t)| t).sum::<u64>(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = history_totals(&s);
    while got.0 < want.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        got = history_totals(&s);
    }
    assert_eq!(got.0, want.0, "requests in the history after the restart");
    assert!(got.1 >= want.1, "tokens: {got:?} vs {want:?}");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(history_totals(&s).0, want.0, "nothing counted twice");
}

#[test]
fn redis_stopped_under_load_falls_back_to_per_replica_limits_and_comes_back() {
    let _turn = one_at_a_time();
    if !have("redis-server") || !have("redis-cli") {
        return skip("no redis-server / redis-cli to stop and start Redis with");
    }
    let Some(db) = TestDatabase::create() else {
        return;
    };
    let redis = redis_url();
    let s = Server::start_with(&["--store", &db.url, "--redis", &redis]);
    let key = s.tenant("steady");
    assert_eq!(chat(&s, &key).0, 200);
    assert_eq!(s.metric("specgate_limiter_shared"), 1.0);

    let _again = Restart(REDIS_START);
    assert!(run(
        "redis-cli -h 127.0.0.1 -p 6379 shutdown nosave || true"
    ));
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let (status, v) = chat(&s, &key);
        assert_eq!(status, 200, "served while Redis is down: {v}");
    }
    assert!(s.metric("specgate_limiter_fallback_total") >= 3.0);
    assert_eq!(s.metric("specgate_limiter_shared"), 0.0);

    assert!(run(REDIS_START), "starting Redis again");
    let back = Instant::now();
    loop {
        assert_eq!(chat(&s, &key).0, 200);
        if s.metric("specgate_limiter_shared") == 1.0 {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(15),
            "the limiter never went back to Redis"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
