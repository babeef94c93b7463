//! Reading a GGUF model file's tensors by role, for any device: the header and config, the
//! embedding, each block's tensors (validated against the config once, here), the final
//! norm, the LM head (or the tied embedding) and Llama 3's rope factors. Each backend turns
//! the quantized matrices into its own form; nothing here holds device memory.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Content};
use candle_core::quantized::QTensor;
use candle_core::Device;

use crate::model::config::ModelConfig;
use crate::model::ModelError;

/// One block's tensors: matrices still quantized, vectors dequantized.
pub struct LayerTensors {
    pub attn_norm: Vec<f32>, // [hidden]
    /// Q, K, V projections ([out, hidden] each).
    pub qkv: Vec<QTensor>,
    /// Q, K and V biases side by side (Qwen 2), [q_width + 2 * kv_width].
    pub qkv_bias: Option<Vec<f32>>,
    /// Per-head RMSNorm weights of Q and K (Qwen 3, Gemma 3), [head_dim] each.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: QTensor,
    pub post_attn_norm: Option<Vec<f32>>, // [hidden] (Gemma 3)
    pub ffn_norm: Vec<f32>,               // [hidden]
    /// Gate and up projections.
    pub gate_up: Vec<QTensor>,
    pub down: QTensor,
    pub post_ffn_norm: Option<Vec<f32>>, // [hidden] (Gemma 3)
}

/// A model file's tensors, each block already turned into a backend's layer `L`.
pub struct ModelTensors<L> {
    pub content: Content,
    pub config: ModelConfig,
    /// `token_embd.weight`, [vocab, hidden].
    pub embedding: QTensor,
    pub layers: Vec<L>,
    pub output_norm: Vec<f32>, // [hidden]
    /// `output.weight`, or None where the LM head is the tied embedding.
    pub lm_head: Option<QTensor>,
    /// Llama 3's rotary frequency divisors (`rope_freqs.weight`), [rope_dim / 2].
    pub rope_freqs: Option<Vec<f32>>,
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

pub fn dequantize(t: &QTensor) -> Result<Vec<f32>, ModelError> {
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

/// Read a model file; `max_layers` keeps only the first L blocks (an early-exit draft model:
/// the target's first layers, then its final norm and LM head). `layer` turns each block's
/// tensors into the backend's form as they are read, so only one block is held quantized
/// on the host at a time.
pub fn read_model<L, E: From<ModelError>>(
    path: &Path,
    max_layers: Option<usize>,
    mut layer: impl FnMut(usize, LayerTensors) -> Result<L, E>,
) -> Result<ModelTensors<L>, E> {
    let (content, reader) = read_header(path)?;
    let mut config = ModelConfig::from_metadata(&content.metadata)?;
    if let Some(l) = max_layers {
        if l == 0 || l > config.n_layers {
            return Err(ModelError::Invalid(format!(
                "exit layer {l} outside 1..={}",
                config.n_layers
            ))
            .into());
        }
        config.n_layers = l;
    }
    let mut tensors = TensorReader {
        content: &content,
        reader,
        path,
    };
    let embedding = tensors.get("token_embd.weight")?;
    let (vocab, hidden) = embedding.shape().dims2().map_err(ModelError::from)?;
    if (vocab, hidden) != (config.vocab_size, config.hidden) {
        return Err(ModelError::Format(format!(
            "token_embd is {vocab} x {hidden}, expected vocab {} x hidden {}",
            config.vocab_size, config.hidden
        ))
        .into());
    }
    let mut layers = Vec::with_capacity(config.n_layers);
    for l in 0..config.n_layers {
        let t = read_layer(&mut tensors, &config, l)?;
        layers.push(layer(l, t)?);
    }
    let output_norm = tensors.vector("output_norm.weight")?;
    // Tied embeddings: models without `output.weight` reuse the token embedding as LM head.
    let lm_head = match tensors.has("output.weight") {
        true => Some(tensors.get("output.weight")?),
        false => None,
    };
    let rope_freqs = tensors.optional("rope_freqs.weight", false)?;
    Ok(ModelTensors {
        content,
        config,
        embedding,
        layers,
        output_norm,
        lm_head,
        rope_freqs,
    })
}

/// Block `l`'s tensors, checked against the config.
fn read_layer(
    tensors: &mut TensorReader<'_>,
    config: &ModelConfig,
    l: usize,
) -> Result<LayerTensors, ModelError> {
    let name = |suffix: &str| format!("blk.{l}.{suffix}");
    let arch = config.arch;
    let qkv = vec![
        tensors.get(&name("attn_q.weight"))?,
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
    let layer = LayerTensors {
        attn_norm: tensors.vector(&name("attn_norm.weight"))?,
        qkv,
        qkv_bias,
        q_norm: tensors.optional(&name("attn_q_norm.weight"), arch.qk_norm())?,
        k_norm: tensors.optional(&name("attn_k_norm.weight"), arch.qk_norm())?,
        wo: tensors.get(&name("attn_output.weight"))?,
        post_attn_norm: tensors.optional(&name("post_attention_norm.weight"), arch.post_norms())?,
        ffn_norm: tensors.vector(&name("ffn_norm.weight"))?,
        gate_up: vec![
            tensors.get(&name("ffn_gate.weight"))?,
            tensors.get(&name("ffn_up.weight"))?,
        ],
        down: tensors.get(&name("ffn_down.weight"))?,
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
    Ok(layer)
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
