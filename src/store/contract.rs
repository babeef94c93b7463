//! What every store must do, as one suite over the traits: each backend runs it with
//! [`store_contract_tests!`] on a fresh store of its own, so two backends never drift apart
//! in what they promise.

use std::sync::Arc;

use specgate_policies::{default_policy, RoutePolicy, WorkloadClass, ANY_TENANT};
use specgate_strategies::StrategyKind;

use super::history::{FlushId, Granularity, HistoryKey, HistoryRecord};
use super::limits::LimitOverrides;
use super::limits::{Limits, QuotaError};
use super::policies::{PolicySource, PolicyStoreError, SHIPPED_BY};
use super::responses::StoredResponse;
use super::tenants::TenantError;
use super::{HistoryStore, Limiter, PolicyStore, ResponseStore, TenantStore};

/// One `#[test]` per contract function, each on the fresh stores that `$stores` makes (an
/// `Option<TestStores>`: None when the store's server is missing and the test is skipped).
macro_rules! store_contract_tests {
    ($stores:expr) => {
        #[test]
        fn keys_authenticate_until_revoked() {
            let Some(s) = $stores else { return };
            $crate::store::contract::keys_authenticate_until_revoked(&*s.tenants);
        }

        #[test]
        fn bad_keys_names_and_duplicates_are_refused() {
            let Some(s) = $stores else { return };
            $crate::store::contract::bad_keys_names_and_duplicates_are_refused(&*s.tenants);
        }

        #[test]
        fn concurrent_limit_edits_all_succeed_and_one_wins_whole() {
            let Some(s) = $stores else { return };
            $crate::store::contract::concurrent_limit_edits_all_succeed_and_one_wins_whole(s.tenants.clone());
        }

        #[test]
        fn resolution_versions_and_history() {
            let Some(s) = $stores else { return };
            $crate::store::contract::resolution_versions_and_history(&*s.policies);
        }

        #[test]
        fn an_untouched_earlier_default_is_upgraded_and_an_admins_edit_is_kept() {
            let Some(s) = $stores else { return };
            $crate::store::contract::an_untouched_earlier_default_is_upgraded_and_an_admins_edit_is_kept(&*s.policies);
        }

        #[test]
        fn the_limiter_counts_requests_in_flight_and_tokens_per_tenant() {
            let Some(s) = $stores else { return };
            $crate::store::contract::the_limiter_counts_requests_in_flight_and_tokens_per_tenant(
                &*s.limiter,
            );
        }

        #[test]
        fn a_store_copies_into_another_and_reads_back_the_same() {
            let Some(s) = $stores else { return };
            $crate::store::contract::a_store_copies_into_another_and_reads_back_the_same(&s);
        }

        #[test]
        fn responses_are_kept_per_tenant_until_they_expire() {
            let Some(s) = $stores else { return };
            $crate::store::contract::responses_are_kept_per_tenant_until_they_expire(&*s.responses);
        }

        #[test]
        fn adds_merge_reads_filter_and_old_minutes_move_into_their_hour() {
            let Some(s) = $stores else { return };
            $crate::store::contract::adds_merge_reads_filter_and_old_minutes_move_into_their_hour(&*s.history);
        }
    };
}
pub(crate) use store_contract_tests;

/// A record with every field set, so a store that drops or swaps one (a column left out of a
/// migration, a decode reading the wrong column) fails the round trip.
fn record(requests: u64, tokens_out: u64) -> HistoryRecord {
    let mut queue = super::history::LatencyHistogram::default();
    let (mut ttft, mut itl) = (queue.clone(), queue.clone());
    for _ in 0..requests {
        queue.record(0.004);
        ttft.record(0.150);
        itl.record(0.012);
    }
    // Each field a different multiple of `requests`: a merge of two records is the record of
    // their sum, and two fields swapped read back different.
    let r = requests;
    let secs = |m: f64| m * r as f64;
    HistoryRecord {
        requests,
        tokens_out,
        prompt_tokens: 7 * r,
        cached_tokens: 2 * r,
        target_passes: 11 * r,
        rounds: 13 * r,
        drafted: 17 * r,
        accepted: 19 * r,
        judged: 23 * r,
        draft_secs: secs(0.25),
        verify_secs: secs(0.125),
        e2e_secs: secs(2.0),
        accepted_per_pos: vec![r, 2 * r],
        ttft,
        itl,
        queue,
        shadow_checks: 5 * r,
        shadow_mismatches: 29 * r,
        shadow_plain_tokens: 3 * r,
        shadow_plain_secs: secs(0.5),
        load_share: Some(secs(0.75)),
        unlearned: super::history::Evidence {
            requests: r,
            rounds: 31 * r,
            drafted: 37 * r,
            accepted: 41 * r,
            judged: 43 * r,
            draft_secs: secs(0.0625),
            verify_secs: secs(1.5),
            load_share: secs(0.375),
        },
        // No `..Default::default()`: a field added later must be set here to compile.
    }
}

pub fn keys_authenticate_until_revoked(s: &dyn TenantStore) {
    let a = s.create("acme").unwrap();
    let b = s.add_key("acme").unwrap();
    assert_eq!(s.authenticate(&a.api_key).unwrap().as_deref(), Some("acme"));
    assert_eq!(s.authenticate(&b.api_key).unwrap().as_deref(), Some("acme"));
    let secret = a.api_key.rsplit('-').next().unwrap();
    let listed = serde_json::to_string(&s.list().unwrap()).unwrap();
    assert!(!listed.contains(secret), "a listing shows no secret");
    s.revoke("acme", &a.key_id).unwrap();
    assert_eq!(s.authenticate(&a.api_key).unwrap(), None);
    assert_eq!(s.authenticate(&b.api_key).unwrap().as_deref(), Some("acme"));
    let listed = s.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].keys.len(), 2);
}

pub fn bad_keys_names_and_duplicates_are_refused(s: &dyn TenantStore) {
    let a = s.create("t1").unwrap();
    let forged = format!("{}x", &a.api_key[..a.api_key.len() - 1]);
    for k in ["", "sg-", "nope", "sg-0000-1111", forged.as_str()] {
        assert_eq!(s.authenticate(k).unwrap(), None, "{k:?}");
    }
    assert!(matches!(s.create("t1"), Err(TenantError::Exists(_))));
    assert!(matches!(s.create("Bad Name"), Err(TenantError::BadName(_))));
    assert!(matches!(s.add_key("ghost"), Err(TenantError::NoTenant(_))));
    assert!(matches!(
        s.revoke("other", &a.key_id),
        Err(TenantError::NoKey { .. })
    ));
}

pub fn concurrent_limit_edits_all_succeed_and_one_wins_whole(s: Arc<dyn TenantStore>) {
    s.create("busy").unwrap();
    let edits: Vec<_> = (1..=8u64)
        .map(|n| {
            let s = std::sync::Arc::clone(&s);
            std::thread::spawn(move || {
                let limits = LimitOverrides {
                    max_concurrent_requests: Some(n as u32),
                    tokens_per_minute: Some(100 * n),
                    ..LimitOverrides::default()
                };
                (0..20).try_for_each(|_| s.set_limits("busy", limits.clone()))
            })
        })
        .collect();
    for e in edits {
        e.join().unwrap().unwrap();
    }
    let l = s.limits("busy").unwrap();
    let n = l.max_concurrent_requests.unwrap() as u64;
    assert_eq!(l.tokens_per_minute, Some(100 * n), "{l:?}");
}

pub fn resolution_versions_and_history(s: &dyn PolicyStore) {
    let class = WorkloadClass::Rag;
    assert_eq!(s.effective("acme", class).1, PolicySource::Shipped);
    s.seed_defaults().unwrap();
    s.seed_defaults().unwrap(); // idempotent
    assert_eq!(s.effective("acme", class).1, PolicySource::AllTenants);
    let off = RoutePolicy {
        speculation: false,
        ..default_policy(class)
    };
    let v = s.put("acme", class, off.clone(), "ops").unwrap();
    assert_eq!(v.version, 1);
    assert_eq!(
        s.effective("acme", class),
        (off.clone(), PolicySource::Tenant)
    );
    assert_eq!(s.effective("other", class).1, PolicySource::AllTenants);
    assert_eq!(s.put("acme", class, off, "ops").unwrap().version, 2);
    assert!(s.delete("acme", class, "ops").unwrap());
    assert!(!s.delete("acme", class, "ops").unwrap());
    assert_eq!(s.effective("acme", class).1, PolicySource::AllTenants);
    let h = s.history("acme", class).unwrap();
    let actions: Vec<_> = h.iter().map(|v| (v.version, v.action.as_str())).collect();
    assert_eq!(actions, vec![(1, "put"), (2, "put"), (3, "delete")]);
    let bad = RoutePolicy {
        k_min: 9,
        k_max: 2,
        ..default_policy(class)
    };
    assert!(matches!(
        s.put("acme", class, bad, "ops"),
        Err(PolicyStoreError::Invalid(_))
    ));
    assert_eq!(
        s.history("acme", class).unwrap().len(),
        3,
        "a refused edit leaves no trace"
    );
}

pub fn an_untouched_earlier_default_is_upgraded_and_an_admins_edit_is_kept(s: &dyn PolicyStore) {
    let older = |class| RoutePolicy {
        k_max: 3,
        ..default_policy(class)
    };
    // An earlier release seeded rag; an admin has since edited creative's `*` policy.
    s.put(
        ANY_TENANT,
        WorkloadClass::Rag,
        older(WorkloadClass::Rag),
        SHIPPED_BY,
    )
    .unwrap();
    let edit = older(WorkloadClass::Creative);
    s.put(
        ANY_TENANT,
        WorkloadClass::Creative,
        edit.clone(),
        SHIPPED_BY,
    )
    .unwrap();
    s.put(ANY_TENANT, WorkloadClass::Creative, edit.clone(), "ops")
        .unwrap();
    s.seed_defaults().unwrap();
    s.seed_defaults().unwrap(); // idempotent
    let rag = s.get(ANY_TENANT, WorkloadClass::Rag).unwrap().unwrap();
    assert_eq!(rag.policy, default_policy(WorkloadClass::Rag));
    assert_eq!(rag.version, 2, "the upgrade is a new version");
    let creative = s.get(ANY_TENANT, WorkloadClass::Creative).unwrap();
    assert_eq!(
        creative.map(|p| (p.policy, p.updated_by)),
        Some((edit, "ops".into()))
    );
    let chat = s.get(ANY_TENANT, WorkloadClass::Chat).unwrap().unwrap();
    assert_eq!(
        (chat.version, chat.policy),
        (1, default_policy(WorkloadClass::Chat))
    );
}

pub fn adds_merge_reads_filter_and_old_minutes_move_into_their_hour(s: &dyn HistoryStore) {
    let key =
        |tenant, at| HistoryKey::minute(tenant, WorkloadClass::Rag, StrategyKind::Suffix, 4, at);
    let hour = 7200 * 1000;
    s.add(
        FlushId::new(),
        &[
            (key("a", hour), record(1, 10)),
            (key("b", hour), record(5, 50)),
        ],
    )
    .unwrap();
    let second = FlushId::new();
    let batch = [
        (key("a", hour), record(1, 10)),
        (key("a", hour + 120), record(2, 20)),
    ];
    s.add(second, &batch).unwrap();
    // The same flush again (its reply was lost): counted once.
    s.add(second, &batch).unwrap();
    let a = s.read(Some("a"), 0, u64::MAX).unwrap();
    assert_eq!(
        a.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        vec![record(2, 20), record(2, 20)]
    );
    assert_eq!(s.read(Some("a"), hour + 60, u64::MAX).unwrap().len(), 1);
    assert_eq!(s.read(None, 0, u64::MAX).unwrap().len(), 3);
    assert_eq!(
        s.roll_up(hour + 60).unwrap(),
        2,
        "a's and b's first minutes"
    );
    assert_eq!(s.roll_up(hour + 60).unwrap(), 0);
    let a = s.read(Some("a"), 0, u64::MAX).unwrap();
    let hours: Vec<_> = a
        .iter()
        .filter(|(k, _)| k.granularity == Granularity::Hour)
        .map(|(k, r)| (k.start, r.clone()))
        .collect();
    assert_eq!(hours, vec![(hour, record(2, 20))]);
    assert_eq!(a.len(), 2, "the hour and the minute after the cutoff");
}

pub fn the_limiter_counts_requests_in_flight_and_tokens_per_tenant(l: &dyn Limiter) {
    let limits = Limits {
        max_concurrent_requests: 2,
        tokens_per_minute: 1000,
    };
    let a1 = l.admit("a", limits, 400).unwrap();
    let a2 = l.admit("a", limits, 400).unwrap();
    assert_eq!(l.active("a"), 2);
    assert!(matches!(
        l.admit("a", limits, 10),
        Err(QuotaError::Concurrency { limit: 2 })
    ));
    let b1 = l.admit("b", limits, 400).unwrap(); // another tenant's counters
                                                 // One ends having used 100 of its 400: 300 come back, and 500 fit again.
    l.release("a", &a1, 400, 100);
    assert_eq!(l.active("a"), 1);
    let a3 = l.admit("a", limits, 500).unwrap();
    l.release("a", &a3, 500, 500);
    assert!(matches!(
        l.admit("a", limits, 600),
        Err(QuotaError::TokensPerMinute { .. })
    ));
    assert!(matches!(
        l.admit("a", limits, 2000),
        Err(QuotaError::TooLarge { .. })
    ));
    l.release("a", &a2, 400, 400);
    l.release("b", &b1, 400, 400);
    assert_eq!((l.active("a"), l.active("b")), (0, 0));
}

pub fn a_store_copies_into_another_and_reads_back_the_same(s: &super::Stores) {
    let kept = s.tenants.create("kept").unwrap();
    let gone = s.tenants.add_key("kept").unwrap();
    s.tenants.revoke("kept", &gone.key_id).unwrap();
    s.tenants.create("other").unwrap();
    let limits = LimitOverrides {
        max_concurrent_requests: Some(3),
        tokens_per_minute: None,
        cache_scope: Some("acme-apps".into()),
        weight: Some(3),
        priority: Some(crate::scheduler::Priority::Interactive),
    };
    s.tenants.set_limits("kept", limits.clone()).unwrap();
    s.policies.seed_defaults().unwrap();
    let class = WorkloadClass::Chat;
    s.policies
        .put("kept", class, default_policy(class), "ops")
        .unwrap();
    s.policies.delete("kept", class, "ops").unwrap();
    let key = |at| HistoryKey::minute("kept", class, StrategyKind::Ngram, 3, at);
    let mut rich = record(4, 40);
    rich.accepted_per_pos = vec![4, 2, 1];
    rich.ttft.record(0.012);
    rich.load_share = Some(2.5);
    rich.cached_tokens = 32;
    rich.queue.record(0.250);
    rich.draft_secs = 0.125;
    s.history
        .add(
            FlushId::new(),
            &[(key(7200), rich), (key(7260), record(1, 1))],
        )
        .unwrap();

    let copy = super::Stores::temporary().unwrap();
    let report = super::copy::copy(s, &copy).unwrap();
    assert_eq!((report.tenants, report.keys), (2, 3));
    assert_eq!(report.routes, WorkloadClass::ALL.len() + 1);
    assert_eq!(report.history_buckets, 2);
    // What users rely on after a move: the same keys work, revoked ones do not.
    assert_eq!(
        copy.tenants.authenticate(&kept.api_key).unwrap().as_deref(),
        Some("kept")
    );
    assert_eq!(copy.tenants.authenticate(&gone.api_key).unwrap(), None);
    assert_eq!(copy.tenants.limits("kept").unwrap(), limits);
    assert_eq!(copy.policies.history("kept", class).unwrap().len(), 2);
    // A second copy into a store that is no longer empty is refused.
    assert!(matches!(
        super::copy::copy(s, &copy),
        Err(super::copy::CopyError::NotEmpty(_))
    ));
}

fn stored(tenant: &str, id: &str, created_at: u64, ttl: u64) -> StoredResponse {
    StoredResponse {
        id: id.into(),
        tenant: tenant.into(),
        created_at,
        expires_at: created_at + ttl,
        messages: vec![serde_json::json!({"role": "user", "content": id})],
        response: serde_json::json!({"id": id, "object": "response"}),
    }
}

pub fn responses_are_kept_per_tenant_until_they_expire(s: &dyn ResponseStore) {
    let r = stored("acme", "resp_1", 1_000, 100);
    s.put(&r).unwrap();
    assert_eq!(s.get("acme", "resp_1", 1_050).unwrap(), Some(r.clone()));
    // Another tenant's id reads as absent, whoever asks.
    assert_eq!(s.get("globex", "resp_1", 1_050).unwrap(), None);
    assert_eq!(s.get("acme", "resp_1", 1_100).unwrap(), None, "expired");
    // A later write sweeps it; a live one stays.
    s.put(&stored("acme", "resp_2", 1_200, 100)).unwrap();
    assert_eq!(s.get("acme", "resp_1", 0).unwrap(), None, "swept");
    assert!(s.get("acme", "resp_2", 1_250).unwrap().is_some());
    assert!(!s.delete("globex", "resp_2").unwrap());
    assert!(s.delete("acme", "resp_2").unwrap());
    assert_eq!(s.get("acme", "resp_2", 1_250).unwrap(), None);
}
