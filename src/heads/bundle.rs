//! Medusa heads on disk, and the target's LM head they draft through.
//!
//! A heads directory holds `heads.json` and `heads.safetensors`:
//! - `heads.json`: `{"format": "specgate-medusa/3", "num_heads", "hidden_size", "vocab_size",
//!   "lm_head": "target", "target": "<file name>", "target_sha256": "<hex>"}` and, once
//!   calibrated, `"temperatures"` and `"coverage"`: one each per head, how candidate trees
//!   turn its logits into chances of acceptance (`heads_calibration`); and, optionally,
//!   `"draft_vocab": "<file>"`, the token ids the heads draft from (`draft_vocab`; absent:
//!   the first `DRAFT_VOCAB` ids);
//! - `heads.safetensors`: `heads.{i}.weight` W [hidden, hidden], `heads.{i}.token_weight` U
//!   [hidden, hidden], `heads.{i}.prev_weight` V [hidden, hidden] and `heads.{i}.bias` b
//!   [hidden] (F32 or F16) for head i, computing h + SiLU(W·h + U·e + V·e_prev + b) on the
//!   target's final normed hidden state h, the pending token's LM-head row e and the row of the
//!   token before the head's target e_prev (the pending token for head 0, the previous head's
//!   draft after it; rows are zero past `EMBED_VOCAB`); the target's own LM head turns that
//!   into logits. Format 2 is the same without `prev_weight` (V = 0: the heads do not see each
//!   other's drafts) and format 1 also without `token_weight`; both still load.
//!
//! Heads are refused for any target whose sha256 differs. An MTP module shaped as a residual
//! block over the final hidden state converts by writing its weights under these names.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use specgate_strategies::{DraftError, LmHead, MedusaHeads, TokenId};

use crate::heads::draft_vocab::{self, DraftVocab, DraftVocabFile};
use crate::model::{
    first_rows, lm_head_tensor, select_rows, Linear, MatmulBackend, ModelError, QuantRows,
};

/// Heads that read the pending token's embedding and, each, the token drafted before it (what
/// `train-heads` writes).
pub const FORMAT: &str = "specgate-medusa/3";
/// Heads that read the pending token's embedding but not each other's drafts.
pub const FORMAT_2: &str = "specgate-medusa/2";
/// Heads on h alone.
pub const FORMAT_1: &str = "specgate-medusa/1";

#[derive(Debug, thiserror::Error)]
pub enum MedusaError {
    #[error("{0}")]
    Io(String),
    #[error("heads config {path}: {why}")]
    Config { path: PathBuf, why: String },
    #[error(
        "these Medusa heads were trained for {trained_for} (sha256 {expected}), not for {target} \
         (sha256 {actual}); train heads for this model with `specgate train-heads`"
    )]
    WrongModel {
        trained_for: String,
        expected: String,
        target: String,
        actual: String,
    },
    #[error("heads tensors: {0}")]
    Tensors(String),
    #[error("target model: {0}")]
    Model(#[from] ModelError),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeadsConfig {
    pub format: String,
    pub num_heads: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    pub lm_head: String,
    pub target: String,
    pub target_sha256: String,
    /// Per head, the softmax temperature that calibrates its probabilities for ranking tree
    /// candidates (`specgate calibrate-heads`); absent: 1 for every head.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub temperatures: Vec<f32>,
    /// Per head, the share of held-out labels inside the draft vocabulary (the chance that
    /// the token there can be drafted at all); absent: 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<f32>,
    /// The file in the heads' directory that lists the draft vocabulary (`draft_vocab`);
    /// absent: the first `DRAFT_VOCAB` ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_vocab: Option<String>,
}

/// How many token ids the heads draft from: 8192 (a sixth of SmolLM2's); which ones, a
/// `draft_vocab` file says (else the first 8192). BPE vocabularies number tokens in merge
/// order, which follows frequency: the first 8192 cover 88% of the default model's greedy
/// output on the shipped prompt sets (16384: 94%). A draft step is
/// bound by reading this LM head (30 MB whole, 5 MB cut): `bench spec` medusa k=1 measured c
/// 0.13 at 16384 and 0.07 here, with the same first-head acceptance (0.23–0.30). The target
/// still verifies over its whole vocabulary, so drafting from fewer tokens costs acceptance,
/// never exactness.
pub const DRAFT_VOCAB: usize = 8192;

/// Token ids whose LM-head row the token-conditioned heads read as the pending token's
/// embedding (zero for later ids). Training and drafting must agree on it; it is wider than
/// `DRAFT_VOCAB` because a row lookup costs one row, not a matrix.
pub const EMBED_VOCAB: usize = 16384;

/// The target's LM head over the draft vocabulary, run with specgate's kernels
/// ([rows, hidden] → [rows, draft vocab]); its quantized rows are kept to dequantize the
/// pending token's embedding one row at a time.
pub struct TargetLmHead {
    linear: Linear,
    rows: QuantRows,
    target_vocab: usize,
    draft_ids: Vec<TokenId>,
}

impl LmHead for TargetLmHead {
    fn vocab(&self) -> usize {
        self.linear.out_dim()
    }

    fn target_vocab(&self) -> usize {
        self.target_vocab
    }

    fn token_id(&self, index: usize) -> Option<TokenId> {
        self.draft_ids.get(index).copied()
    }

    fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError> {
        self.linear
            .forward(rows)
            .map_err(|e| DraftError(e.to_string()))
    }

    fn token_row(&self, token: TokenId) -> Result<Option<Vec<f32>>, DraftError> {
        self.rows
            .row(token as usize)
            .map_err(|e| DraftError(format!("LM-head row {token}: {e}")))
    }
}

/// Heads and the LM head they draft through, shared by every request.
#[derive(Clone)]
pub struct MedusaBundle {
    pub config: HeadsConfig,
    pub draft_vocab: DraftVocab,
    pub heads: Arc<MedusaHeads>,
    pub lm_head: Arc<dyn LmHead>,
}

pub fn sha256_of(path: &Path) -> Result<String, MedusaError> {
    crate::model::fetch::model_sha256(path).map_err(|e| MedusaError::Io(e.to_string()))
}

fn config_error(path: &Path, why: impl ToString) -> MedusaError {
    MedusaError::Config {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Read `dir`'s config, refusing heads made for another model than `target`.
pub fn read_config(dir: &Path, target: &Path) -> Result<HeadsConfig, MedusaError> {
    let path = dir.join("heads.json");
    let text = std::fs::read_to_string(&path).map_err(|e| config_error(&path, e))?;
    let cfg: HeadsConfig = serde_json::from_str(&text).map_err(|e| config_error(&path, e))?;
    let known = [FORMAT, FORMAT_2, FORMAT_1].contains(&cfg.format.as_str());
    if !known || cfg.lm_head != "target" {
        return Err(config_error(
            &path,
            format!(
                "format {:?} / lm_head {:?}: expected {FORMAT:?}, {FORMAT_2:?} or {FORMAT_1:?} \
                 / \"target\"",
                cfg.format, cfg.lm_head
            ),
        ));
    }
    let actual = sha256_of(target)?;
    if !actual.eq_ignore_ascii_case(&cfg.target_sha256) {
        return Err(MedusaError::WrongModel {
            trained_for: cfg.target.clone(),
            expected: cfg.target_sha256.clone(),
            target: target.display().to_string(),
            actual,
        });
    }
    Ok(cfg)
}

/// Load heads from `dir` for the GGUF at `target`.
pub fn load(dir: &Path, target: &Path) -> Result<MedusaBundle, MedusaError> {
    let cfg = read_config(dir, target)?;
    let model_cfg = crate::model::lm_head_tensor(target)?.1;
    let draft_vocab = read_draft_vocab(dir, &cfg, model_cfg.vocab_size)?;
    let (lm_head, model_cfg) = target_lm_head(target, &draft_vocab)?;
    if (model_cfg.hidden, model_cfg.vocab_size) != (cfg.hidden_size, cfg.vocab_size) {
        return Err(config_error(
            &dir.join("heads.json"),
            format!(
                "hidden {} / vocab {} do not match the model's {} / {}",
                cfg.hidden_size, cfg.vocab_size, model_cfg.hidden, model_cfg.vocab_size
            ),
        ));
    }
    let mut heads = read_tensors(&dir.join("heads.safetensors"), &cfg)?;
    (heads.temperatures, heads.coverage) =
        checked_calibration(&cfg).map_err(|why| config_error(&dir.join("heads.json"), why))?;
    heads.quantize();
    Ok(MedusaBundle {
        config: cfg,
        heads: Arc::new(heads),
        lm_head,
        draft_vocab,
    })
}

/// The target's LM head over `draft_vocab`, as drafters read it, and the model's config.
pub fn target_lm_head(
    target: &Path,
    draft_vocab: &DraftVocab,
) -> Result<(Arc<dyn LmHead>, crate::model::ModelConfig), MedusaError> {
    let (lm_head, model_cfg) = lm_head_tensor(target)?;
    let linear = Linear::new(
        select_rows(&lm_head, draft_vocab.ids())?,
        MatmulBackend::Kernels,
    )?;
    let rows = QuantRows::new(&first_rows(&lm_head, EMBED_VOCAB)?)?;
    let head = TargetLmHead {
        linear,
        rows,
        target_vocab: model_cfg.vocab_size,
        draft_ids: draft_vocab.ids().to_vec(),
    };
    Ok((Arc::new(head), model_cfg))
}

/// The draft vocabulary `cfg` names (a file in `dir`), else the first `DRAFT_VOCAB` ids.
pub fn read_draft_vocab(
    dir: &Path,
    cfg: &HeadsConfig,
    vocab: usize,
) -> Result<DraftVocab, MedusaError> {
    let Some(file) = &cfg.draft_vocab else {
        return Ok(DraftVocab::first(DRAFT_VOCAB.min(vocab)));
    };
    let bad = |why: String| config_error(&dir.join("heads.json"), why);
    if Path::new(file).components().count() != 1 {
        return Err(bad(format!("draft_vocab {file:?} is not a file name")));
    }
    draft_vocab::read(&dir.join(file), vocab).map_err(bad)
}

/// The config's calibration: temperatures (none, or one finite positive value per head) and
/// coverage (none, or one share in [0, 1] per head).
fn checked_calibration(cfg: &HeadsConfig) -> Result<(Vec<f32>, Vec<f32>), String> {
    for (name, v) in [
        ("temperatures", &cfg.temperatures),
        ("coverage", &cfg.coverage),
    ] {
        if !v.is_empty() && v.len() != cfg.num_heads {
            return Err(format!(
                "{} {name} values for {} heads",
                v.len(),
                cfg.num_heads
            ));
        }
    }
    if let Some(bad) = cfg
        .temperatures
        .iter()
        .find(|&&x| !(x.is_finite() && x > 0.0))
    {
        return Err(format!("temperature {bad} is not a positive number"));
    }
    if let Some(bad) = cfg.coverage.iter().find(|&&x| !(0.0..=1.0).contains(&x)) {
        return Err(format!("coverage {bad} is not a share in [0, 1]"));
    }
    Ok((cfg.temperatures.clone(), cfg.coverage.clone()))
}

fn tensors_error(e: impl ToString) -> MedusaError {
    MedusaError::Tensors(e.to_string())
}

fn read_tensors(path: &Path, cfg: &HeadsConfig) -> Result<MedusaHeads, MedusaError> {
    let tensors = candle_core::safetensors::load(path, &Device::Cpu).map_err(tensors_error)?;
    let d = cfg.hidden_size;
    let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>, MedusaError> {
        let t = tensors
            .get(name)
            .ok_or_else(|| MedusaError::Tensors(format!("{name} missing in {}", path.display())))?;
        if t.dims() != shape {
            return Err(MedusaError::Tensors(format!(
                "{name} has shape {:?}, expected {shape:?}",
                t.dims()
            )));
        }
        t.to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(tensors_error)
    };
    let mut heads = MedusaHeads::zeros(0, d);
    for i in 0..cfg.num_heads {
        heads.w.push(get(&format!("heads.{i}.weight"), &[d, d])?);
        heads.b.push(get(&format!("heads.{i}.bias"), &[d])?);
        if cfg.format != FORMAT_1 {
            heads
                .u
                .push(get(&format!("heads.{i}.token_weight"), &[d, d])?);
        }
        if cfg.format == FORMAT {
            heads
                .v
                .push(get(&format!("heads.{i}.prev_weight"), &[d, d])?);
        }
    }
    heads.fold_first_prev();
    Ok(heads)
}

/// The format that stores `heads`: what they read besides h.
pub fn format_of(heads: &MedusaHeads) -> &'static str {
    match (heads.token_conditioned(), heads.chained()) {
        (_, true) => FORMAT,
        (true, false) => FORMAT_2,
        (false, false) => FORMAT_1,
    }
}

/// Write heads (stored as F16: half the size, and far below the heads' own error) and their
/// config to `dir`; `cfg.format` must be `format_of(heads)`. The heads' calibration
/// (temperatures, coverage) is written into the config.
pub fn save(dir: &Path, heads: &MedusaHeads, cfg: &HeadsConfig) -> Result<(), MedusaError> {
    let want = format_of(heads);
    if heads.chained() && !heads.token_conditioned() {
        return Err(MedusaError::Tensors(
            "chained heads are stored with token weights (U); these have none".into(),
        ));
    }
    if cfg.format != want {
        return Err(MedusaError::Tensors(format!(
            "these heads are {want}, the config says {}",
            cfg.format
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| MedusaError::Io(e.to_string()))?;
    let d = heads.hidden;
    let f16 = |v: &[f32], shape: &[usize]| {
        Tensor::from_slice(v, shape, &Device::Cpu)
            .and_then(|t| t.to_dtype(DType::F16))
            .map_err(tensors_error)
    };
    let mut map = HashMap::new();
    for (i, (w, b)) in heads.w.iter().zip(&heads.b).enumerate() {
        map.insert(format!("heads.{i}.weight"), f16(w, &[d, d])?);
        map.insert(format!("heads.{i}.bias"), f16(b, &[d])?);
        if let Some(u) = heads.u.get(i) {
            map.insert(format!("heads.{i}.token_weight"), f16(u, &[d, d])?);
        }
        if let Some(v) = heads.v.get(i) {
            // An empty V (folded into U by `fold_first_prev`) is stored as zeros.
            let zeros = vec![0.0; d * d];
            let v = if v.is_empty() { &zeros } else { v };
            map.insert(format!("heads.{i}.prev_weight"), f16(v, &[d, d])?);
        }
    }
    candle_core::safetensors::save(&map, dir.join("heads.safetensors")).map_err(tensors_error)?;
    let cfg = HeadsConfig {
        temperatures: heads.temperatures.clone(),
        coverage: heads.coverage.clone(),
        ..cfg.clone()
    };
    write_config(dir, &cfg)
}

/// The file a ranked draft vocabulary is written to, beside the heads.
pub const DRAFT_VOCAB_FILE: &str = "draft_vocab.json";

/// Write a ranked draft vocabulary to `dir/draft_vocab.json`; the heads use it once their
/// config names it (`draft_vocab`).
pub fn save_draft_vocab(dir: &Path, file: &DraftVocabFile) -> Result<(), MedusaError> {
    std::fs::create_dir_all(dir).map_err(|e| MedusaError::Io(e.to_string()))?;
    draft_vocab::write(&dir.join(DRAFT_VOCAB_FILE), file)
        .map_err(|e| MedusaError::Io(e.to_string()))
}

/// Write `dir/heads.json` (after checking its calibration fits its heads).
pub fn write_config(dir: &Path, cfg: &HeadsConfig) -> Result<(), MedusaError> {
    checked_calibration(cfg).map_err(|why| config_error(&dir.join("heads.json"), why))?;
    let json = serde_json::to_string_pretty(cfg).map_err(tensors_error)?;
    std::fs::write(dir.join("heads.json"), json + "\n").map_err(|e| MedusaError::Io(e.to_string()))
}

/// Where the shipped heads for a model file live: `strategies/data/medusa/<file stem>/`
/// under the working directory, else under the source tree this binary was built from.
pub fn default_dir(model: &Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let rel = Path::new("strategies/data/medusa").join(stem);
    if rel.exists() {
        return rel;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
