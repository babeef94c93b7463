//! The default model check: verified once by sha256, then trusted while the file is unchanged.

mod common;

use specgate::model::fetch::{ensure_default_model, model_sha256, DEFAULT_MODEL_SHA256};

#[test]
fn a_verified_model_is_stamped_and_a_changed_one_is_checked_again() {
    let dir = std::env::temp_dir().join(format!("specgate-fetch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dest = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    std::fs::copy(common::model_path(), &dest).unwrap();
    let stamp = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf.verified");
    let mut log = Vec::new();
    assert_eq!(ensure_default_model(&dest, &mut log).unwrap(), dest);
    assert!(stamp.exists(), "verification leaves a stamp");
    assert!(
        log.is_empty(),
        "nothing fetched: {}",
        String::from_utf8_lossy(&log)
    );
    // A stamp that no longer describes the file is ignored and rewritten after a re-hash.
    std::fs::write(&stamp, "stale").unwrap();
    assert_eq!(ensure_default_model(&dest, &mut log).unwrap(), dest);
    assert_ne!(std::fs::read_to_string(&stamp).unwrap(), "stale");
    assert_eq!(model_sha256(&dest).unwrap(), DEFAULT_MODEL_SHA256);
    // A file changed in place and given back its size and modification time is hashed
    // again, not trusted: the stamp also holds its change time, which no user can set.
    let mtime = std::fs::metadata(&dest).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&dest).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&dest, &bytes).unwrap();
    let f = std::fs::File::options().write(true).open(&dest).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(&dest).unwrap().modified().unwrap(), mtime);
    assert_ne!(model_sha256(&dest).unwrap(), DEFAULT_MODEL_SHA256);
    std::fs::remove_dir_all(&dir).ok();
}
