//! A short soak in the default test run (`SPECGATE_SOAK_SECS`, default 45): mixed tenants,
//! classes, strategies, streaming, cancellations and bad requests, then no 5xx, no leaked KV
//! cache, history equal to the usage clients got, memory stable. The long run is
//! `specgate soak --minutes M` against a server (README).

mod common;

use std::time::Duration;

use common::server::{Server, ADMIN};
use specgate::tools::soak::{soak, SoakConfig};

#[test]
fn a_short_soak_leaves_no_5xx_no_leak_and_no_lost_history() {
    let s = Server::start(&["--history-flush-ms", "200", "--max-sequences", "8"]);
    let cfg = config(vec![s.base.clone()], soak_secs(45));
    check(&cfg);
}

/// The same soak over two replicas on one PostgreSQL and one Redis: history summed over both
/// replicas equals what clients were told, no 5xx, no leak on either.
#[test]
fn a_soak_over_two_replicas_on_the_shared_store_holds_the_same() {
    let Some(db) = specgate::store::test_services::TestDatabase::create() else {
        return;
    };
    let redis = specgate::store::test_services::redis_url();
    let prefix = format!("sgsoak-{:016x}", rand::random::<u64>());
    let replica = || {
        Server::start_with(&[
            "--store",
            &db.url,
            "--redis",
            &redis,
            "--redis-prefix",
            &prefix,
            "--history-flush-ms",
            "200",
            "--max-sequences",
            "8",
        ])
    };
    let (a, b) = (replica(), replica());
    check(&config(vec![a.base.clone(), b.base.clone()], soak_secs(30)));
}

fn soak_secs(default: u64) -> u64 {
    std::env::var("SPECGATE_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(urls: Vec<String>, secs: u64) -> SoakConfig {
    SoakConfig {
        urls,
        admin_token: ADMIN.into(),
        clients: 6,
        duration: Duration::from_secs(secs),
        max_tokens: 32,
        prompt_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/prompts").into(),
        seed: 3,
    }
}

fn check(cfg: &SoakConfig) {
    let report = soak(cfg).expect("the soak ran");
    eprintln!("{}", report.markdown());
    assert!(
        report.problems().is_empty(),
        "{:?}\n{report:#?}",
        report.problems()
    );
    // It exercised what it claims to.
    assert!(report.completed >= 10, "{report:#?}");
    assert!(report.cancelled >= 1, "{report:#?}");
    assert!(report.bad_requests >= 1, "{report:#?}");
}
