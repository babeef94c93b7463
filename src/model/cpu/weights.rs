//! The CPU's weights: a model file's tensors ([`crate::model::gguf`]) as our kernels' matrices.

use std::path::Path;

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::GgmlDType;

use super::linear::{Linear, LinearGroup, MatmulBackend};
use super::rows::QuantRows;
use crate::model::config::ModelConfig;
use crate::model::gguf::{self, dequantize, LayerTensors};
use crate::model::ModelError;

pub struct LayerWeights {
    pub attn_norm: Vec<f32>, // [hidden]
    pub qkv: LinearGroup,    // Q, K, V
    /// Q, K and V biases side by side (Qwen 2), [q_width + 2 * kv_width].
    pub qkv_bias: Option<Vec<f32>>,
    /// Per-head RMSNorm weights of Q and K (Qwen 3, Gemma 3), [head_dim] each.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Linear,
    pub post_attn_norm: Option<Vec<f32>>, // [hidden] (Gemma 3)
    pub ffn_norm: Vec<f32>,               // [hidden]
    pub gate_up: LinearGroup,             // gate, up
    pub down: Linear,
    pub post_ffn_norm: Option<Vec<f32>>, // [hidden] (Gemma 3)
}

/// The token embedding: dequantized once where that stays small, else kept quantized and
/// dequantized row by row (Gemma's 262k × 640 table would be 671 MB in f32).
pub enum Embeddings {
    F32(Vec<f32>), // [vocab, hidden]
    Rows(QuantRows),
}

/// Embedding tables up to this many values are dequantized at load (SmolLM2's: 28 M).
const F32_EMBEDDING_LIMIT: usize = 64 << 20;

impl Embeddings {
    /// Append token `t`'s row ([hidden]) to `out`.
    pub fn push_row(&self, t: usize, hidden: usize, out: &mut Vec<f32>) -> Result<(), ModelError> {
        match self {
            Self::F32(e) => out.extend_from_slice(&e[t * hidden..][..hidden]),
            Self::Rows(rows) => {
                if !rows.push_row(t, out)? {
                    return Err(ModelError::Invalid(format!("token {t} has no embedding")));
                }
            }
        }
        Ok(())
    }
}

pub struct Weights {
    pub embeddings: Embeddings,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // [hidden]
    pub lm_head: Linear,
    /// Llama 3's rotary frequency divisors (`rope_freqs.weight`), [rope_dim / 2].
    pub rope_freqs: Option<Vec<f32>>,
    /// Quant type of each layer's attention Q weight, for reports.
    pub dtype: GgmlDType,
}

pub struct LoadedGguf {
    pub content: Content,
    pub config: ModelConfig,
    pub weights: Weights,
}

/// Load the weights; `max_layers` keeps only the first L blocks (an early-exit draft model).
pub fn load(
    path: &Path,
    backend: MatmulBackend,
    max_layers: Option<usize>,
) -> Result<LoadedGguf, ModelError> {
    let mut dtype = GgmlDType::F32;
    let t = gguf::read_model(path, max_layers, |_, t| {
        dtype = t.qkv[0].dtype();
        cpu_layer(t, backend)
    })?;
    let (vocab, hidden) = (t.config.vocab_size, t.config.hidden);
    let embeddings = match vocab * hidden <= F32_EMBEDDING_LIMIT {
        true => Embeddings::F32(dequantize(&t.embedding)?),
        false => Embeddings::Rows(QuantRows::new(&t.embedding)?),
    };
    let lm_head = Linear::new(t.lm_head.unwrap_or(t.embedding), backend)?;
    let weights = Weights {
        embeddings,
        layers: t.layers,
        output_norm: t.output_norm,
        lm_head,
        rope_freqs: t.rope_freqs,
        dtype,
    };
    Ok(LoadedGguf {
        content: t.content,
        config: t.config,
        weights,
    })
}

/// One block's tensors as the CPU's linear layers.
fn cpu_layer(t: LayerTensors, backend: MatmulBackend) -> Result<LayerWeights, ModelError> {
    Ok(LayerWeights {
        attn_norm: t.attn_norm,
        qkv: LinearGroup::new(t.qkv, backend)?,
        qkv_bias: t.qkv_bias,
        q_norm: t.q_norm,
        k_norm: t.k_norm,
        wo: Linear::new(t.wo, backend)?,
        post_attn_norm: t.post_attn_norm,
        ffn_norm: t.ffn_norm,
        gate_up: LinearGroup::new(t.gate_up, backend)?,
        down: Linear::new(t.down, backend)?,
        post_ffn_norm: t.post_ffn_norm,
    })
}
