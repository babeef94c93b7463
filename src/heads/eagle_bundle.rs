//! The EAGLE draft layer on disk (format `specgate-eagle/1`), and what a server drafts with.
//!
//! A directory with `eagle.json` — `{"format", "hidden_size", "heads", "kv_heads",
//! "head_dim", "ffn", "rope_base", "rms_eps", "vocab_size", "target", "target_sha256",
//! "init_layer"}` — and `eagle.safetensors`: the tensors of
//! [`specgate_strategies::eagle::EagleShape::tensors`] (F16 or F32; vectors as [n]). The
//! layer drafts through the target's own LM head over the draft vocabulary (the first
//! `DRAFT_VOCAB` ids, as the Medusa heads) and reads token embeddings as they do (LM-head
//! rows, zero past `EMBED_VOCAB`). A layer trained for another model (sha256) is refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use specgate_strategies::eagle::{EagleHead, EagleShape, EagleWeights};
use specgate_strategies::LmHead;

use crate::heads::bundle::{sha256_of, target_lm_head, MedusaError, DRAFT_VOCAB};
use crate::heads::draft_vocab::DraftVocab;

pub const FORMAT: &str = "specgate-eagle/1";

#[derive(Debug, thiserror::Error)]
pub enum EagleError {
    #[error("{0}")]
    Io(String),
    #[error("EAGLE layer {path}: {why}")]
    Config { path: PathBuf, why: String },
    #[error(
        "this EAGLE layer was trained for {trained_for} (sha256 {expected}), not for {target} \
         (sha256 {actual}); train one for this model with `specgate train-eagle`"
    )]
    WrongModel {
        trained_for: String,
        expected: String,
        target: String,
        actual: String,
    },
    #[error("EAGLE layer tensors: {0}")]
    Tensors(String),
    #[error("target model: {0}")]
    Target(#[from] MedusaError),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EagleConfig {
    pub format: String,
    pub hidden_size: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    pub vocab_size: usize,
    pub target: String,
    pub target_sha256: String,
    /// The target layer the draft layer was initialised from (a record, not read).
    pub init_layer: usize,
    /// Softmax temperatures calibrating the first draft's and the later drafts'
    /// probabilities (`train-eagle` fits them on held-out data); absent: 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub temperatures: Vec<f32>,
    /// The share of held-out labels inside the draft vocabulary; absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f32>,
}

impl EagleConfig {
    /// A layer of `shape` for the target at `target` (named and hashed here), calibrated as
    /// given; `init_layer` is the target layer it started from.
    pub fn new(
        shape: EagleShape,
        vocab_size: usize,
        target: &Path,
        init_layer: usize,
        temperatures: Vec<f32>,
        coverage: f32,
    ) -> Result<Self, MedusaError> {
        Ok(Self {
            format: FORMAT.into(),
            hidden_size: shape.hidden,
            heads: shape.heads,
            kv_heads: shape.kv_heads,
            head_dim: shape.head_dim,
            ffn: shape.ffn,
            rope_base: shape.rope_base,
            rms_eps: shape.rms_eps,
            vocab_size,
            target: target
                .file_name()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
            target_sha256: sha256_of(target)?,
            init_layer,
            temperatures,
            coverage: Some(coverage),
        })
    }

    pub fn shape(&self) -> EagleShape {
        EagleShape {
            hidden: self.hidden_size,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            ffn: self.ffn,
            rope_base: self.rope_base,
            rms_eps: self.rms_eps,
        }
    }
}

/// The layer and the LM head it drafts through, shared by every request.
#[derive(Clone)]
pub struct EagleBundle {
    pub config: EagleConfig,
    pub head: Arc<EagleHead>,
    pub lm_head: Arc<dyn LmHead>,
}

fn config_error(path: &Path, why: impl ToString) -> EagleError {
    EagleError::Config {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Read `dir/eagle.json`, refusing a layer made for another model than `target`.
pub fn read_config(dir: &Path, target: &Path) -> Result<EagleConfig, EagleError> {
    let path = dir.join("eagle.json");
    let text = std::fs::read_to_string(&path).map_err(|e| config_error(&path, e))?;
    let cfg: EagleConfig = serde_json::from_str(&text).map_err(|e| config_error(&path, e))?;
    if cfg.format != FORMAT {
        return Err(config_error(
            &path,
            format!("format {:?}: expected {FORMAT:?}", cfg.format),
        ));
    }
    let actual = sha256_of(target)?;
    if !actual.eq_ignore_ascii_case(&cfg.target_sha256) {
        return Err(EagleError::WrongModel {
            trained_for: cfg.target.clone(),
            expected: cfg.target_sha256.clone(),
            target: target.display().to_string(),
            actual,
        });
    }
    Ok(cfg)
}

/// Load the layer in `dir` for the GGUF at `target`.
pub fn load(dir: &Path, target: &Path) -> Result<EagleBundle, EagleError> {
    let cfg = read_config(dir, target)?;
    let (lm_head, model) = target_lm_head(target, &DraftVocab::first(DRAFT_VOCAB))?;
    if (model.hidden, model.vocab_size) != (cfg.hidden_size, cfg.vocab_size) {
        return Err(config_error(
            &dir.join("eagle.json"),
            format!(
                "hidden {} / vocab {} do not match the model's {} / {}",
                cfg.hidden_size, cfg.vocab_size, model.hidden, model.vocab_size
            ),
        ));
    }
    let weights = load_weights(dir, &cfg)?;
    let calibrated = cfg.temperatures.iter().all(|t| t.is_finite() && *t > 0.0)
        && cfg.coverage.is_none_or(|c| (0.0..=1.0).contains(&c));
    if !calibrated {
        return Err(config_error(
            &dir.join("eagle.json"),
            "temperatures must be positive and coverage within [0, 1]",
        ));
    }
    let mut head = EagleHead::new(weights);
    head.temperatures = cfg.temperatures.clone();
    head.coverage = cfg.coverage.unwrap_or(1.0);
    Ok(EagleBundle {
        config: cfg,
        head: Arc::new(head),
        lm_head,
    })
}

/// The layer's weights in `dir`, of the shape `cfg` gives.
pub fn load_weights(dir: &Path, cfg: &EagleConfig) -> Result<EagleWeights, EagleError> {
    let path = dir.join("eagle.safetensors");
    let tensors =
        candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| config_error(&path, e))?;
    EagleWeights::from_named(cfg.shape(), |name| {
        tensors
            .get(name)
            .and_then(|t| t.to_dtype(DType::F32).ok())
            .and_then(|t| t.flatten_all().ok())
            .and_then(|t| t.to_vec1::<f32>().ok())
    })
    .map_err(|why| config_error(&path, why))
}

/// Write the layer (F16: half the bytes, far below its own error) and its config to `dir`.
pub fn save(dir: &Path, weights: &EagleWeights, cfg: &EagleConfig) -> Result<(), EagleError> {
    if cfg.shape() != weights.shape {
        return Err(EagleError::Tensors(
            "the config's shape is not the weights'".into(),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| EagleError::Io(e.to_string()))?;
    let mut map = HashMap::new();
    for ((name, [r, c]), t) in weights.shape.tensors().into_iter().zip(&weights.tensors) {
        let shape: Vec<usize> = if c == 1 { vec![r] } else { vec![r, c] };
        let t = Tensor::from_slice(t, shape, &Device::Cpu)
            .and_then(|t| t.to_dtype(DType::F16))
            .map_err(|e| EagleError::Tensors(e.to_string()))?;
        map.insert(name.to_string(), t);
    }
    candle_core::safetensors::save(&map, dir.join("eagle.safetensors"))
        .map_err(|e| EagleError::Tensors(e.to_string()))?;
    write_config(dir, cfg)
}

/// Write `dir/eagle.json` (a calibration changes only it).
pub fn write_config(dir: &Path, cfg: &EagleConfig) -> Result<(), EagleError> {
    let json = serde_json::to_string_pretty(cfg).map_err(|e| EagleError::Tensors(e.to_string()))?;
    std::fs::write(dir.join("eagle.json"), json + "\n").map_err(|e| EagleError::Io(e.to_string()))
}

/// Where the shipped layer for a model file lives: `strategies/data/eagle/<file stem>/`
/// under the working directory, else under the source tree this binary was built from.
pub fn default_dir(model: &Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let rel = Path::new("strategies/data/eagle").join(stem);
    if rel.exists() {
        return rel;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
