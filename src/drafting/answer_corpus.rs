//! The answer corpus: the target's own greedy answers to generic prompts, indexed once at
//! start and consulted read-only by every tenant's suffix drafter where the tenant's own text
//! matches less (retrieval drafting from a datastore, as in REST, He et al. 2023).
//!
//! A new tenant's suffix cache is empty, yet a model's answers share stock phrasing across
//! everyone's requests: code fences, "This function uses a list comprehension to create a
//! new list", "Here is the modified code". The corpus holds no tenant's text: its prompts are
//! the Medusa heads' training prompts (`strategies/data/medusa/train_prompts.jsonl`), which
//! share no topic with the benchmark sets. It is made for one model file (its sha256), like
//! the heads, and refused for any other: another model words its answers differently.
//!
//! File: JSON lines, a [`CorpusHeader`] then one [`CorpusAnswer`] per prompt.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use specgate_strategies::{CorpusIndex, SharedCorpus, TokenId};

use crate::model::chat_template::ChatMessage;
use crate::model::loaded::LoadedModel;
use crate::model::tokenizer::Tokenizer;

pub const FORMAT: &str = "specgate-answer-corpus-1";

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error(
        "the answer corpus {path} was made for {made_for} (sha256 {expected}), not for this \
         model (sha256 {actual}); build one with `specgate build-corpus`"
    )]
    WrongModel {
        path: PathBuf,
        made_for: String,
        expected: String,
        actual: String,
    },
    #[error("tokenizing: {0}")]
    Tokenize(String),
    #[error("generating: {0}")]
    Generate(String),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CorpusHeader {
    pub format: String,
    /// The model file's name and sha256.
    pub target: String,
    pub target_sha256: String,
    /// Most tokens per answer.
    pub max_tokens: usize,
    /// The prompt file the answers answer.
    pub prompts: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CorpusAnswer {
    pub class: String,
    pub answer: String,
}

/// The shipped corpus for `model`: `strategies/data/corpus/<file stem>.jsonl`.
pub fn default_path(model: &Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let rel = Path::new("strategies/data/corpus").join(format!("{stem}.jsonl"));
    if rel.exists() {
        return rel;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn file_error(path: &Path, why: impl ToString) -> CorpusError {
    CorpusError::File {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Read a corpus file: its header and answers.
pub fn read(path: &Path) -> Result<(CorpusHeader, Vec<CorpusAnswer>), CorpusError> {
    let text = std::fs::read_to_string(path).map_err(|e| file_error(path, e))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: CorpusHeader = serde_json::from_str(lines.next().unwrap_or_default())
        .map_err(|e| file_error(path, format!("header: {e}")))?;
    if header.format != FORMAT {
        return Err(file_error(
            path,
            format!("format {:?}, expected {FORMAT:?}", header.format),
        ));
    }
    let answers = lines
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| file_error(path, format!("line {}: {e}", i + 2)))
        })
        .collect::<Result<Vec<CorpusAnswer>, _>>()?;
    Ok((header, answers))
}

pub fn write(
    path: &Path,
    header: &CorpusHeader,
    answers: &[CorpusAnswer],
) -> Result<(), CorpusError> {
    let line = |v: Result<String, serde_json::Error>| v.map_err(|e| file_error(path, e));
    let mut out = line(serde_json::to_string(header))? + "\n";
    for a in answers {
        out += &(line(serde_json::to_string(a))? + "\n");
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| file_error(path, e))?;
    }
    // Whole or not at all: a reader (a starting server) never sees half a corpus, and a
    // failed write (a full disk) leaves the old one in place.
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, out)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            file_error(path, e)
        })
}

/// Each answer as the tokens a sequence holds where the answer is being written: the chat
/// template's assistant header, the answer, and the end-of-turn token where the model ended
/// it. An answer of `max_tokens` (one less: re-encoding its text may merge a token) was cut
/// off there, and an end-of-turn token after it would teach an end the model never chose.
pub fn answer_tokens(
    tok: &Tokenizer,
    answers: &[CorpusAnswer],
    max_tokens: usize,
) -> Result<Vec<Vec<TokenId>>, CorpusError> {
    let header = assistant_header(tok)?;
    answers
        .iter()
        .map(|a| {
            let answer = tok
                .encode(&a.answer)
                .map_err(|e| CorpusError::Tokenize(e.to_string()))?;
            let cut_off = answer.len() + 1 >= max_tokens;
            let mut ids = header.clone();
            ids.extend(answer);
            if !cut_off {
                ids.push(tok.eos());
            }
            Ok(ids)
        })
        .collect()
}

/// The tokens that open the assistant's turn: what a one-message chat prompt ends with
/// after the user's message.
fn assistant_header(tok: &Tokenizer) -> Result<Vec<TokenId>, CorpusError> {
    const MARK: &str = "\u{1}";
    let text = crate::model::loaded::chat_prompt(tok, &[ChatMessage::new("user", MARK)])
        .map_err(|e| CorpusError::Tokenize(e.to_string()))?;
    let after = text.rsplit_once(MARK).map_or("", |(_, tail)| tail);
    let tail = after.split_once('\n').map_or(after, |(_, rest)| rest);
    tok.encode(tail)
        .map_err(|e| CorpusError::Tokenize(e.to_string()))
}

/// The corpus at `path` indexed for the model at `model`, refused if made for another one.
pub fn load(
    path: &Path,
    model: &Path,
    tok: &Tokenizer,
    max_depth: usize,
) -> Result<SharedCorpus, CorpusError> {
    let (header, answers) = read(path)?;
    let actual = crate::model::fetch::model_sha256(model).map_err(|e| file_error(model, e))?;
    if !actual.eq_ignore_ascii_case(&header.target_sha256) {
        return Err(CorpusError::WrongModel {
            path: path.to_path_buf(),
            made_for: header.target,
            expected: header.target_sha256,
            actual,
        });
    }
    let docs = answer_tokens(tok, &answers, header.max_tokens)?;
    Ok(Arc::new(CorpusIndex::new(
        max_depth,
        docs.iter().map(Vec::as_slice),
    )))
}

/// Which answer corpus a command uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum CorpusSource {
    /// The shipped one for the model, when there is one made for this model file.
    #[default]
    Default,
    /// This file, which must load.
    Path(PathBuf),
    Off,
}

impl CorpusSource {
    /// From `--corpus PATH` and `--no-corpus`.
    pub fn from_flags(path: Option<PathBuf>, off: bool) -> Self {
        match (path, off) {
            (_, true) => Self::Off,
            (Some(p), false) => Self::Path(p),
            (None, false) => Self::Default,
        }
    }

    /// The indexed corpus for the model at `model`, if any. A missing or mismatched default
    /// is no error (suffix drafting then works from tenants' text alone; stderr says why).
    pub fn load(
        &self,
        model: &Path,
        tok: &Tokenizer,
        max_depth: usize,
    ) -> Result<Option<SharedCorpus>, CorpusError> {
        match self {
            Self::Off => Ok(None),
            Self::Path(p) => load(p, model, tok, max_depth).map(Some),
            Self::Default => {
                let path = default_path(model);
                if !path.exists() {
                    eprintln!(
                        "specgate: no answer corpus at {} (suffix drafting uses tenants' text \
                         alone; `specgate build-corpus` makes one)",
                        path.display()
                    );
                    return Ok(None);
                }
                Ok(load(&path, model, tok, max_depth)
                    .inspect_err(|e| eprintln!("specgate: answer corpus unused: {e}"))
                    .ok())
            }
        }
    }
}

/// Greedy answers of the model to `prompts` ((class, prompt) pairs), `max_tokens` each.
pub fn generate_answers(
    lm: &mut LoadedModel,
    prompts: &[(String, String)],
    max_tokens: usize,
    log: &mut dyn Write,
) -> Result<Vec<CorpusAnswer>, CorpusError> {
    use crate::engine::generate::{generate, GenerateParams};
    use specgate_strategies::PlainDrafter;
    let params = GenerateParams::greedy(max_tokens, 0);
    let fail = |e: &dyn std::fmt::Display| CorpusError::Generate(e.to_string());
    let mut out = Vec::with_capacity(prompts.len());
    for (i, (class, prompt)) in prompts.iter().enumerate() {
        let text = lm
            .chat_prompt(&[ChatMessage::new("user", prompt)])
            .map_err(|e| fail(&e))?;
        let ids = lm.tokenizer.encode(&text).map_err(|e| fail(&e))?;
        let tok = lm.tokenizer.clone();
        let plain = generate(
            &mut lm.model,
            &tok,
            &ids,
            &params,
            &mut PlainDrafter,
            |_| {},
        )
        .map_err(|e| fail(&e))?;
        let ids: Vec<TokenId> = plain
            .token_ids
            .into_iter()
            .filter(|&t| t != tok.eos())
            .collect();
        let answer = tok.decode(&ids).map_err(|e| fail(&e))?;
        out.push(CorpusAnswer {
            class: class.clone(),
            answer,
        });
        if (i + 1) % 50 == 0 {
            let _ = writeln!(log, "{}/{} answers", i + 1, prompts.len());
        }
    }
    Ok(out)
}
