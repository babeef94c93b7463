//! Programs from outside Rust that some tests drive (Python packages, a headless browser).
//! Each is found, or installed into a project-local place (`target/py-venv`, never the
//! system); where neither works the test says `skipped: … not found (install …)` and passes —
//! unless `SPECGATE_REQUIRE_SERVICES=1` (set by `.ci/run`), under which a missing program
//! fails the test: CI never counts a skip as a pass.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// Whether this run must have every outside program (CI).
pub fn required() -> bool {
    std::env::var("SPECGATE_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// Print the skip, or fail where nothing may be skipped.
pub fn skip(what: &str, install: &str) {
    assert!(
        !required(),
        "{what} not found and SPECGATE_REQUIRE_SERVICES=1 (install {install})"
    );
    eprintln!("skipped: {what} not found (install {install})");
}

fn runs(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

fn imports(python: &Path, module: &str) -> bool {
    runs(Command::new(python).args(["-c", &format!("import {module}")]))
}

/// The project's own virtual environment, created on first use.
fn venv() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/py-venv");
    let python = dir.join("bin/python");
    if !python.exists() && !runs(Command::new("python3").args(["-m", "venv"]).arg(&dir)) {
        eprintln!("creating {} with python3 -m venv failed", dir.display());
        return None;
    }
    python.exists().then_some(python)
}

/// A Python that can import `module`: the system's python3 if it can, else the project's
/// venv, installing `requirement` (a pinned `name==version`) there when missing. None when
/// there is no Python or the package cannot be installed (no network, no venv module).
pub fn python_with(module: &str, requirement: &str) -> Option<PathBuf> {
    // One install at a time: tests of one binary run in parallel.
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let _one = LOCK.get_or_init(|| Mutex::new(())).lock();
    let system = PathBuf::from("python3");
    if imports(&system, module) {
        return Some(system);
    }
    let python = venv()?;
    if imports(&python, module) {
        return Some(python);
    }
    eprintln!("installing {requirement} into target/py-venv");
    // The venv's own installer: it writes into target/py-venv, never the system.
    let installer = python.with_file_name("pip");
    let installed = runs(Command::new(installer).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        // A network that drops packets fails the install in about a minute, not many.
        "--retries",
        "1",
        "--timeout",
        "20",
        requirement,
    ]));
    (installed && imports(&python, module)).then_some(python)
}

/// A headless-capable Chromium or Chrome on PATH (`SPECGATE_CHROMIUM` names another).
pub fn chromium() -> Option<PathBuf> {
    let named = std::env::var_os("SPECGATE_CHROMIUM").map(PathBuf::from);
    let candidates = ["chromium", "chromium-browser", "google-chrome"].map(PathBuf::from);
    named
        .into_iter()
        .chain(candidates)
        .find(|c| runs(Command::new(c).arg("--version")))
}
