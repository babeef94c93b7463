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
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_client.py"
    );
    let out = Command::new(&python)
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
    eprintln!("{stdout}");
    assert!(
        stdout.contains("all openai client checks passed"),
        "{stdout}"
    );
}
