//! The shipped prompt sets (`tests/fixtures/prompts/*.jsonl`, one `{"prompt": …}` per line):
//! code_edit, rag and creative traffic for benchmarks and exactness tests.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct PromptSet {
    pub name: String,
    pub prompts: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("{path}: {msg}")]
    Read { path: String, msg: String },
}

/// Where the sets live in a checkout.
pub fn default_prompt_dir() -> PathBuf {
    PathBuf::from("tests/fixtures/prompts")
}

pub const SET_NAMES: [&str; 4] = ["code_edit", "rag", "creative", "chat"];

/// Load `dir/NAME.jsonl` for each of [`SET_NAMES`].
pub fn load_prompt_sets(dir: &Path) -> Result<Vec<PromptSet>, PromptError> {
    SET_NAMES
        .iter()
        .map(|name| load_set(&dir.join(format!("{name}.jsonl")), name))
        .collect()
}

fn load_set(path: &Path, name: &str) -> Result<PromptSet, PromptError> {
    let err = |msg: String| PromptError::Read {
        path: path.display().to_string(),
        msg,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut prompts = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| err(format!("line {}: {e}", i + 1)))?;
        let p = v["prompt"]
            .as_str()
            .ok_or_else(|| err(format!("line {}: no \"prompt\"", i + 1)))?;
        prompts.push(p.to_string());
    }
    Ok(PromptSet {
        name: name.to_string(),
        prompts,
    })
}
