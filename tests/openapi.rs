//! `/openapi.json` is generated from the code and tells the truth: schemathesis (from PyPI;
//! installed into `target/py-venv` when python3 lacks it) generates valid and invalid
//! requests from it against the real server and checks that none gets a 5xx and every answer
//! conforms to the document.

mod common;

use std::path::Path;
use std::process::Command;

use common::server::{Server, ADMIN};
use serde_json::Value;

const CHECKS: &str =
    "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance";

const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// Run the schemathesis CLI (through `python`, so no PATH set-up is needed) on `paths`.
fn schemathesis(python: &Path, s: &Server, token: &str, paths: &str) {
    let out = Command::new(python)
        .args([
            "-c",
            "import sys; from schemathesis.cli import schemathesis; \
             sys.argv[0] = 'schemathesis'; sys.exit(schemathesis())",
            "run",
            &s.url("/openapi.json"),
            "--header",
            &format!("Authorization: Bearer {token}"),
            "--checks",
            CHECKS,
            "--max-examples",
            "25",
            "--seed",
            "7",
            "--request-timeout",
            "60",
            "--include-path-regex",
            paths,
        ])
        .output()
        .expect("running python with schemathesis");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis found problems:\n{text}");
    assert!(text.contains("passed"), "{text}");
}

#[test]
fn the_openapi_document_is_served_and_the_server_conforms_to_it() {
    let s = Server::start(&["--max-tokens-limit", "16", "--default-max-tokens", "8"]);
    let key = s.tenant("fuzz");
    let doc: Value = ureq::get(&s.url("/openapi.json"))
        .call()
        .expect("openapi.json")
        .into_json()
        .expect("json");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/v1/analytics/routes",
        "/admin/v1/tenants/{name}/limits",
        "/admin/v1/policies/{tenant}/{class}",
        "/ready",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
    }
    let chat = &doc["components"]["schemas"]["ChatRequest"];
    assert_eq!(chat["additionalProperties"], false);
    assert_eq!(chat["properties"]["model"]["enum"][0], s.model_id.as_str());
    assert_eq!(chat["properties"]["max_tokens"]["maximum"], 16);

    let Some(python) = common::outside::python_with("schemathesis", SCHEMATHESIS) else {
        let install = format!("pip install {SCHEMATHESIS}");
        return common::outside::skip("the schemathesis Python package", &install);
    };
    // A tenant's key for the OpenAI endpoints; the admin token for the admin and analyst ones.
    schemathesis(
        &python,
        &s,
        &key,
        "^/(v1/(chat/completions|completions|models)|health|ready|openapi.json)$",
    );
    schemathesis(&python, &s, ADMIN, "^/(admin/|metrics|v1/analytics)");
}
