//! The default model check: verified once by sha256, then trusted while the file is unchanged.

mod common;

use specgate::fetch::ensure_default_model;

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
    std::fs::remove_dir_all(&dir).ok();
}
