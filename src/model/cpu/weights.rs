//! Loading a GGUF file (any architecture of [`crate::model::arch`]) into the weights the
//! forward pass uses.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Content};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::linear::{Linear, LinearGroup, MatmulBackend};
use super::rows::QuantRows;
use crate::model::config::ModelConfig;
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

/// Parse the header and metadata only (tokenizer and config), without reading tensors.
pub fn read_header(path: &Path) -> Result<(Content, BufReader<File>), ModelError> {
    let file = File::open(path)
        .map_err(|e| ModelError::Io(format!("cannot open model {}: {e}", path.display())))?;
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader).map_err(|e| {
        ModelError::Format(format!(
            "{} is not a readable GGUF file: {e}",
            path.display()
        ))
    })?;
    Ok((content, reader))
}

fn dequantize(t: &QTensor) -> Result<Vec<f32>, ModelError> {
    Ok(t.dequantize(&Device::Cpu)?
        .flatten_all()?
        .to_vec1::<f32>()?)
}

/// Reads tensors by name from one open GGUF file.
struct TensorReader<'a> {
    content: &'a Content,
    reader: BufReader<File>,
    path: &'a Path,
}

impl TensorReader<'_> {
    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn get(&mut self, name: &str) -> Result<QTensor, ModelError> {
        self.content
            .tensor(&mut self.reader, name, &Device::Cpu)
            .map_err(|e| {
                ModelError::Format(format!("tensor {name} in {}: {e}", self.path.display()))
            })
    }

    fn vector(&mut self, name: &str) -> Result<Vec<f32>, ModelError> {
        dequantize(&self.get(name)?)
    }

    /// A vector the file may or may not hold; `required` makes its absence an error.
    fn optional(&mut self, name: &str, required: bool) -> Result<Option<Vec<f32>>, ModelError> {
        match (self.has(name), required) {
            (true, _) => self.vector(name).map(Some),
            (false, false) => Ok(None),
            (false, true) => Err(ModelError::Format(format!(
                "{} has no tensor {name}, which its architecture needs",
                self.path.display()
            ))),
        }
    }
}

/// Load the weights; `max_layers` keeps only the first L blocks (an early-exit draft model:
/// the target's first layers, then its final norm and LM head).
pub fn load(
    path: &Path,
    backend: MatmulBackend,
    max_layers: Option<usize>,
) -> Result<LoadedGguf, ModelError> {
    let (content, reader) = read_header(path)?;
    let mut config = ModelConfig::from_metadata(&content.metadata)?;
    if let Some(l) = max_layers {
        if l == 0 || l > config.n_layers {
            return Err(ModelError::Invalid(format!(
                "exit layer {l} outside 1..={}",
                config.n_layers
            )));
        }
        config.n_layers = l;
    }
    let mut tensors = TensorReader {
        content: &content,
        reader,
        path,
    };
    let embd = tensors.get("token_embd.weight")?;
    let (vocab, hidden) = embd.shape().dims2()?;
    if (vocab, hidden) != (config.vocab_size, config.hidden) {
        return Err(ModelError::Format(format!(
            "token_embd is {vocab} x {hidden}, expected vocab {} x hidden {}",
            config.vocab_size, config.hidden
        )));
    }
    let embeddings = match vocab * hidden <= F32_EMBEDDING_LIMIT {
        true => Embeddings::F32(dequantize(&embd)?),
        false => Embeddings::Rows(QuantRows::new(&embd)?),
    };
    let mut layers = Vec::with_capacity(config.n_layers);
    let mut dtype = GgmlDType::F32;
    for l in 0..config.n_layers {
        let layer = load_layer(&mut tensors, &config, l, backend)?;
        dtype = layer.1;
        layers.push(layer.0);
    }
    let output_norm = tensors.vector("output_norm.weight")?;
    // Tied embeddings: models without `output.weight` reuse the token embedding as LM head.
    let lm_head = match tensors.has("output.weight") {
        true => Linear::new(tensors.get("output.weight")?, backend)?,
        false => Linear::new(embd, backend)?,
    };
    let rope_freqs = tensors.optional("rope_freqs.weight", false)?;
    let weights = Weights {
        embeddings,
        layers,
        output_norm,
        lm_head,
        rope_freqs,
        dtype,
    };
    Ok(LoadedGguf {
        content,
        config,
        weights,
    })
}

/// Block `l`'s weights, and the quant type of its Q projection.
fn load_layer(
    tensors: &mut TensorReader<'_>,
    config: &ModelConfig,
    l: usize,
    backend: MatmulBackend,
) -> Result<(LayerWeights, GgmlDType), ModelError> {
    let name = |suffix: &str| format!("blk.{l}.{suffix}");
    let arch = config.arch;
    let wq = tensors.get(&name("attn_q.weight"))?;
    let dtype = wq.dtype();
    let qkv = vec![
        wq,
        tensors.get(&name("attn_k.weight"))?,
        tensors.get(&name("attn_v.weight"))?,
    ];
    let biases = ["attn_q.bias", "attn_k.bias", "attn_v.bias"].map(&name);
    let qkv_bias = match biases.iter().any(|b| tensors.has(b)) {
        false => None,
        true => {
            let mut all = Vec::new();
            for b in &biases {
                all.extend(tensors.vector(b)?);
            }
            Some(all)
        }
    };
    let layer = LayerWeights {
        attn_norm: tensors.vector(&name("attn_norm.weight"))?,
        qkv: LinearGroup::new(qkv, backend)?,
        qkv_bias,
        q_norm: tensors.optional(&name("attn_q_norm.weight"), arch.qk_norm())?,
        k_norm: tensors.optional(&name("attn_k_norm.weight"), arch.qk_norm())?,
        wo: Linear::new(tensors.get(&name("attn_output.weight"))?, backend)?,
        post_attn_norm: tensors.optional(&name("post_attention_norm.weight"), arch.post_norms())?,
        ffn_norm: tensors.vector(&name("ffn_norm.weight"))?,
        gate_up: LinearGroup::new(
            vec![
                tensors.get(&name("ffn_gate.weight"))?,
                tensors.get(&name("ffn_up.weight"))?,
            ],
            backend,
        )?,
        down: Linear::new(tensors.get(&name("ffn_down.weight"))?, backend)?,
        post_ffn_norm: tensors.optional(&name("post_ffw_norm.weight"), arch.post_norms())?,
    };
    let q_width = config.n_heads * config.head_dim;
    let want_bias = q_width + 2 * config.kv_width();
    if layer
        .qkv_bias
        .as_ref()
        .is_some_and(|b| b.len() != want_bias)
    {
        return Err(ModelError::Format(format!(
            "blk.{l}: Q/K/V biases must hold {want_bias} values"
        )));
    }
    let norm_ok = |n: &Option<Vec<f32>>| n.as_ref().is_none_or(|n| n.len() == config.head_dim);
    if !norm_ok(&layer.q_norm) || !norm_ok(&layer.k_norm) {
        return Err(ModelError::Format(format!(
            "blk.{l}: Q/K norms must hold {} values (the head width)",
            config.head_dim
        )));
    }
    Ok((layer, dtype))
}

/// The GGUF tensor the LM head is: `output.weight`, or the tied token embedding.
pub fn lm_head_tensor(path: &Path) -> Result<(QTensor, ModelConfig), ModelError> {
    let (content, mut reader) = read_header(path)?;
    let config = ModelConfig::from_metadata(&content.metadata)?;
    let name = if content.tensor_infos.contains_key("output.weight") {
        "output.weight"
    } else {
        "token_embd.weight"
    };
    let t = content
        .tensor(&mut reader, name, &Device::Cpu)
        .map_err(|e| ModelError::Format(format!("tensor {name} in {}: {e}", path.display())))?;
    Ok((t, config))
}
