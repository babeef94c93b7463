//! Which measured priors the learner starts from: those made for the served model, found by
//! the model file's sha256 — a file named with `--priors`, else `<model>.priors.toml` beside
//! the model (where `specgate calibrate-policy` writes), else the priors shipped for the
//! default model. Priors measured on another model would start every class where that model
//! accepts, so they are not used (and named with `--priors`, refused).

use std::path::{Path, PathBuf};

use specgate_policies::{Priors, DEFAULT_MODEL_PRIORS};

#[derive(Debug, thiserror::Error)]
pub enum PriorsLoadError {
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error(
        "{path} was measured on {measured_on} (sha256 {expected}), not on the served model \
         (sha256 {actual}): run `specgate calibrate-policy --model …` for this model"
    )]
    OtherModel {
        path: PathBuf,
        measured_on: String,
        expected: String,
        actual: String,
    },
}

/// Where `calibrate-policy` writes a model's priors by default, and where `serve` looks.
pub fn beside_model(model: &Path) -> PathBuf {
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(".priors.toml");
    model.with_file_name(name)
}

/// The priors for the model whose sha256 is `sha256` and where they came from, or None (the
/// learner starts from uniform priors). An explicit file that does not load or was made for
/// another model is an error; a file beside the model that does is skipped with a warning in
/// `warnings`.
pub fn for_model(
    model: &Path,
    sha256: &str,
    explicit: Option<&Path>,
    warnings: &mut Vec<String>,
) -> Result<Option<(Priors, String)>, PriorsLoadError> {
    if let Some(path) = explicit {
        return read(path, sha256).map(|p| Some((p, path.display().to_string())));
    }
    let beside = beside_model(model);
    if beside.exists() {
        match read(&beside, sha256) {
            Ok(p) => return Ok(Some((p, beside.display().to_string()))),
            Err(e) => warnings.push(format!("priors not used: {e}")),
        }
    }
    let shipped = Priors::parse(DEFAULT_MODEL_PRIORS).map_err(|e| PriorsLoadError::File {
        path: "policies/defaults/priors.toml".into(),
        why: e.to_string(),
    })?;
    Ok((shipped.model_sha256 == sha256).then(|| (shipped, "shipped (default model)".into())))
}

fn read(path: &Path, sha256: &str) -> Result<Priors, PriorsLoadError> {
    let file = |why: String| PriorsLoadError::File {
        path: path.to_path_buf(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
    let priors = Priors::parse(&text).map_err(|e| file(e.to_string()))?;
    if priors.model_sha256 != sha256 {
        return Err(PriorsLoadError::OtherModel {
            path: path.to_path_buf(),
            measured_on: priors.model.clone(),
            expected: priors.model_sha256,
            actual: sha256.to_string(),
        });
    }
    Ok(priors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priors_for(sha: &str) -> String {
        format!(
            "model = \"m.gguf\"\nmodel_sha256 = \"{sha}\"\n\n[chat.ngram]\nalpha = 0.3\ndraft_cost = 0.0\n"
        )
    }

    #[test]
    fn priors_are_used_only_for_the_model_they_were_measured_on() {
        let dir = std::env::temp_dir().join(format!("specgate-priors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let model = dir.join("m.gguf");
        let (ours, theirs) = ("a".repeat(64), "b".repeat(64));
        std::fs::write(beside_model(&model), priors_for(&ours)).expect("write");
        let mut warnings = Vec::new();
        let found = for_model(&model, &ours, None, &mut warnings).expect("loads");
        assert!(found.is_some_and(|(p, _)| p.model_sha256 == ours));
        // Another model: the file beside it is skipped with a warning; named, it is refused.
        let found = for_model(&model, &theirs, None, &mut warnings).expect("no error");
        assert!(found.is_none());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let named = for_model(&model, &theirs, Some(&beside_model(&model)), &mut warnings);
        assert!(matches!(named, Err(PriorsLoadError::OtherModel { .. })));
        std::fs::remove_dir_all(&dir).ok();
    }
}
