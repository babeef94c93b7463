//! The official `openai` Python client drives the server (tests/clients/openai_client.py).
//! The client is pinned and installed with pip when missing, as the model is fetched.

mod common;

use std::process::Command;

use common::server::Server;

const OPENAI: &str = "openai==3.57.0";

fn ensure_openai() {
    let present = Command::new("python3")
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                OPENAI,
            ])
            .status()
            .expect("running pip");
        assert!(status.success(), "installing {OPENAI} with pip failed");
    }
}

#[test]
fn the_official_openai_python_client_works_unchanged() {
    ensure_openai();
    let s = Server::start(&[]);
    let key = s.tenant("python");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_client.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .env("SPECGATE_URL", &s.base)
        .env("SPECGATE_KEY", &key)
        .env("SPECGATE_MODEL", &s.model_id)
        .output()
        .expect("running the client script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client checks failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("all openai client checks passed"),
        "{stdout}"
    );
}
