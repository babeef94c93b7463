//! Medusa heads on disk, and the target's LM head they draft through.
//!
//! A heads directory holds `heads.json` and `heads.safetensors`:
//! - `heads.json`: `{"format": "specgate-medusa/1", "num_heads", "hidden_size", "vocab_size",
//!   "lm_head": "target", "target": "<file name>", "target_sha256": "<hex>"}`;
//! - `heads.safetensors`: `heads.{i}.weight` [hidden, hidden] and `heads.{i}.bias` [hidden]
//!   (F32 or F16) for head i, computing h + SiLU(W·h + b) on the target's final normed
//!   hidden state; the target's own LM head turns that into logits.
//!
//! Heads are refused for any target whose sha256 differs. An MTP module shaped as a residual
//! block over the final hidden state converts by writing its weights under these names.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use specgate_strategies::{DraftError, LmHead, MedusaHeads};

use crate::model::{load_lm_head, Linear, MatmulBackend, ModelError};

pub const FORMAT: &str = "specgate-medusa/1";

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
}

/// Token ids the heads draft from: the first 16384 of the target's (a third of SmolLM2's).
/// BPE vocabularies number tokens in merge order, which follows frequency: these cover 94% of
/// the default model's greedy output on the shipped prompt sets. The LM head a draft step
/// reads shrinks from 30 MB to 10 MB; the target still verifies over its whole vocabulary,
/// so drafting from fewer tokens costs acceptance, never exactness.
pub const DRAFT_VOCAB: usize = 16384;

/// The target's LM head over the draft vocabulary, run with specgate's kernels
/// ([rows, hidden] → [rows, draft vocab]).
pub struct TargetLmHead {
    linear: Linear,
    target_vocab: usize,
}

impl LmHead for TargetLmHead {
    fn vocab(&self) -> usize {
        self.linear.out_dim()
    }

    fn target_vocab(&self) -> usize {
        self.target_vocab
    }

    fn logits(&self, rows: &[f32]) -> Result<Vec<f32>, DraftError> {
        self.linear
            .forward(rows)
            .map_err(|e| DraftError(e.to_string()))
    }
}

/// Heads and the LM head they draft through, shared by every request.
#[derive(Clone)]
pub struct MedusaBundle {
    pub config: HeadsConfig,
    pub heads: Arc<MedusaHeads>,
    pub lm_head: Arc<dyn LmHead>,
}

pub fn sha256_of(path: &Path) -> Result<String, MedusaError> {
    crate::fetch::sha256_file(path).map_err(|e| MedusaError::Io(e.to_string()))
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
    if cfg.format != FORMAT || cfg.lm_head != "target" {
        return Err(config_error(
            &path,
            format!(
                "format {:?} / lm_head {:?}: expected {FORMAT:?} / \"target\"",
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
    let (linear, model_cfg) = load_lm_head(target, MatmulBackend::Kernels, DRAFT_VOCAB)?;
    if (model_cfg.hidden, model_cfg.vocab_size) != (cfg.hidden_size, cfg.vocab_size) {
        return Err(config_error(
            &dir.join("heads.json"),
            format!(
                "hidden {} / vocab {} do not match the model's {} / {}",
                cfg.hidden_size, cfg.vocab_size, model_cfg.hidden, model_cfg.vocab_size
            ),
        ));
    }
    let heads = read_tensors(&dir.join("heads.safetensors"), &cfg)?;
    Ok(MedusaBundle {
        config: cfg,
        heads: Arc::new(heads),
        lm_head: Arc::new(TargetLmHead {
            linear,
            target_vocab: model_cfg.vocab_size,
        }),
    })
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
    }
    Ok(heads)
}

/// Write heads (stored as F16: half the size, and far below the heads' own error) and their
/// config to `dir`.
pub fn save(dir: &Path, heads: &MedusaHeads, cfg: &HeadsConfig) -> Result<(), MedusaError> {
    std::fs::create_dir_all(dir).map_err(|e| MedusaError::Io(e.to_string()))?;
    let d = heads.hidden;
    let mut map = HashMap::new();
    for (i, (w, b)) in heads.w.iter().zip(&heads.b).enumerate() {
        let w = Tensor::from_slice(w, (d, d), &Device::Cpu).and_then(|t| t.to_dtype(DType::F16));
        let b = Tensor::from_slice(b, d, &Device::Cpu).and_then(|t| t.to_dtype(DType::F16));
        map.insert(format!("heads.{i}.weight"), w.map_err(tensors_error)?);
        map.insert(format!("heads.{i}.bias"), b.map_err(tensors_error)?);
    }
    candle_core::safetensors::save(&map, dir.join("heads.safetensors")).map_err(tensors_error)?;
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
