//! The analyst dashboard in headless Chromium, as a user opens it: for the admin token and
//! for a tenant's key, the summary table shows the analytics API's numbers for the page's
//! range, the speed-up is given where plain decoding was measured on the route and "not
//! measured" elsewhere, every chart has labelled ticks on both axes, a policy edit is marked on
//! its route's time axis, and another tenant's data never reaches a tenant's page. A
//! screenshot is kept in target/dashboard.png.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::server::{request, Server, ADMIN};
use serde_json::{json, Value};

fn headless(browser: &Path, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--virtual-time-budget=15000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

fn dump(browser: &Path, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = headless(browser, profile.path())
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        dom.contains("data-ready="),
        "the page never finished loading:\n{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// The value of `attr="…"` in the first tag that has it after `at`.
fn attr<'a>(dom: &'a str, attr: &str) -> Option<&'a str> {
    let p = dom.find(&format!("{attr}=\""))? + attr.len() + 2;
    dom[p..].split('"').next()
}

/// The table row of a route ("tenant / class"): (field, data-value) per cell.
fn row_cells(dom: &str, route: &str) -> Vec<(String, String)> {
    let at = dom
        .find(&format!("<tr data-route=\"{route}\""))
        .unwrap_or_else(|| panic!("no summary row for {route}"));
    let row = &dom[at..at + dom[at..].find("</tr>").unwrap()];
    row.split("<td ")
        .skip(1)
        .map(|td| {
            let field = attr(td, "data-field").unwrap().to_string();
            (field, attr(td, "data-value").unwrap_or("").to_string())
        })
        .collect()
}

/// A cell's shown text in a route's row.
fn shown(dom: &str, route: &str, field: &str) -> String {
    let at = dom.find(&format!("<tr data-route=\"{route}\"")).unwrap();
    let cell = dom[at..].find(&format!("data-field=\"{field}\"")).unwrap();
    let rest = &dom[at + cell..];
    let text = &rest[rest.find('>').unwrap() + 1..rest.find("</td>").unwrap()];
    text.replace("<span class=\"ci\">", "")
        .replace("</span>", "")
}

/// Every number in the page's rows equals the API's for the page's own range.
fn assert_table_is_the_apis(dom: &str, s: &Server, token: &str) {
    let (from, to) = (
        attr(dom, "data-from").unwrap(),
        attr(dom, "data-to").unwrap(),
    );
    let url = s.url(&format!("/v1/analytics/summary?from={from}&to={to}"));
    let (status, api) = request("GET", &url, token, None);
    assert_eq!(status, 200, "{api}");
    let rows = api["data"].as_array().unwrap();
    assert!(!rows.is_empty());
    // The CSV link gives the same rows.
    let at = dom.find("id=\"csv\"").unwrap();
    let link = attr(&dom[at..], "data-href").unwrap().replace("&amp;", "&");
    let csv = ureq::get(&s.url(&link))
        .set("Authorization", &format!("Bearer {token}"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(csv.starts_with("tenant,class,requests,"), "{csv}");
    assert_eq!(csv.lines().count(), rows.len() + 1, "{csv}");
    for row in rows {
        let route = format!(
            "{} / {}",
            row["tenant"].as_str().unwrap(),
            row["class"].as_str().unwrap()
        );
        for (field, value) in row_cells(dom, &route) {
            let want = &row[&field];
            match want {
                Value::Number(n) => {
                    let got: f64 = value
                        .parse()
                        .unwrap_or_else(|_| panic!("{route} {field}: {value:?}"));
                    assert!(
                        (got - n.as_f64().unwrap()).abs() < 1e-9,
                        "{route} {field}: page {got}, API {n}"
                    );
                }
                Value::Null => assert_eq!(value, "", "{route} {field}"),
                Value::String(t) => assert_eq!(&value, t, "{route} {field}"),
                Value::Object(mix) => {
                    let got: Value = serde_json::from_str(&value.replace("&quot;", "\"")).unwrap();
                    let got = got.as_object().unwrap();
                    assert_eq!(got.len(), mix.len(), "{route} {field}: {got:?}");
                    for (k, v) in mix {
                        let (a, b) = (got[k].as_f64().unwrap(), v.as_f64().unwrap());
                        assert!(
                            (a - b).abs() < 1e-9,
                            "{route} {field} {k}: page {a}, API {b}"
                        );
                    }
                }
                other => panic!("{route} {field}: {other}"),
            }
        }
    }
}

/// Every chart draws ticks with labels on both axes, and the time axis names the zone.
fn assert_axes_are_labelled(dom: &str) {
    let charts: Vec<&str> = dom.split("<svg").skip(1).collect();
    assert!(charts.len() >= 5, "{} charts", charts.len());
    for chart in charts {
        let chart = &chart[..chart.find("</svg>").unwrap()];
        // Ticks whose label text (between the tag's end and the next tag) is not empty.
        let labels = |class: &str| {
            chart
                .split(&format!("class=\"{class}\""))
                .skip(1)
                .filter(|t| {
                    t.split_once('>').is_some_and(|(_, rest)| {
                        !rest.split('<').next().unwrap_or("").trim().is_empty()
                    })
                })
                .count()
        };
        assert!(
            labels("x-tick") >= 2 && labels("y-tick") >= 2,
            "unlabelled axes:\n{chart}"
        );
        assert!(chart.contains("time ("), "no time-zone caption:\n{chart}");
    }
}

fn wait_for_shadow_checks(s: &Server, key: &str, route: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = request("GET", &s.url("/v1/analytics/summary"), key, None);
        let rows = v["data"].as_array().cloned().unwrap_or_default();
        let done = rows.iter().any(|r| {
            format!(
                "{} / {}",
                r["tenant"].as_str().unwrap_or(""),
                r["class"].as_str().unwrap_or("")
            ) == route
                && r["plain_shadow_checks"].as_u64() >= Some(want)
        });
        if done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "shadow checks never finished: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_dashboard_shows_each_reader_its_own_routes_as_the_api_counts_them() {
    let Some(browser) = common::outside::chromium() else {
        let install = "Chromium: apt-get install chromium, or set SPECGATE_CHROMIUM";
        return common::outside::skip("a headless Chromium", install);
    };
    let s = Server::start(&["--history-flush-ms", "100"]);
    let (acme, globex) = (s.tenant("acme"), s.tenant("globex"));
    // Policies without shadow checks (version 1 of each route), then an edit of acme's chat
    // policy (its version 2): every speculative answer shadow-checked by plain decoding.
    let policy = |shadow_rate: f64| {
        json!({"speculation": true, "allowed": ["suffix", "ngram"], "k_min": 1, "k_max": 8,
               "explore": false, "shadow_rate": shadow_rate})
    };
    for (route, shadow_rate) in [
        ("acme/code_edit", 0.0),
        ("acme/chat", 0.0),
        ("acme/chat", 1.0),
        ("globex/creative", 0.0),
    ] {
        let path = format!("/admin/v1/policies/{route}");
        let (status, v) = s.admin("PUT", &path, Some(policy(shadow_rate)));
        assert_eq!(status, 200, "{v}");
    }
    let prompt = "Rename x to n:\n```python\ndef f(x):\n    return x + x\n```";
    let send = |key: &str, class: &str, strategy: &str, k: usize| {
        let body = s.chat_body(
            prompt,
            24,
            json!({"workload": class, "speculation": {"strategy": strategy, "k": k}}),
        );
        assert_eq!(s.post("/v1/chat/completions", key, &body).0, 200);
    };
    send(&acme, "code_edit", "suffix", 4);
    send(&acme, "code_edit", "suffix", 2);
    send(&acme, "chat", "suffix", 3);
    wait_for_shadow_checks(&s, &acme, "acme / chat", 1);
    send(&acme, "chat", "suffix", 3);
    send(&globex, "creative", "ngram", 4);
    wait_for_shadow_checks(&s, &acme, "acme / chat", 2);

    for (who, token) in [("admin", ADMIN), ("acme", acme.as_str())] {
        let dom = dump(
            &browser,
            &format!("{}/dashboard#key={token}&range=hour", s.base),
        );
        assert!(dom.contains("data-ready=\"1\""), "{who}: {dom}");
        assert_table_is_the_apis(&dom, &s, token);
        assert_axes_are_labelled(&dom);
        assert!(
            shown(&dom, "acme / chat", "speedup").contains('×'),
            "{who}: a measured speed-up"
        );
        assert_eq!(
            shown(&dom, "acme / code_edit", "speedup"),
            "not measured",
            "{who}"
        );
        // The edit is marked on the time axis of acme's chat charts only (every route shows its
        // version 1 and the shipped defaults, written when the server started).
        let section = |route: &str| {
            let at = dom
                .find(&format!("<section class=\"route\" data-route=\"{route}\""))
                .unwrap();
            &dom[at..at + dom[at..].find("</section>").unwrap()]
        };
        let edit = "class=\"policy-mark\" data-version=\"2\"";
        assert!(section("acme / chat").contains(edit), "{who}");
        assert!(!section("acme / code_edit").contains(edit), "{who}");
        assert!(
            section("acme / code_edit").contains("data-version=\"1\""),
            "{who}"
        );
        for chart in [
            "acceptance",
            "tokens-per-pass",
            "ttft",
            "itl",
            "strategy-mix",
        ] {
            let at = section("acme / code_edit")
                .find(&format!("data-series=\"{chart}\""))
                .unwrap();
            let points: usize = attr(&section("acme / code_edit")[at..], "data-points")
                .unwrap()
                .parse()
                .unwrap();
            assert!(points > 0, "{who}: empty {chart} chart");
        }
        assert!(
            dom.contains("suffix:4") && dom.contains("suffix:2"),
            "the mix names strategy and k"
        );
        let sees_globex = dom.contains("globex") || dom.contains("creative");
        assert_eq!(sees_globex, who == "admin", "{who}: another tenant's data");
    }

    // A link may open the tables sorted: by requests, fewest first.
    let sorted = dump(
        &browser,
        &format!("{}/dashboard#key={ADMIN}&range=hour&sort=requests", s.base),
    );
    let first_row = |table: &str| {
        let at = sorted.find(&format!("id=\"{table}\"")).unwrap();
        attr(&sorted[at..], "data-route").unwrap().to_string()
    };
    assert_eq!(first_row("tenants"), "globex / all");
    assert_eq!(first_row("routes-table"), "globex / creative");
    assert!(sorted.contains("data-field=\"requests\" aria-sort=\"ascending\""));
    // A tenant without traffic gets a page that says so.
    let idle = s.tenant("initech");
    let empty = dump(&browser, &format!("{}/dashboard#key={idle}", s.base));
    assert!(empty.contains("data-ready=\"1\"") && empty.contains("no requests in this range"));

    // A tenant's key cannot ask for another tenant; a bad key gets the API's error on the page.
    let other = dump(
        &browser,
        &format!("{}/dashboard#key={acme}&tenant=globex", s.base),
    );
    assert!(other.contains("its own tenant") && !other.contains("globex / creative"));
    let bad = dump(&browser, &format!("{}/dashboard#key=nonsense", s.base));
    assert!(bad.contains("invalid API key"));

    let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let profile = tempfile::tempdir().unwrap();
    let status = headless(&browser, profile.path())
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1400,1600")
        .arg(format!("{}/dashboard#key={ADMIN}&range=hour", s.base))
        .status()
        .unwrap();
    assert!(status.success());
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "screenshot of {size} bytes");
}
