//! The analyst dashboard in headless Chromium: the page loads the history through the
//! analytics API and draws a chart per route with data in it (acceptance, latency, strategy
//! mix); a screenshot is kept in target/dashboard.png.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::server::{Server, ADMIN};
use serde_json::json;

fn headless(browser: &PathBuf, profile: &std::path::Path) -> Command {
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

/// The number in `attr="N"` right after `marker` in the DOM.
fn points_after(dom: &str, marker: &str) -> usize {
    let Some(at) = dom.find(marker) else {
        return 0;
    };
    let rest = &dom[at..];
    let Some(p) = rest.find("data-points=\"") else {
        return 0;
    };
    rest[p + 13..]
        .split('"')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_dashboard_draws_every_route_with_data() {
    let Some(browser) = common::outside::chromium() else {
        let install = "Chromium: apt-get install chromium, or set SPECGATE_CHROMIUM";
        return common::outside::skip("a headless Chromium", install);
    };
    let s = Server::start(&["--history-flush-ms", "100"]);
    let key = s.tenant("acme");
    let prompt = "Rename x to n:\n```python\ndef f(x):\n    return x + x\n```";
    for (class, k) in [("code_edit", 4), ("code_edit", 2), ("chat", 3)] {
        let body = json!({"model": s.model_id, "messages": [{"role": "user", "content": prompt}],
                          "max_tokens": 24, "temperature": 0, "workload": class,
                          "speculation": {"strategy": "suffix", "k": k}});
        assert_eq!(s.post("/v1/chat/completions", &key, &body).0, 200);
    }
    let url = format!("{}/dashboard#key={ADMIN}&bucket=minute", s.base);
    let profile = tempfile::tempdir().unwrap();
    let out = headless(&browser, profile.path())
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page never finished loading:\n{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for route in ["acme / code_edit", "acme / chat"] {
        let at = dom
            .find(&format!("data-route=\"{route}\""))
            .unwrap_or_else(|| panic!("no section for {route}"));
        let section = &dom[at..];
        assert!(
            points_after(section, "data-series=\"acceptance\"") > 0,
            "{route}: empty acceptance chart"
        );
        assert!(
            points_after(section, "data-series=\"latency\"") > 0,
            "{route}: empty latency chart"
        );
        assert!(
            points_after(section, "data-series=\"strategy-mix\"") > 0,
            "{route}: empty strategy mix"
        );
    }
    assert!(
        dom.contains("suffix:4") && dom.contains("suffix:2"),
        "the mix names strategy and k"
    );

    // A tenant's key sees its own routes; a bad key gets the API's error on the page.
    let mine = headless(&browser, profile.path())
        .arg("--dump-dom")
        .arg(format!("{}/dashboard#key=nonsense", s.base))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&mine.stdout).contains("invalid API key"));

    let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let status = headless(&browser, profile.path())
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,1400")
        .arg(&url)
        .status()
        .unwrap();
    assert!(status.success());
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "screenshot of {size} bytes");
}
