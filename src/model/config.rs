//! Hyper-parameters of a llama-architecture GGUF, read from its metadata.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::ModelError;

/// The longest context served: a model that declares more is served up to this (the rope
/// table is sized from it: 32 MiB at a head width of 64).
pub const MAX_CONTEXT: usize = 1 << 17;

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
        let config = Self {
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
            context_length: get_u32(md, "llama.context_length")
                .unwrap_or(2048)
                .min(MAX_CONTEXT),
            vocab_size,
        };
        config.check()?;
        Ok(config)
    }

    /// Refuse shapes the forward pass cannot run (a rotary width past the head would index
    /// out of bounds on the first token) or would size absurd tables from.
    fn check(&self) -> Result<(), ModelError> {
        let bad = |what: String| Err(ModelError::Metadata(what));
        if self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return bad(format!(
                "rope.dimension_count {} must be even and in 2..={} (the head width)",
                self.rope_dim, self.head_dim
            ));
        }
        if self.context_length == 0 {
            return bad("context_length is 0".into());
        }
        if self.n_layers == 0 || self.ffn == 0 || self.vocab_size == 0 {
            return bad(format!(
                "empty network: {} layers, ffn {}, vocab {}",
                self.n_layers, self.ffn, self.vocab_size
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return bad(format!("rope.freq_base {} must be > 1", self.rope_base));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return bad(format!(
                "layer_norm_rms_epsilon {} must be >= 0",
                self.rms_eps
            ));
        }
        Ok(())
    }

    /// Floats one token occupies in the KV cache of one layer (K or V).
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Bytes a sequence's cache holds per token: keys and values, f16, every layer.
    pub fn kv_bytes_per_token(&self) -> usize {
        self.n_layers * self.kv_width() * 2 * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(extra: &[(&str, u32)]) -> HashMap<String, Value> {
        let mut md = HashMap::from([
            (
                "general.architecture".to_string(),
                Value::String("llama".into()),
            ),
            ("llama.attention.head_count".to_string(), Value::U32(9)),
            ("llama.attention.head_count_kv".to_string(), Value::U32(3)),
            ("llama.embedding_length".to_string(), Value::U32(576)),
            ("llama.block_count".to_string(), Value::U32(30)),
            ("llama.feed_forward_length".to_string(), Value::U32(1536)),
            ("llama.vocab_size".to_string(), Value::U32(49152)),
            ("llama.context_length".to_string(), Value::U32(8192)),
        ]);
        for (k, v) in extra {
            md.insert(k.to_string(), Value::U32(*v));
        }
        md
    }

    #[test]
    fn smollm2_shape_reads_and_impossible_shapes_are_refused() {
        let c = ModelConfig::from_metadata(&metadata(&[])).unwrap();
        assert_eq!((c.head_dim, c.rope_dim, c.context_length), (64, 64, 8192));
        for bad in [
            ("llama.rope.dimension_count", 128),
            ("llama.rope.dimension_count", 7),
            ("llama.rope.dimension_count", 0),
            ("llama.context_length", 0),
            ("llama.block_count", 0),
        ] {
            let e = ModelConfig::from_metadata(&metadata(&[bad])).unwrap_err();
            assert!(matches!(e, ModelError::Metadata(_)), "{bad:?}: {e}");
        }
        let mut md = metadata(&[]);
        md.insert("llama.rope.freq_base".into(), Value::F32(0.5));
        assert!(ModelConfig::from_metadata(&md).is_err(), "rope base 0.5");
        // A longer declared context is served up to MAX_CONTEXT.
        let long = ModelConfig::from_metadata(&metadata(&[("llama.context_length", u32::MAX)]));
        assert_eq!(long.unwrap().context_length, MAX_CONTEXT);
    }
}
