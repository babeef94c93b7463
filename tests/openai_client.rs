//! The official `openai` Python client drives the server (tests/clients/openai_client.py).
//! The client is pinned; when python3 lacks it, it is installed into `target/py-venv`.

mod common;

use std::process::Command;

use common::server::Server;

const OPENAI: &str = "openai==3.57.0";

#[test]
fn the_official_openai_python_client_works_unchanged() {
    let Some(python) = common::outside::python_with("openai", OPENAI) else {
        return common::outside::skip(
            "the openai Python package",
            &format!("pip install {OPENAI}"),
        );
    };
    let s = Server::start(&[]);
    let key = s.tenant("python");
    for (script, done) in [
        ("openai_client.py", "all openai client checks passed"),
        ("openai_responses.py", "all openai responses checks passed"),
    ] {
        let stdout = run_script(&python, &s, &key, script);
        assert!(stdout.contains(done), "{stdout}");
    }
}

/// Runs one client script from tests/clients against the server; its output.
fn run_script(python: &std::path::Path, s: &Server, key: &str, script: &str) -> String {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python)
        .arg(path)
        .env("SPECGATE_URL", &s.base)
        .env("SPECGATE_KEY", key)
        .env("SPECGATE_MODEL", &s.model_id)
        .output()
        .expect("running the client script");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script}: client checks failed:\n{stdout}\n{stderr}"
    );
    eprintln!("{stdout}");
    stdout
}
