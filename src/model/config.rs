//! Hyper-parameters of a llama-architecture GGUF, read from its metadata.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::ModelError;

/// What the forward pass needs to know about the network's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    pub context_length: usize,
    pub vocab_size: usize,
}

fn get<'a>(md: &'a HashMap<String, Value>, key: &str) -> Result<&'a Value, ModelError> {
    md.get(key)
        .ok_or_else(|| ModelError::Metadata(format!("missing key {key}")))
}

fn get_u32(md: &HashMap<String, Value>, key: &str) -> Result<usize, ModelError> {
    get(md, key)?
        .to_u32()
        .map(|v| v as usize)
        .map_err(|e| ModelError::Metadata(format!("{key}: {e}")))
}

impl ModelConfig {
    /// Reads the `llama.*` keys; refuses other architectures with a clear error.
    pub fn from_metadata(md: &HashMap<String, Value>) -> Result<Self, ModelError> {
        let arch = get(md, "general.architecture")?
            .to_string()
            .map_err(|e| ModelError::Metadata(format!("general.architecture: {e}")))?;
        if arch != "llama" {
            return Err(ModelError::Unsupported(format!(
                "architecture {arch:?} (only llama is supported)"
            )));
        }
        let n_heads = get_u32(md, "llama.attention.head_count")?;
        let hidden = get_u32(md, "llama.embedding_length")?;
        let n_kv_heads = md
            .get("llama.attention.head_count_kv")
            .and_then(|v| v.to_u32().ok())
            .map_or(n_heads, |v| v as usize);
        if n_heads == 0 || hidden % n_heads != 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(ModelError::Metadata(format!(
                "inconsistent heads: hidden {hidden}, heads {n_heads}, kv heads {n_kv_heads}"
            )));
        }
        let head_dim = hidden / n_heads;
        let f32_or =
            |key: &str, default: f32| md.get(key).and_then(|v| v.to_f32().ok()).unwrap_or(default);
        let vocab_size = match md.get("llama.vocab_size").and_then(|v| v.to_u32().ok()) {
            Some(v) => v as usize,
            None => get(md, "tokenizer.ggml.tokens")?
                .to_vec()
                .map_err(|e| ModelError::Metadata(format!("tokenizer.ggml.tokens: {e}")))?
                .len(),
        };
        Ok(Self {
            n_layers: get_u32(md, "llama.block_count")?,
            hidden,
            ffn: get_u32(md, "llama.feed_forward_length")?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dim: md
                .get("llama.rope.dimension_count")
                .and_then(|v| v.to_u32().ok())
                .map_or(head_dim, |v| v as usize),
            rope_base: f32_or("llama.rope.freq_base", 10_000.0),
            rms_eps: f32_or("llama.attention.layer_norm_rms_epsilon", 1e-5),
            context_length: get_u32(md, "llama.context_length").unwrap_or(2048),
            vocab_size,
        })
    }

    /// Floats one token occupies in the KV cache of one layer (K or V).
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
