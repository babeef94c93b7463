//! The learner's measured priors as a user makes and serves them: `calibrate-policy` writes a
//! file the server accepts for its model, and a file measured on another model is refused.

mod common;

use specgate_policies::{Priors, WorkloadClass};

use common::specgate;

#[test]
fn calibrate_policy_measures_every_class_and_serve_refuses_priors_of_another_model() {
    let model = common::model_path();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("priors.toml");
    let (code, stdout, stderr) = specgate(&[
        "calibrate-policy",
        "--model",
        model.to_str().unwrap(),
        "--prompts-per-set",
        "1",
        "--max-tokens",
        "16",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("priors.toml"), "{stdout}");
    let text = std::fs::read_to_string(&out).expect("written");
    let priors = Priors::parse(&text).expect("a valid priors file");
    let sha = specgate::model::fetch::model_sha256(&model).expect("sha256");
    assert_eq!(priors.model_sha256, sha);
    let entries = priors.entries().expect("typed");
    for class in [
        WorkloadClass::CodeEdit,
        WorkloadClass::Rag,
        WorkloadClass::Creative,
        WorkloadClass::Chat,
    ] {
        let suffix = entries
            .iter()
            .find(|(c, s, _)| *c == class && s.name() == "suffix")
            .unwrap_or_else(|| panic!("no suffix prior for {}", class.name()));
        assert!((0.0..=1.0).contains(&suffix.2.alpha), "{suffix:?}");
        assert!(
            suffix.2.drafts_per_round.is_some(),
            "self-pricing: {suffix:?}"
        );
    }

    // The same file claiming another model: serve refuses it in one line and exits.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, text.replace(&sha, &"0".repeat(64))).expect("write");
    let (code, _, stderr) = specgate(&[
        "serve",
        "--model",
        model.to_str().unwrap(),
        "--store",
        &format!("sled:{}", dir.path().join("db").display()),
        "--port",
        "0",
        "--priors",
        other.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("not on the served model") && stderr.contains("calibrate-policy"),
        "{stderr}"
    );
}
