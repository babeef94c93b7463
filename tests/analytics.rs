//! History and the analyst API end to end: what concurrent requests reported in their usage
//! is exactly what the history holds, over time and summed over the range, and no tenant reads
//! another's.

mod common;

use common::server::{Server, ADMIN};
use serde_json::{json, Value};

fn analytics(s: &Server, key: &str, query: &str) -> (u16, Value) {
    get(s, key, &format!("/v1/analytics/routes{query}"))
}

fn get(s: &Server, key: &str, path: &str) -> (u16, Value) {
    match ureq::get(&s.url(path))
        .set("Authorization", &format!("Bearer {key}"))
        .call()
    {
        Ok(r) => (r.status(), r.into_json().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("{e}"),
    }
}

fn sum(rows: &[Value], field: &str) -> u64 {
    rows.iter().map(|r| r[field].as_u64().unwrap()).sum()
}

#[test]
fn history_equals_the_usage_requests_reported_and_tenants_see_only_their_own() {
    let s = Server::start(&["--history-flush-ms", "200"]);
    let tenants = [("alpha", s.tenant("alpha")), ("beta", s.tenant("beta"))];
    let classes = ["code_edit", "rag", "creative", "chat"];
    let prompts = [
        "Rename x to total:\n```python\ndef f(x):\n    return x * 2\n```",
        "Passage: The bridge opened in 1932 and spans 503 metres. Question: when did it open?",
        "Write a two-line poem about rain.",
        "What is 12 times 12?",
    ];
    // Twelve concurrent requests over both tenants and every class.
    let usages: Vec<(usize, Value)> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..12)
            .map(|i| {
                let (s, tenants) = (&s, &tenants);
                scope.spawn(move || {
                    let t = i % 2;
                    let body = json!({
                        "model": s.model_id,
                        "messages": [{"role": "user", "content": prompts[i % 4]}],
                        "max_tokens": 24, "temperature": 0, "workload": classes[i % 4],
                    });
                    let (status, v) = s.post("/v1/chat/completions", &tenants[t].1, &body);
                    assert_eq!(status, 200, "{v}");
                    (t, v["usage"].clone())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let (status, all) = analytics(&s, ADMIN, "?bucket=minute");
    assert_eq!(status, 200, "{all}");
    let rows = all["data"].as_array().unwrap();
    let reported = |t: Option<usize>, f: &dyn Fn(&Value) -> u64| -> u64 {
        usages
            .iter()
            .filter(|(i, _)| t.is_none_or(|t| *i == t))
            .map(|(_, u)| f(u))
            .sum()
    };
    assert_eq!(sum(rows, "requests"), 12);
    assert_eq!(
        sum(rows, "tokens_out"),
        reported(None, &|u| u["completion_tokens"].as_u64().unwrap())
    );
    assert_eq!(
        sum(rows, "drafted"),
        reported(None, &|u| u["speculative"]["drafted"].as_u64().unwrap())
    );
    assert_eq!(
        sum(rows, "accepted"),
        reported(None, &|u| u["speculative"]["accepted"].as_u64().unwrap())
    );
    assert_eq!(
        sum(rows, "target_passes"),
        reported(None, &|u| u["speculative"]["target_passes"]
            .as_u64()
            .unwrap())
    );
    assert!(
        rows.iter()
            .all(|r| r["ttft_p50_ms"].is_number() && r["queue_p95_ms"].is_number()),
        "latency and queue-time summaries recorded: {rows:?}"
    );

    // A tenant sees its own routes, with its own totals, and nobody else's.
    for (i, (name, key)) in tenants.iter().enumerate() {
        let (status, own) = analytics(&s, key, "?bucket=hour");
        assert_eq!(status, 200);
        let rows = own["data"].as_array().unwrap();
        assert!(
            rows.iter().all(|r| r["tenant"] == *name),
            "{name} saw {own}"
        );
        assert_eq!(sum(rows, "requests"), 6);
        assert_eq!(
            sum(rows, "tokens_out"),
            reported(Some(i), &|u| u["completion_tokens"].as_u64().unwrap())
        );
        let other = tenants[1 - i].0;
        let (status, v) = analytics(&s, key, &format!("?tenant={other}"));
        assert_eq!(status, 403, "{name} asked for {other}: {v}");
        assert_eq!(v["error"]["type"], "permission_error");
    }
    let (status, _) = analytics(&s, "sg-nobody-0", "");
    assert_eq!(status, 401);
    let (status, v) = analytics(&s, ADMIN, "?bucket=week");
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("bucket"))
    );

    // An admin's edit of beta's chat policy: on beta's time axis only, its author named to the
    // admin alone.
    let edit = json!({"speculation": true, "allowed": ["ngram"], "k_min": 1, "k_max": 4,
                      "explore": false, "shadow_rate": 0});
    let r = ureq::put(&s.url("/admin/v1/policies/beta/chat"))
        .set("Authorization", &format!("Bearer {ADMIN}"))
        .set("x-admin-user", "ops-carol")
        .send_json(edit)
        .unwrap();
    assert_eq!(r.status(), 200);
    let authors = |key: &str| -> Vec<(String, String)> {
        let (_, v) = get(&s, key, "/v1/analytics/summary");
        let changes = v["policy_changes"].as_array().unwrap().clone();
        changes
            .iter()
            .filter(|c| c["default"] == false)
            .map(|c| {
                (
                    c["tenant"].as_str().unwrap().into(),
                    c["by"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    assert_eq!(
        authors(ADMIN),
        [("beta".to_string(), "ops-carol".to_string())]
    );
    assert_eq!(
        authors(&tenants[1].1),
        [("beta".to_string(), "admin".to_string())]
    );
    let (_, alpha) = get(&s, &tenants[0].1, "/v1/analytics/summary");
    let changes = alpha["policy_changes"].as_array().unwrap();
    assert!(
        !changes.is_empty() && changes.iter().all(|c| c["tenant"] == "alpha"),
        "{alpha}"
    );

    // The summary: a tenant's row sums its routes (two classes each), equal to what its
    // requests reported.
    for (i, (name, key)) in tenants.iter().enumerate() {
        let (status, v) = get(&s, key, "/v1/analytics/summary");
        assert_eq!(status, 200, "{v}");
        let rows = v["data"].as_array().unwrap();
        assert!(rows.iter().all(|r| r["tenant"] == *name), "{name} saw {v}");
        let (all, routes): (Vec<&Value>, Vec<&Value>) =
            rows.iter().partition(|r| r["class"] == "all");
        assert_eq!((all.len(), routes.len()), (1, 2), "{v}");
        let field = |f: &str| reported(Some(i), &|u| u[f].as_u64().unwrap());
        assert_eq!(all[0]["requests"], 6);
        assert_eq!(all[0]["prompt_tokens"], field("prompt_tokens"));
        assert_eq!(all[0]["completion_tokens"], field("completion_tokens"));
        let routes_sum: u64 = routes
            .iter()
            .map(|r| r["completion_tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(routes_sum, field("completion_tokens"));
        let other = tenants[1 - i].0;
        let (status, _) = get(&s, key, &format!("/v1/analytics/summary?tenant={other}"));
        assert_eq!(status, 403);
    }
    let (status, v) = get(&s, ADMIN, "/v1/analytics/summary?format=xml");
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("format"))
    );
    let (status, v) = get(&s, ADMIN, "/v1/analytics/summary?bucket=hour");
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("bucket"))
    );

    // CSV for spreadsheets.
    let csv = ureq::get(&s.url("/v1/analytics/routes?tenant=alpha"))
        .set("Authorization", &format!("Bearer {ADMIN}"))
        .set("Accept", "text/csv")
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("tenant,class,bucket_start,requests"));
    assert!(lines.clone().count() >= 1 && lines.all(|l| l.starts_with("alpha,")));
}
